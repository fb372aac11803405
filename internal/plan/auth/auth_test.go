package auth

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

func TestDecide(t *testing.T) {
	root := []string{"root"}
	cases := []struct {
		name string
		o    Observation
		want plan.Kind
		user string
	}{
		{"off and off", Observation{OperatorUser: "etcd-pilot"}, plan.None, ""},
		{"off wanted, on in etcd", Observation{OperatorUser: "etcd-pilot", State: etcd.AuthState{Enabled: true}}, plan.DisableAuth, ""},
		{"on wanted, nothing yet", Observation{Enabled: true, OperatorUser: "etcd-pilot"}, plan.EnsureRootUser, "root"},
		{"on wanted, no client certificate", Observation{Enabled: true}, plan.Wait, ""},
		{"root exists without the role", Observation{Enabled: true, OperatorUser: "etcd-pilot",
			State: etcd.AuthState{Roles: map[string][]string{"root": {"reader"}}}}, plan.EnsureRootUser, "root"},
		{"root ready, operator missing", Observation{Enabled: true, OperatorUser: "etcd-pilot",
			State: etcd.AuthState{Roles: map[string][]string{"root": root}}}, plan.EnsureRootUser, "etcd-pilot"},
		{"both ready", Observation{Enabled: true, OperatorUser: "etcd-pilot",
			State: etcd.AuthState{Roles: map[string][]string{"root": root, "etcd-pilot": root}}}, plan.EnableAuth, ""},
		{"on and on", Observation{Enabled: true, OperatorUser: "etcd-pilot",
			State: etcd.AuthState{Enabled: true, Roles: map[string][]string{"root": root, "etcd-pilot": root}}}, plan.None, ""},
		// The operator's user lost the root role, or its certificate now carries another
		// name, while auth is on: only root can repair it, so it says how.
		{"operator's role revoked", Observation{Enabled: true, OperatorUser: "etcd-pilot",
			State: etcd.AuthState{Enabled: true, Roles: map[string][]string{"root": root, "etcd-pilot": nil}}}, plan.Wait, ""},
		{"operator's certificate renamed", Observation{Enabled: true, OperatorUser: "pilot-2",
			State: etcd.AuthState{Enabled: true, Roles: map[string][]string{"root": root}}}, plan.Wait, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.o)
			if got.Kind != tc.want || got.User != tc.user {
				t.Fatalf("got %s %q, want %s %q", got.Kind, got.User, tc.want, tc.user)
			}
			if got.Kind != plan.None && got.Reason == "" {
				t.Fatal("a step without a reason")
			}
		})
	}
}

// TestConverges runs the planner against a fake etcd from every start until it settles, as
// the controller does one step per pass.
func TestConverges(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		f := &etcd.Fake{AuthEnabled: !enabled}
		for pass := 0; ; pass++ {
			if pass > 5 {
				t.Fatalf("enabled=%v: no convergence", enabled)
			}
			st, _ := f.Auth(t.Context(), []string{RootUser, "etcd-pilot"})
			s := Decide(Observation{Enabled: enabled, OperatorUser: "etcd-pilot", State: st})
			switch s.Kind {
			case plan.None:
				if f.AuthEnabled != enabled {
					t.Fatalf("settled with auth %v, want %v", f.AuthEnabled, enabled)
				}
			case plan.EnsureRootUser:
				_ = f.EnsureRootUser(t.Context(), s.User, "")
				continue
			case plan.EnableAuth, plan.DisableAuth:
				_ = f.SetAuth(t.Context(), s.Kind == plan.EnableAuth)
				continue
			}
			break
		}
	}
}

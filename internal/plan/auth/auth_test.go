package auth

import (
	"slices"
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

// TestRenamesTheOperatorsUser (issue 26): the operator of a cluster created before secure
// defaults authenticates as etcd-pilot, the user every such cluster's operator certificate
// names. Against a fake etcd, one step per pass as the controller takes them, with the
// certificate renamed once the step records it: the cluster's own user gets the root role
// first, then the certificate its name, then etcd-pilot goes; the operator is root in every
// pass. With authentication off no user is needed first.
func TestRenamesTheOperatorsUser(t *testing.T) {
	const legacy, own = "etcd-pilot", "etcd-pilot-0123456789abcdef0123456789abcdef"
	for _, on := range []bool{true, false} {
		f := &etcd.Fake{AuthEnabled: on, Users: map[string][]string{RootUser: {"root"}, legacy: {"root"}}}
		user := legacy
		var kinds []plan.Kind
		for pass := 0; ; pass++ {
			if pass > 6 {
				t.Fatalf("auth %v: no convergence after %v", on, kinds)
			}
			o := Observation{Enabled: on, OperatorUser: user, LegacyUser: legacy, PerClusterUser: own}
			st, _ := f.Auth(t.Context(), Users(o))
			o.State = st
			if on && !slices.Contains(st.Roles[user], "root") {
				t.Fatalf("pass %d: the operator's user %s is not root (%v)", pass, user, st.Roles)
			}
			s := Decide(o)
			if s.Kind == plan.None {
				break
			}
			kinds = append(kinds, s.Kind)
			switch s.Kind {
			case plan.EnsureRootUser:
				_ = f.EnsureRootUser(t.Context(), s.User, "")
			case plan.AdoptOperatorUser:
				user = s.User
			case plan.RemoveUser:
				_ = f.RemoveUser(t.Context(), s.User)
			default:
				t.Fatalf("pass %d: unexpected %s", pass, s.Kind)
			}
		}
		want := []plan.Kind{plan.EnsureRootUser, plan.AdoptOperatorUser, plan.RemoveUser}
		if !on {
			want = want[1:]
		}
		if !slices.Equal(kinds, want) || user != own {
			t.Errorf("auth %v: steps %v, user %s; want %v and %s", on, kinds, user, want, own)
		}
		if _, ok := f.Users[legacy]; ok {
			t.Errorf("auth %v: etcd user %s is left: another cluster's operator certificate names it", on, legacy)
		}
	}
	// The client side's certificate is the user's (source Secret): nothing is renamed.
	o := Observation{Enabled: true, OperatorUser: legacy, LegacyUser: legacy,
		State: etcd.AuthState{Enabled: true, Roles: map[string][]string{RootUser: {"root"}, legacy: {"root"}}}}
	if s := Decide(o); s.Kind != plan.None {
		t.Errorf("a certificate the operator does not name: %s", s.Kind)
	}
}

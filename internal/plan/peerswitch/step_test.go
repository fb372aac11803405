package peerswitch

import (
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// TestStep: the switch proposes a URL move only when no other step is under way and the
// planner named one; a URL without a host waits and says why.
func TestStep(t *testing.T) {
	move := &Decision{Message: "moving", Update: &Update{ID: 7, Member: "etcd-1",
		From: []string{peerURL("etcd-1", httpMain)}, To: httpsTr}}
	other := plan.Step{Kind: plan.DeletePod, Member: "etcd-2"}
	for _, tc := range []struct {
		name string
		a    plan.Step
		d    *Decision
		want plan.Step
	}{
		{name: "no switch runs", a: plan.Step{Kind: plan.None}, want: plan.Step{Kind: plan.None}},
		{name: "another step goes first", a: other, d: move, want: other},
		{name: "nothing to move", a: plan.Step{Kind: plan.None}, d: &Decision{}, want: plan.Step{Kind: plan.None}},
		{name: "no URL to move from", a: plan.Step{Kind: plan.None}, d: &Decision{Update: &Update{Member: "etcd-1", To: httpsTr}}, want: plan.Step{Kind: plan.None}},
		{name: "the member's URL moves on its own host", a: plan.Step{Kind: plan.None}, d: move,
			want: plan.Step{Kind: plan.UpdatePeerURL, Member: "etcd-1", ID: 7, PeerURL: "https://etcd-1.etcd.ns.svc.cluster.local:2382", Reason: v1alpha1.ReasonSwitchingPeerTLS,
				Message: "moving the peer URL of etcd-1 from http://etcd-1.etcd.ns.svc.cluster.local:2380 to https://etcd-1.etcd.ns.svc.cluster.local:2382: moving"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Step(tc.a, tc.d, peerPort, transitionPort); got.Kind != tc.want.Kind || got.Member != tc.want.Member || got.ID != tc.want.ID ||
				got.PeerURL != tc.want.PeerURL || got.Reason != tc.want.Reason || got.Message != tc.want.Message {
				t.Fatalf("Step = %+v, want %+v", got, tc.want)
			}
		})
	}
	bad := &Decision{Update: &Update{Member: "etcd-1", From: []string{"http://:2380"}, To: httpsTr}}
	if got := Step(plan.Step{Kind: plan.None}, bad, peerPort, transitionPort); got.Kind != plan.Wait || !strings.Contains(got.Message, "has no host") {
		t.Fatalf("a URL without a host: %+v", got)
	}
}

// TestStatus counts the members whose one peer URL is the target on the peer port.
func TestStatus(t *testing.T) {
	if st := Status(Observation{Target: HTTPS}, Decision{}); st != nil {
		t.Fatalf("no switch runs: %+v", st)
	}
	o := Observation{Target: HTTPS, PeerPort: peerPort, Members: members(httpsMain, httpsTr, httpMain)}
	d := Decision{Render: Listeners{Main: HTTPS, Transition: HTTPS}, Switching: true, Message: "round 2"}
	st := Status(o, d)
	if st == nil || st.PeerPort != HTTPS || st.TransitionPort != HTTPS || st.Target != HTTPS || st.Members != 3 || st.MembersOnTarget != 1 || st.Message != "round 2" {
		t.Fatalf("Status = %+v", st)
	}
}

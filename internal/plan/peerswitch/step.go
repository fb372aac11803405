package peerswitch

import (
	"fmt"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// Step proposes the peer switch's next URL move when no other step is under way (a is
// None): the member's URL moves to the destination the planner named, on the member's own
// host. d is the switch's decision of this pass, nil when no switch runs; peerPort and
// transitionPort are the ports of the pass's render.
func Step(a plan.Step, d *Decision, peerPort, transitionPort int32) plan.Step {
	if a.Kind != plan.None || d == nil || d.Update == nil {
		return a
	}
	u := d.Update
	if len(u.From) == 0 {
		return a
	}
	to, err := MovedURL(u.From[0], u.To, peerPort, transitionPort)
	if err != nil {
		return plan.Step{Kind: plan.Wait, Member: u.Member, Reason: v1alpha1.ReasonSwitchingPeerTLS, Message: err.Error()}
	}
	return plan.Step{Kind: plan.UpdatePeerURL, Member: u.Member, ID: u.ID, PeerURL: to, Reason: v1alpha1.ReasonSwitchingPeerTLS,
		Message: fmt.Sprintf("moving the peer URL of %s from %s to %s: %s", u.Member, strings.Join(u.From, ","), to, d.Message)}
}

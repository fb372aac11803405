package maintenance

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// TestOver: the planner's step over the one the planners above decided. Its AdvanceLog while a
// defragmentation is recorded beats even an action; otherwise an action above stands, and its
// own step replaces a None, or a Wait only when etcd lists an alarm.
func TestOver(t *testing.T) {
	none := plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
	wait := plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonMemberUnhealthy}
	act := plan.Step{Kind: plan.DeletePod, Member: "e-2", Reason: v1alpha1.ReasonRollingOut}
	tests := []struct {
		name  string
		a     plan.Step
		o     Observation
		asked bool
		kind  plan.Kind
	}{
		{"nothing above, nothing to do", none, cluster(3), true, plan.None},
		{"nothing above, a member to defragment", none, with(cluster(3), sizes(2, 400, 100)), true, plan.Defragment},
		{"a wait above, no alarm: the wait stands", wait, with(cluster(3), sizes(2, 400, 100)), true, plan.Wait},
		{"a wait above, an alarm: the planner's step", wait, with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace)), true, plan.Compact},
		{"an action above stands", act, with(cluster(3), sizes(2, 400, 100)), false, plan.DeletePod},
		{"a recorded defragmentation: its AdvanceLog beats an action", act, with(cluster(3), defragging(1, 1000)), true, plan.AdvanceLog},
		{"a recorded defragmentation that waits: the action stands", act, with(cluster(3), defragging(1, 900)), true, plan.DeletePod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Asked(tt.a, tt.o.Defragmentation != nil); got != tt.asked {
				t.Fatalf("Asked = %v, want %v", got, tt.asked)
			}
			if got := Over(tt.a, tt.o); got.Kind != tt.kind {
				t.Fatalf("Over = %+v, want %s", got, tt.kind)
			}
		})
	}
}

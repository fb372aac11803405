package metrics

import (
	"errors"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
)

// TestTotalOutageShowsInOnePass (path 6 of issue 9): with no member able to read the member
// list, the member table shows no healthy member and no leader, and the has-leader gauge
// drops to 0, in the first pass that sees it.
func TestTotalOutageShowsInOnePass(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "outage", "ns"
	healthy := observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, Etcd: testutil.EtcdObserved(3, 1, nil, nil)}
	status.Set(c, healthy, render.Topology{Selector: labels.Everything()})
	Record(c)
	if got := seriesOf(t, "etcdpilot_cluster_has_leader", "ns", "outage")[""]; got != 1 {
		t.Fatalf("healthy: has_leader %v", got)
	}
	outage := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, Reached: 1, EtcdErr: errors.New("context deadline exceeded")}
	status.Set(c, outage, render.Topology{Selector: labels.Everything()})
	Record(c)
	if len(c.Status.Members) != 3 {
		t.Fatalf("the member table went away: %+v", c.Status.Members)
	}
	for _, m := range c.Status.Members {
		if m.Healthy || m.Leader {
			t.Fatalf("during the outage member %s is healthy=%v leader=%v", m.Name, m.Healthy, m.Leader)
		}
	}
	if got := seriesOf(t, "etcdpilot_cluster_has_leader", "ns", "outage"); got[""] != 0 || len(got) != 1 {
		t.Fatalf("outage: has_leader %v", got)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded); cond.Reason != v1alpha1.ReasonQuorumLost {
		t.Fatalf("Degraded %s/%s", cond.Status, cond.Reason)
	}
	// One member of three answering with the member list (etcd 3.5 serves it without a
	// quorum): no member is healthy either.
	lone := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 1, 3), EtcdAsked: true, Etcd: testutil.EtcdObserved(3, 0, []uint64{2, 3}, nil)}
	status.Set(c, lone, render.Topology{Selector: labels.Everything()})
	for _, m := range c.Status.Members {
		if m.Healthy {
			t.Fatalf("without a quorum member %s is reported healthy", m.Name)
		}
	}
}

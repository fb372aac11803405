package metrics

import (
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// TestTotalOutageShowsInOnePass (path 6 of issue 9): with no member able to read the member
// list, the member table shows no healthy member and no leader, and the has-leader gauge
// drops to 0, in the first pass that sees it.
func TestTotalOutageShowsInOnePass(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "outage", "ns"
	healthy := observe.Observation{SpecReplicas: 3, StatefulSet: stsOf(3, 3, 3), EtcdAsked: true, Etcd: etcdOf(3, 1, nil, nil)}
	status.Set(c, healthy, render.Topology{Selector: labels.Everything()})
	Record(c)
	if got := seriesOf(t, "etcdpilot_cluster_has_leader", "ns", "outage")[""]; got != 1 {
		t.Fatalf("healthy: has_leader %v", got)
	}
	outage := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: stsOf(3, 3, 3), EtcdAsked: true, Reached: 1, EtcdErr: errors.New("context deadline exceeded")}
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
	lone := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: stsOf(3, 1, 3), EtcdAsked: true, Etcd: etcdOf(3, 0, []uint64{2, 3}, nil)}
	status.Set(c, lone, render.Topology{Selector: labels.Everything()})
	for _, m := range c.Status.Members {
		if m.Healthy {
			t.Fatalf("without a quorum member %s is reported healthy", m.Name)
		}
	}
}

func stsOf(replicas, ready, updated int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: replicas, ReadyReplicas: ready,
			UpdatedReplicas: updated, CurrentRevision: "a", UpdateRevision: "a"},
	}
}

// cluster builds an observation of n voting members; unhealthy lists members that do not
// answer, alarms members that report errors.
func etcdOf(n int, leader uint64, unhealthy []uint64, alarms []uint64) *etcd.Observed {
	o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := 1; i <= n; i++ {
		id := uint64(i)
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: id, Name: "m" + string(rune('0'+i)), ClientURLs: []string{"u"}})
		switch {
		case slices.Contains(unhealthy, id):
			o.StatusErr[id] = errors.New("connection refused")
		case slices.Contains(alarms, id):
			o.Status[id] = etcd.MemberStatus{ID: id, Leader: leader, Errors: []string{"NOSPACE"}, Version: "3.6.16"}
		default:
			o.Status[id] = etcd.MemberStatus{ID: id, Leader: leader, Version: "3.6.16"}
		}
	}
	return o
}

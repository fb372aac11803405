package testutil

import (
	"errors"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"k8s.io/utils/ptr"
)

// StatefulSet is a member StatefulSet of generation 1, observed, with replicas, ready and
// updated pods (the status tests' fixture).
func StatefulSet(replicas, ready, updated int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: replicas, ReadyReplicas: ready,
			UpdatedReplicas: updated, CurrentRevision: "a", UpdateRevision: "a"},
	}
}

// EtcdObserved builds an observation of n voting members; unhealthy lists members that do not
// answer, alarms members that report errors.
func EtcdObserved(n int, leader uint64, unhealthy []uint64, alarms []uint64) *etcd.Observed {
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

package controllers

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

func rolloutCluster(leader uint64, unhealthy ...uint64) *etcd.Observed {
	o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := uint64(0); i < 3; i++ {
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: i + 1, Name: "e-" + string(rune('0'+i)), ClientURLs: []string{"u"}})
		if !contains(unhealthy, i+1) {
			o.Status[i+1] = etcd.MemberStatus{ID: i + 1, Leader: leader}
		}
	}
	return o
}

func pods(revs ...string) []rolloutPod {
	var out []rolloutPod
	for i, r := range revs {
		out = append(out, rolloutPod{Name: "e-" + string(rune('0'+i)), Ordinal: int32(i), Ready: true, Revision: r})
	}
	return out
}

func TestDecideRollout(t *testing.T) {
	tests := []struct {
		name   string
		o      rolloutObservation
		kind   actionKind
		member string
		target uint64
	}{
		{"all updated", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("new", "new", "new"), Etcd: rolloutCluster(1)}, actNone, "", 0},
		{"StatefulSet behind", rolloutObservation{UpdateRevision: "new", StsCaughtUp: false, Pods: pods("old", "old", "old"), Etcd: rolloutCluster(1)}, actWait, "", 0},
		{"followers first, highest ordinal", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "old"), Etcd: rolloutCluster(1)}, actDeletePod, "e-2", 0},
		{"next follower", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "new"), Etcd: rolloutCluster(1)}, actDeletePod, "e-1", 0},
		{"leader last: move leadership to an updated member", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "new", "new"), Etcd: rolloutCluster(1)}, actMoveLeader, "e-0", 2},
		{"former leader is a follower now", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "new", "new"), Etcd: rolloutCluster(2)}, actDeletePod, "e-0", 0},
		{"an unhealthy member stops the rollout", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "new"), Etcd: rolloutCluster(1, 3)}, actWait, "", 0},
		{"a restarting pod stops the rollout", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: func() []rolloutPod { p := pods("old", "old", "new"); p[2].Ready = false; return p }(), Etcd: rolloutCluster(1)}, actWait, "", 0},
		{"no leader", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "old"), Etcd: rolloutCluster(0)}, actWait, "", 0},
		{"etcd unreachable", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "old")}, actWait, "", 0},
		{"a learner joining", rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old", "old", "old"), Etcd: func() *etcd.Observed { o := rolloutCluster(1); o.Cluster.Members[2].IsLearner = true; return o }()}, actWait, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := decideRollout(tt.o)
			if a.Kind != tt.kind || (tt.member != "" && a.Member != tt.member) || a.Target != tt.target || a.Message == "" && a.Kind != actNone {
				t.Fatalf("got %s %s target %d (%s), want %s %s target %d", a.Kind, a.Member, a.Target, a.Message, tt.kind, tt.member, tt.target)
			}
		})
	}
}

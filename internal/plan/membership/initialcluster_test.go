package membership

import (
	"testing"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// TestInitialClusterNamesOnlyMembersThatMayStartEmpty (paths 2, 4 and 5 of issue 9): etcd
// starts a member without data only when the initial cluster names it, so the ConfigMap names
// the founders before formation (always the recorded list), and afterwards only members that
// never started: a learner being added, a founder that starts late. Started members appear
// under an alias, so one that lost its data cannot rejoin under its old identity, even while
// a learner joins.
func TestInitialClusterNamesOnlyMembersThatMayStartEmpty(t *testing.T) {
	peer := func(name string) string { return "http://" + name + ".etcd.ns.svc:2380" }
	member := func(id uint64, name, pod string, learner bool) etcd.Member {
		return etcd.Member{ID: id, Name: name, PeerURLs: []string{peer(pod)}, IsLearner: learner}
	}
	obs := func(members ...etcd.Member) Observation {
		o := Observation{StatefulSet: "etcd", Desired: 5, StsReplicas: 3, Founders: 3, Bootstrapped: true, PeerURL: peer,
			FoundingList: []string{"etcd-0=" + peer("etcd-0"), "etcd-1=" + peer("etcd-1"), "etcd-2=" + peer("etcd-2")}}
		if members != nil {
			o.Etcd = &etcd.Observed{Cluster: etcd.Cluster{Members: members}}
		}
		return o
	}
	formed := []etcd.Member{member(0xa, "etcd-0", "etcd-0", false), member(0xb, "etcd-1", "etcd-1", false), member(0xc, "etcd-2", "etcd-2", false)}
	tests := []struct {
		name        string
		o           Observation
		cluster, st string
	}{
		{"before formation: the recorded founders, even after spec.replicas changed", func() Observation {
			o := obs()
			o.Bootstrapped = false
			return o
		}(), "etcd-0=" + peer("etcd-0") + ",etcd-1=" + peer("etcd-1") + ",etcd-2=" + peer("etcd-2"), "new"},
		{"formed, nobody joining: no member may start empty", obs(formed...), NoMemberMayStart, "existing"},
		{"formed, etcd did not answer in this pass: no member may start empty, never the founders' \"new\"", obs(), NoMemberMayStart, "existing"},
		{"a learner joining: only it by name", obs(append(formed, member(0xd, "", "etcd-3", true))...),
			"etcd-3=" + peer("etcd-3") + ",member-a=" + peer("etcd-0") + ",member-b=" + peer("etcd-1") + ",member-c=" + peer("etcd-2"), "existing"},
		{"a started learner: only it by name (it does not vote; empty, it gets a snapshot)", obs(append(formed, member(0xd, "etcd-3", "etcd-3", true))...),
			"etcd-3=" + peer("etcd-3") + ",member-a=" + peer("etcd-0") + ",member-b=" + peer("etcd-1") + ",member-c=" + peer("etcd-2"), "existing"},
		{"a founder that starts late joins under its name", obs(formed[0], formed[1], member(0xc, "", "etcd-2", false)),
			"etcd-2=" + peer("etcd-2") + ",member-a=" + peer("etcd-0") + ",member-b=" + peer("etcd-1"), "existing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := InitialCluster(tt.o)
			if env["ETCD_INITIAL_CLUSTER"] != tt.cluster || env["ETCD_INITIAL_CLUSTER_STATE"] != tt.st {
				t.Fatalf("got %q %q\nwant %q %q", env["ETCD_INITIAL_CLUSTER"], env["ETCD_INITIAL_CLUSTER_STATE"], tt.cluster, tt.st)
			}
		})
	}
}

package controllers

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
)

var roNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// rolloutCluster is three healthy members e-0..e-2 (IDs 1..3) at raft index 1000, led by leader.
func rolloutCluster(leader uint64) *etcd.Observed {
	o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := uint64(0); i < 3; i++ {
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: i + 1, Name: fmt.Sprintf("e-%d", i), ClientURLs: []string{"u"}})
		o.Status[i+1] = etcd.MemberStatus{ID: i + 1, Leader: leader, RaftIndex: 1000, ClusterVersion: "3.5.0"}
	}
	return o
}

// TestLegacyLogIndex: the raft index is recorded when the cluster version rises from 3.5,
// and cleared once every member applied more than --snapshot-count entries past it.
func TestLegacyLogIndex(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Status.ClusterVersion = "3.5.0"
	obs := func(cv string, applied uint64) observe.Observation {
		e := rolloutCluster(1)
		for id, st := range e.Status {
			st.ClusterVersion, st.RaftIndex, st.AppliedIndex = cv, applied, applied
			e.Status[id] = st
		}
		return observe.Observation{Etcd: e, SnapshotCount: 100, Now: roNow}
	}
	status.Set(c, obs("3.5.0", 500), render.Topology{Selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("still 3.5: legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
	status.Set(c, obs("3.6.0", 600), render.Topology{Selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 600 || c.Status.ClusterVersion != "3.6.0" {
		t.Fatalf("after the rise: legacyLogIndex %d, clusterVersion %s; want 600, 3.6.0", c.Status.LegacyLogIndex, c.Status.ClusterVersion)
	}
	status.Set(c, obs("3.6.0", 700), render.Topology{Selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 600 {
		t.Fatalf("100 entries later (not past --snapshot-count): legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
	status.Set(c, obs("3.6.0", 701), render.Topology{Selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("101 entries later: legacyLogIndex %d, want it cleared", c.Status.LegacyLogIndex)
	}
	// A cluster created on 3.6 never gets one.
	c = &v1alpha1.EtcdCluster{}
	status.Set(c, obs("3.6.0", 10), render.Topology{Selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("created on 3.6: legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
}

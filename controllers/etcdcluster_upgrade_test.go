package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

var roNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// rolloutCluster is three healthy members e-0..e-2 (IDs 1..3) at raft index 1000, led by
// leader, with the listed IDs not answering.
func rolloutCluster(leader uint64, unhealthy ...uint64) *etcd.Observed {
	o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := uint64(0); i < 3; i++ {
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: i + 1, Name: "e-" + string(rune('0'+i)), ClientURLs: []string{"u"}})
		if !contains(unhealthy, i+1) {
			o.Status[i+1] = etcd.MemberStatus{ID: i + 1, Leader: leader, RaftIndex: 1000, ClusterVersion: "3.5.0"}
		}
	}
	return o
}

func pods(revs ...string) []rolloutPod {
	var out []rolloutPod
	for i, r := range revs {
		out = append(out, rolloutPod{Name: "e-" + string(rune('0'+i)), Ordinal: int32(i), Ready: true, NodeReady: true, Revision: r,
			FailingSince: roNow.Add(-time.Hour)})
	}
	return out
}

// ro is a rollout observation of three pods on the given revisions towards "new".
func ro(etcdObs *etcd.Observed, revs ...string) rolloutObservation {
	return rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods(revs...), Etcd: etcdObs, Now: roNow,
		MemberTimeout: 2 * time.Minute, MaxLag: 100, StepVersion: "3.6.16", TargetVersion: "3.6.16"}
}

func TestDecideRollout(t *testing.T) {
	edit := func(o rolloutObservation, f func(*rolloutObservation)) rolloutObservation { f(&o); return o }
	// failing: pod k restarted d ago and does not run; its member does not answer.
	failing := func(o rolloutObservation, k int, d time.Duration) rolloutObservation {
		o.Pods[k].Ready, o.Pods[k].FailingSince, o.Pods[k].Problem = false, roNow.Add(-d), "CrashLoopBackOff: back-off 40s; last exit code 1: exec: no such file; 4 restarts"
		delete(o.Etcd.Status, uint64(k+1))
		return o
	}
	tests := []struct {
		name   string
		o      rolloutObservation
		kind   actionKind
		reason string
		member string
		target uint64
		msg    string // a part of the message
	}{
		{name: "all updated, same minor", o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) { o.StepVersion, o.TargetVersion = "3.5.35", "3.5.35" }),
			kind: actNone},
		{name: "all updated to a new minor: wait for etcd to raise the cluster version", o: ro(rolloutCluster(1), "new", "new", "new"),
			kind: actWait, reason: v1alpha1.ReasonVersionStep, msg: "raise the cluster version (now 3.5.0) to 3.6"},
		{name: "all updated, cluster version unknown", o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) {
			for id, st := range o.Etcd.Status {
				st.ClusterVersion = ""
				o.Etcd.Status[id] = st
			}
		}), kind: actNone},
		{name: "StatefulSet behind", o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *rolloutObservation) { o.StsCaughtUp = false }), kind: actWait},
		{name: "followers first, highest ordinal", o: ro(rolloutCluster(1), "old", "old", "old"), kind: actDeletePod, member: "e-2"},
		{name: "next follower", o: ro(rolloutCluster(1), "old", "old", "new"), kind: actDeletePod, member: "e-1"},
		{name: "leader last: move leadership to an updated member", o: ro(rolloutCluster(1), "old", "new", "new"), kind: actMoveLeader, member: "e-0", target: 2},
		{name: "leadership goes to the updated member furthest ahead",
			o: edit(ro(rolloutCluster(1), "old", "new", "new"), func(o *rolloutObservation) {
				st := o.Etcd.Status[3]
				st.RaftIndex = 1010
				o.Etcd.Status[3] = st
			}), kind: actMoveLeader, member: "e-0", target: 3},
		{name: "former leader is a follower now", o: ro(rolloutCluster(2), "old", "new", "new"), kind: actDeletePod, member: "e-0"},
		{name: "an outdated member whose etcd does not answer but whose pod is ready waits", o: ro(rolloutCluster(1, 2), "old", "old", "new"),
			kind: actWait, reason: v1alpha1.ReasonRolloutWaiting, msg: "member e-1 is not ready for the rollout: etcd does not answer"},
		{name: "an outdated member that is down restarts first", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 1, time.Minute),
			kind: actDeletePod, member: "e-1", msg: "down on the previous one"},
		{name: "a restarting member holds the rollout", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 30*time.Second),
			kind: actWait, reason: v1alpha1.ReasonMemberRestarting, member: "e-2", msg: "30s ago"},
		{name: "a restarted member trailing the leader holds the rollout",
			o: edit(ro(rolloutCluster(1), "old", "old", "new"), func(o *rolloutObservation) {
				st := o.Etcd.Status[3]
				st.RaftIndex = 800
				o.Etcd.Status[3] = st
				o.Pods[2].FailingSince = roNow.Add(-20 * time.Second)
			}), kind: actWait, reason: v1alpha1.ReasonMemberRestarting, member: "e-2", msg: "trails the leader by 200 raft entries"},
		{name: "a restarted member failing past the timeout stops the rollout", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 3*time.Minute),
			kind: actWait, reason: v1alpha1.ReasonUpgradeStalled, member: "e-2", msg: "within 2m0s (spec.upgrade.memberTimeout): CrashLoopBackOff"},
		{name: "a stalled rollout does not restart a down outdated member",
			o:    failing(failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 3*time.Minute), 1, time.Minute),
			kind: actWait, reason: v1alpha1.ReasonUpgradeStalled, member: "e-2"},
		{name: "rollback: the member down on the reverted template restarts first",
			o: failing(ro(rolloutCluster(1), "new", "new", "old"), 2, 10*time.Minute), kind: actDeletePod, member: "e-2", msg: "costs no quorum"},
		{name: "a down member on a NotReady node is left to membership",
			o:    edit(failing(ro(rolloutCluster(1), "new", "new", "old"), 2, 10*time.Minute), func(o *rolloutObservation) { o.Pods[2].NodeReady = false }),
			kind: actWait, reason: v1alpha1.ReasonRolloutWaiting},
		{name: "a restarting pod stops the rollout", o: edit(ro(rolloutCluster(1), "old", "old", "new"), func(o *rolloutObservation) {
			o.Pods[2].Ready, o.Pods[2].FailingSince = false, roNow.Add(-5*time.Second)
		}), kind: actWait, reason: v1alpha1.ReasonMemberRestarting, msg: "its pod is not ready"},
		{name: "an alarm stops the rollout",
			o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *rolloutObservation) {
				st := o.Etcd.Status[2]
				st.Errors = []string{"memberID:2 alarm:NOSPACE"}
				o.Etcd.Status[2] = st
			}), kind: actWait, reason: v1alpha1.ReasonRolloutWaiting, msg: "alarm:NOSPACE"},
		{name: "no leader", o: ro(rolloutCluster(0), "old", "old", "old"), kind: actWait},
		{name: "etcd unreachable", o: ro(nil, "old", "old", "old"), kind: actWait},
		{name: "a learner joining", o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *rolloutObservation) { o.Etcd.Cluster.Members[2].IsLearner = true }),
			kind: actWait, msg: "learner e-2"},
		{name: "intermediate step done: wait for the cluster version",
			o:    edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) { o.TargetVersion = "3.7.3" }),
			kind: actWait, reason: v1alpha1.ReasonVersionStep, msg: "raise the cluster version (now 3.5.0) to 3.6"},
		{name: "intermediate step done and the cluster version raised",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) {
				o.TargetVersion = "3.7.3"
				for id, st := range o.Etcd.Status {
					st.ClusterVersion = "3.6.0"
					o.Etcd.Status[id] = st
				}
			}),
			kind: actWait, reason: v1alpha1.ReasonVersionStep, msg: "the next step towards 3.7.3 starts"},
		{name: "3.5-era log entries: append entries until every member snapshots past them",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) {
				o.TargetVersion, o.LegacyLogIndex, o.SnapshotCount = "3.7.3", 900, 10000
				for id, st := range o.Etcd.Status {
					st.ClusterVersion, st.AppliedIndex = "3.6.0", 1000
					o.Etcd.Status[id] = st
				}
			}),
			kind: actAdvanceLog, reason: v1alpha1.ReasonVersionStep, msg: "appending 4000 entries that change no key (lease grant and revoke), 9901 still needed"},
		{name: "3.5-era log entries: every member has snapshotted past them",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *rolloutObservation) {
				o.TargetVersion, o.LegacyLogIndex, o.SnapshotCount = "3.7.3", 900, 100
				for id, st := range o.Etcd.Status {
					st.ClusterVersion, st.AppliedIndex = "3.6.0", 1001
					o.Etcd.Status[id] = st
				}
			}),
			kind: actWait, reason: v1alpha1.ReasonVersionStep, msg: "every member has taken a raft snapshot past index 900"},
		{name: "single member restarts in place", o: rolloutObservation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old"), Now: roNow, MemberTimeout: time.Minute,
			Etcd: &etcd.Observed{Cluster: etcd.Cluster{Members: []etcd.Member{{ID: 1, Name: "e-0", ClientURLs: []string{"u"}}}}, Status: map[uint64]etcd.MemberStatus{1: {ID: 1, Leader: 1}}}},
			kind: actDeletePod, member: "e-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := decideRollout(tt.o)
			if a.Kind != tt.kind || (tt.member != "" && a.Member != tt.member) || a.Target != tt.target || a.Message == "" && a.Kind != actNone ||
				(tt.reason != "" && a.Reason != tt.reason) || !strings.Contains(a.Message, tt.msg) {
				t.Fatalf("got %s %s %s target %d (%s)\nwant %s %s %s target %d (%s)", a.Kind, a.Reason, a.Member, a.Target, a.Message,
					tt.kind, tt.reason, tt.member, tt.target, tt.msg)
			}
		})
	}
}

func TestRolloutProgress(t *testing.T) {
	o := ro(rolloutCluster(1), "old", "new", "new")
	a := decideRollout(o)
	s := rolloutProgress(o, a)
	if s == nil || s.Member != "e-0" || s.UpdatedMembers != 2 || s.PendingMembers != 1 || s.StepVersion != "3.6.16" || s.Message == "" {
		t.Fatalf("progress %+v", s)
	}
	if s := rolloutProgress(ro(rolloutCluster(1), "new", "new", "new"), membershipAction{Kind: actNone}); s != nil {
		t.Fatalf("no rollout runs, progress %+v", s)
	}
	o = ro(rolloutCluster(1), "new", "new", "new")
	if s := rolloutProgress(o, decideRollout(o)); s == nil || s.PendingMembers != 0 || !strings.Contains(s.Message, "cluster version") {
		t.Fatalf("waiting for the cluster version, progress %+v", s)
	}
	o = ro(rolloutCluster(1), "new", "new", "new")
	o.TargetVersion = "3.7.3"
	if s := rolloutProgress(o, decideRollout(o)); s == nil || s.StepVersion != "3.6.16" || s.PendingMembers != 0 {
		t.Fatalf("between two steps, progress %+v", s)
	}
}

// TestCrashLoopOnNewTemplateIsNotReplaced: a member that crash loops on the new pod template
// while the others still run the old one failed an upgrade; replacing it would lose its data
// and start a fresh member on the same failing template.
func TestCrashLoopOnNewTemplateIsNotReplaced(t *testing.T) {
	crash := func(p *podInfo) {
		p.CrashLooping, p.FailingSince, p.Ready, p.Running, p.RestartCount = true, mdT0.Add(-time.Hour), false, false, 9
	}
	rev := func(r string) func(*podInfo) { return func(p *podInfo) { p.Revision = r } }
	f := cluster3(3).down(2).pod(0, rev("old")).pod(1, rev("old")).pod(2, rev("new")).pod(2, crash)
	o := f.obs()
	o.UpdateRevision = "new"
	if a := decideMembership(o); a.Kind != actWait || a.Reason != reasonMemberUnhealthy {
		t.Fatalf("during a rollout: got %s %s (%s), want a wait for the unhealthy member", a.Kind, a.Reason, a.Message)
	}
	f = cluster3(3).down(2).pod(0, rev("new")).pod(1, rev("new")).pod(2, rev("new")).pod(2, crash)
	o = f.obs()
	o.UpdateRevision = "new"
	if a := decideMembership(o); a.Kind != actRecordIntent || a.Member != "etc-2" {
		t.Fatalf("without a rollout: got %s %s (%s), want the replacement to start", a.Kind, a.Member, a.Message)
	}
}

// TestLegacyLogIndex: the raft index is recorded when the cluster version rises from 3.5,
// and cleared once every member applied more than --snapshot-count entries past it.
func TestLegacyLogIndex(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Status.ClusterVersion = "3.5.0"
	obs := func(cv string, applied uint64) observation {
		e := rolloutCluster(1)
		for id, st := range e.Status {
			st.ClusterVersion, st.RaftIndex, st.AppliedIndex = cv, applied, applied
			e.Status[id] = st
		}
		return observation{etcd: e, snapshotCount: 100, now: roNow}
	}
	setStatus(c, obs("3.5.0", 500), topology{selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("still 3.5: legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
	setStatus(c, obs("3.6.0", 600), topology{selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 600 || c.Status.ClusterVersion != "3.6.0" {
		t.Fatalf("after the rise: legacyLogIndex %d, clusterVersion %s; want 600, 3.6.0", c.Status.LegacyLogIndex, c.Status.ClusterVersion)
	}
	setStatus(c, obs("3.6.0", 700), topology{selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 600 {
		t.Fatalf("100 entries later (not past --snapshot-count): legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
	setStatus(c, obs("3.6.0", 701), topology{selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("101 entries later: legacyLogIndex %d, want it cleared", c.Status.LegacyLogIndex)
	}
	// A cluster created on 3.6 never gets one.
	c = &v1alpha1.EtcdCluster{}
	setStatus(c, obs("3.6.0", 10), topology{selector: labels.Everything()})
	if c.Status.LegacyLogIndex != 0 {
		t.Fatalf("created on 3.6: legacyLogIndex %d", c.Status.LegacyLogIndex)
	}
}

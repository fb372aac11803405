package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

var roNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// rolloutCluster is three healthy members e-0..e-2 (IDs 1..3) at raft index 1000, led by
// leader, with the listed IDs not answering.
func rolloutCluster(leader uint64, unhealthy ...uint64) *etcd.Observed {
	o := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := uint64(0); i < 3; i++ {
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: i + 1, Name: "e-" + string(rune('0'+i)), ClientURLs: []string{"u"}})
		if !slices.Contains(unhealthy, i+1) {
			o.Status[i+1] = etcd.MemberStatus{ID: i + 1, Leader: leader, RaftIndex: 1000, ClusterVersion: "3.5.0"}
		}
	}
	return o
}

func pods(revs ...string) []Pod {
	var out []Pod
	for i, r := range revs {
		out = append(out, Pod{Name: "e-" + string(rune('0'+i)), Ordinal: int32(i), Ready: true, NodeReady: true, Revision: r,
			FailingSince: roNow.Add(-time.Hour)})
	}
	return out
}

// ro is a rollout observation of three pods on the given revisions towards "new".
func ro(etcdObs *etcd.Observed, revs ...string) Observation {
	return Observation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods(revs...), Etcd: etcdObs, Now: roNow,
		MemberTimeout: 2 * time.Minute, MaxLag: 100, StepVersion: "3.6.16", TargetVersion: "3.6.16"}
}

func TestDecideRollout(t *testing.T) {
	edit := func(o Observation, f func(*Observation)) Observation { f(&o); return o }
	// failing: pod k restarted d ago and does not run; its member does not answer.
	failing := func(o Observation, k int, d time.Duration) Observation {
		o.Pods[k].Ready, o.Pods[k].FailingSince, o.Pods[k].Problem = false, roNow.Add(-d), "CrashLoopBackOff: back-off 40s; last exit code 1: exec: no such file; 4 restarts"
		delete(o.Etcd.Status, uint64(k+1))
		return o
	}
	tests := []struct {
		name   string
		o      Observation
		kind   plan.Kind
		reason string
		member string
		target uint64
		msg    string // a part of the message
	}{
		{name: "all updated, same minor", o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) { o.StepVersion, o.TargetVersion = "3.5.35", "3.5.35" }),
			kind: plan.None},
		{name: "all updated to a new minor: wait for etcd to raise the cluster version", o: ro(rolloutCluster(1), "new", "new", "new"),
			kind: plan.Wait, reason: v1alpha1.ReasonVersionStep, msg: "raise the cluster version (now 3.5.0) to 3.6"},
		{name: "all updated, cluster version unknown", o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) {
			for id, st := range o.Etcd.Status {
				st.ClusterVersion = ""
				o.Etcd.Status[id] = st
			}
		}), kind: plan.None},
		{name: "StatefulSet behind", o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *Observation) { o.StsCaughtUp = false }), kind: plan.Wait},
		// The pass that applies a new template reads the old StatefulSet from its cache: every
		// pod runs its revision, which says nothing about the template just applied.
		{name: "StatefulSet behind with every pod on its revision: not reconciled",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) {
				o.StsCaughtUp = false
				o.StepVersion, o.TargetVersion = "3.5.35", "3.5.35"
			}),
			kind: plan.Wait, reason: v1alpha1.ReasonRollingOut, msg: "StatefulSet as last applied"},
		{name: "StatefulSet behind on a new minor: no claim that every member runs it",
			o:    edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) { o.StsCaughtUp = false }),
			kind: plan.Wait, reason: v1alpha1.ReasonRollingOut, msg: "StatefulSet as last applied"},
		{name: "followers first, highest ordinal", o: ro(rolloutCluster(1), "old", "old", "old"), kind: plan.DeletePod, member: "e-2"},
		{name: "next follower", o: ro(rolloutCluster(1), "old", "old", "new"), kind: plan.DeletePod, member: "e-1"},
		{name: "leader last: move leadership to an updated member", o: ro(rolloutCluster(1), "old", "new", "new"), kind: plan.MoveLeader, member: "e-0", target: 2},
		{name: "leadership goes to the updated member furthest ahead",
			o: edit(ro(rolloutCluster(1), "old", "new", "new"), func(o *Observation) {
				st := o.Etcd.Status[3]
				st.RaftIndex = 1010
				o.Etcd.Status[3] = st
			}), kind: plan.MoveLeader, member: "e-0", target: 3},
		{name: "former leader is a follower now", o: ro(rolloutCluster(2), "old", "new", "new"), kind: plan.DeletePod, member: "e-0"},
		{name: "an outdated member whose etcd does not answer but whose pod is ready waits", o: ro(rolloutCluster(1, 2), "old", "old", "new"),
			kind: plan.Wait, reason: v1alpha1.ReasonRolloutWaiting, msg: "member e-1 is not ready for the rollout: etcd does not answer"},
		{name: "an outdated member that is down restarts first", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 1, time.Minute),
			kind: plan.DeletePod, member: "e-1", msg: "down on the previous one"},
		{name: "a restarting member holds the rollout", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 30*time.Second),
			kind: plan.Wait, reason: v1alpha1.ReasonMemberRestarting, member: "e-2", msg: "30s ago"},
		{name: "a restarted member trailing the leader holds the rollout",
			o: edit(ro(rolloutCluster(1), "old", "old", "new"), func(o *Observation) {
				st := o.Etcd.Status[3]
				st.RaftIndex = 800
				o.Etcd.Status[3] = st
				o.Pods[2].FailingSince = roNow.Add(-20 * time.Second)
			}), kind: plan.Wait, reason: v1alpha1.ReasonMemberRestarting, member: "e-2", msg: "trails the leader by 200 raft entries"},
		{name: "a restarted member failing past the timeout stops the rollout", o: failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 3*time.Minute),
			kind: plan.Wait, reason: v1alpha1.ReasonUpgradeStalled, member: "e-2", msg: "within 2m0s (spec.upgrade.memberTimeout): CrashLoopBackOff"},
		{name: "a stalled rollout does not restart a down outdated member",
			o:    failing(failing(ro(rolloutCluster(1), "old", "old", "new"), 2, 3*time.Minute), 1, time.Minute),
			kind: plan.Wait, reason: v1alpha1.ReasonUpgradeStalled, member: "e-2"},
		{name: "rollback: the member down on the reverted template restarts first",
			o: failing(ro(rolloutCluster(1), "new", "new", "old"), 2, 10*time.Minute), kind: plan.DeletePod, member: "e-2", msg: "costs no quorum"},
		{name: "a down member on a NotReady node is left to membership",
			o:    edit(failing(ro(rolloutCluster(1), "new", "new", "old"), 2, 10*time.Minute), func(o *Observation) { o.Pods[2].NodeReady = false }),
			kind: plan.Wait, reason: v1alpha1.ReasonRolloutWaiting},
		{name: "a restarting pod stops the rollout", o: edit(ro(rolloutCluster(1), "old", "old", "new"), func(o *Observation) {
			o.Pods[2].Ready, o.Pods[2].FailingSince = false, roNow.Add(-5*time.Second)
		}), kind: plan.Wait, reason: v1alpha1.ReasonMemberRestarting, msg: "its pod is not ready"},
		{name: "an alarm stops the rollout",
			o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *Observation) {
				st := o.Etcd.Status[2]
				st.Errors = []string{"memberID:2 alarm:NOSPACE"}
				o.Etcd.Status[2] = st
			}), kind: plan.Wait, reason: v1alpha1.ReasonRolloutWaiting, msg: "alarm:NOSPACE"},
		{name: "no leader", o: ro(rolloutCluster(0), "old", "old", "old"), kind: plan.Wait},
		{name: "etcd unreachable", o: ro(nil, "old", "old", "old"), kind: plan.Wait},
		{name: "a learner joining", o: edit(ro(rolloutCluster(1), "old", "old", "old"), func(o *Observation) { o.Etcd.Cluster.Members[2].IsLearner = true }),
			kind: plan.Wait, msg: "learner e-2"},
		{name: "intermediate step done: wait for the cluster version",
			o:    edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) { o.TargetVersion = "3.7.3" }),
			kind: plan.Wait, reason: v1alpha1.ReasonVersionStep, msg: "raise the cluster version (now 3.5.0) to 3.6"},
		{name: "intermediate step done and the cluster version raised",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) {
				o.TargetVersion = "3.7.3"
				for id, st := range o.Etcd.Status {
					st.ClusterVersion = "3.6.0"
					o.Etcd.Status[id] = st
				}
			}),
			kind: plan.Wait, reason: v1alpha1.ReasonVersionStep, msg: "the next step towards 3.7.3 starts"},
		{name: "3.5-era log entries: append entries until every member snapshots past them",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) {
				o.TargetVersion, o.LegacyLogIndex, o.SnapshotCount = "3.7.3", 900, 10000
				for id, st := range o.Etcd.Status {
					st.ClusterVersion, st.AppliedIndex = "3.6.0", 1000
					o.Etcd.Status[id] = st
				}
			}),
			kind: plan.AdvanceLog, reason: v1alpha1.ReasonVersionStep, msg: "appending 4000 entries that change no key (lease grant and revoke), 9901 still needed"},
		{name: "3.5-era log entries: every member has snapshotted past them",
			o: edit(ro(rolloutCluster(1), "new", "new", "new"), func(o *Observation) {
				o.TargetVersion, o.LegacyLogIndex, o.SnapshotCount = "3.7.3", 900, 100
				for id, st := range o.Etcd.Status {
					st.ClusterVersion, st.AppliedIndex = "3.6.0", 1001
					o.Etcd.Status[id] = st
				}
			}),
			kind: plan.Wait, reason: v1alpha1.ReasonVersionStep, msg: "every member has taken a raft snapshot past index 900"},
		{name: "single member restarts in place", o: Observation{UpdateRevision: "new", StsCaughtUp: true, Pods: pods("old"), Now: roNow, MemberTimeout: time.Minute,
			Etcd: &etcd.Observed{Cluster: etcd.Cluster{Members: []etcd.Member{{ID: 1, Name: "e-0", ClientURLs: []string{"u"}}}}, Status: map[uint64]etcd.MemberStatus{1: {ID: 1, Leader: 1}}}},
			kind: plan.DeletePod, member: "e-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Decide(tt.o)
			if a.Kind != tt.kind || (tt.member != "" && a.Member != tt.member) || a.Target != tt.target || a.Message == "" && a.Kind != plan.None ||
				(tt.reason != "" && a.Reason != tt.reason) || !strings.Contains(a.Message, tt.msg) {
				t.Fatalf("got %s %s %s target %d (%s)\nwant %s %s %s target %d (%s)", a.Kind, a.Reason, a.Member, a.Target, a.Message,
					tt.kind, tt.reason, tt.member, tt.target, tt.msg)
			}
		})
	}
}

// TestHandOverBeforeTheRestartedPodIsReady: e-1 restarted on the new template and etcd reports
// it healthy and caught up, but its pod waits for its probes. Leadership may move already (to
// the updated member whose pod is ready); no member restarts until e-1's pod is ready, and
// past spec.upgrade.memberTimeout the rollout stalls as before.
func TestHandOverBeforeTheRestartedPodIsReady(t *testing.T) {
	notReady := func(o Observation, k int, d time.Duration) Observation {
		o.Pods[k].Ready, o.Pods[k].FailingSince = false, roNow.Add(-d)
		return o
	}
	// The leader e-0 is the only outdated member: hand over to e-2, whose pod is ready.
	a := Decide(notReady(ro(rolloutCluster(1), "old", "new", "new"), 1, 2*time.Second))
	if a.Kind != plan.MoveLeader || a.Member != "e-0" || a.Target != 3 {
		t.Fatalf("got %s %s target %d (%s), want MoveLeader from e-0 to e-2", a.Kind, a.Member, a.Target, a.Message)
	}
	// After the hand-over e-0 is a follower: it restarts only once e-1's pod is ready.
	a = Decide(notReady(ro(rolloutCluster(3), "old", "new", "new"), 1, 2*time.Second))
	if a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonMemberRestarting || a.Member != "e-1" || !strings.Contains(a.Message, "not ready") {
		t.Fatalf("got %s %s %s (%s), want a MemberRestarting wait for e-1", a.Kind, a.Reason, a.Member, a.Message)
	}
	if a := Decide(ro(rolloutCluster(3), "old", "new", "new")); a.Kind != plan.DeletePod || a.Member != "e-0" {
		t.Fatalf("e-1 ready: got %s %s (%s), want e-0 restarted", a.Kind, a.Member, a.Message)
	}
	// A follower is outdated as well: nothing happens until e-1's pod is ready.
	a = Decide(notReady(ro(rolloutCluster(1), "old", "new", "old"), 1, 2*time.Second))
	if a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonMemberRestarting || a.Member != "e-1" {
		t.Fatalf("got %s %s %s (%s), want a MemberRestarting wait for e-1", a.Kind, a.Reason, a.Member, a.Message)
	}
	// No updated member with a ready pod to take over: wait.
	a = Decide(notReady(ro(rolloutCluster(1), "old", "new", "new"), 1, 2*time.Second))
	if a.Kind != plan.MoveLeader {
		t.Fatalf("setup: %s", a.Message)
	}
	o := notReady(ro(rolloutCluster(1), "old", "new", "new"), 1, 2*time.Second)
	o = notReady(o, 2, 3*time.Second)
	if a := Decide(o); a.Kind != plan.Wait {
		t.Fatalf("two updated pods not ready: got %s %s (%s), want a wait", a.Kind, a.Member, a.Message)
	}
	// etcd does not report e-1 caught up: no hand-over.
	o = notReady(ro(rolloutCluster(1), "old", "new", "new"), 1, 2*time.Second)
	st := o.Etcd.Status[2]
	st.RaftIndex = 10
	o.Etcd.Status[2] = st
	if a := Decide(o); a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonMemberRestarting || !strings.Contains(a.Message, "trails the leader") {
		t.Fatalf("e-1 behind: got %s %s (%s), want a MemberRestarting wait", a.Kind, a.Reason, a.Message)
	}
	// While etcd does not answer on a member restarted a moment ago, the rollout looks often
	// (etcd starting to answer is no Kubernetes event); later, or when it crash loops, not.
	o = ro(rolloutCluster(1, 2), "old", "new", "new")
	o.Pods[1].Ready, o.Pods[1].FailingSince = false, roNow.Add(-2*time.Second)
	if a := Decide(o); a.Reason != v1alpha1.ReasonMemberRestarting || a.RequeueAfter != VersionPoll {
		t.Fatalf("just restarted: got %s %s requeue %s, want a MemberRestarting wait polled every %s", a.Kind, a.Reason, a.RequeueAfter, VersionPoll)
	}
	o.Pods[1].FailingSince = roNow.Add(-RestartPollFor)
	if a := Decide(o); a.RequeueAfter == VersionPoll {
		t.Fatalf("restarted %s ago: still polled every %s", RestartPollFor, VersionPoll)
	}
	o.Pods[1].FailingSince, o.Pods[1].Problem = roNow.Add(-2*time.Second), "CrashLoopBackOff"
	if a := Decide(o); a.RequeueAfter == VersionPoll {
		t.Fatalf("crash looping: still polled every %s", VersionPoll)
	}
	// Past the member timeout a pod that never gets ready stalls the rollout.
	if a := Decide(notReady(ro(rolloutCluster(1), "old", "new", "new"), 1, time.Hour)); a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonUpgradeStalled || a.Member != "e-1" {
		t.Fatalf("past the member timeout: got %s %s %s (%s), want UpgradeStalled", a.Kind, a.Reason, a.Member, a.Message)
	}
}

// TestVersionStepIsPolled: once every member runs the new template, etcd raises the cluster
// version on its own timer and no Kubernetes event says so; the wait asks to be looked at
// again within VersionPoll, and so does the wait before the next minor's step.
func TestVersionStepIsPolled(t *testing.T) {
	o := ro(rolloutCluster(1), "new", "new", "new")
	if a := Decide(o); a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonVersionStep || a.RequeueAfter != VersionPoll {
		t.Fatalf("waiting for etcd to raise the cluster version: got %s %s requeue %s, want a VersionStep wait polled every %s", a.Kind, a.Reason, a.RequeueAfter, VersionPoll)
	}
	o.TargetVersion = "3.7.3"
	for id, st := range o.Etcd.Status {
		st.ClusterVersion = "3.6.0"
		o.Etcd.Status[id] = st
	}
	if a := Decide(o); a.Kind != plan.Wait || a.RequeueAfter != VersionPoll {
		t.Fatalf("between two steps: got %s %s requeue %s, want a wait polled every %s", a.Kind, a.Reason, a.RequeueAfter, VersionPoll)
	}
	// A rollout still restarting members is not polled faster than the controller's default.
	if a := Decide(ro(rolloutCluster(1), "old", "new", "new")); a.RequeueAfter == VersionPoll {
		t.Fatalf("a restart under way is polled every %s: %s %s", VersionPoll, a.Kind, a.Message)
	}
}

func TestRolloutProgress(t *testing.T) {
	o := ro(rolloutCluster(1), "old", "new", "new")
	a := Decide(o)
	s := Progress(o, a)
	if s == nil || s.Member != "e-0" || s.UpdatedMembers != 2 || s.PendingMembers != 1 || s.StepVersion != "3.6.16" || s.Message == "" {
		t.Fatalf("progress %+v", s)
	}
	if s := Progress(ro(rolloutCluster(1), "new", "new", "new"), plan.Step{Kind: plan.None}); s != nil {
		t.Fatalf("no rollout runs, progress %+v", s)
	}
	o = ro(rolloutCluster(1), "new", "new", "new")
	if s := Progress(o, Decide(o)); s == nil || s.PendingMembers != 0 || !strings.Contains(s.Message, "cluster version") {
		t.Fatalf("waiting for the cluster version, progress %+v", s)
	}
	o = ro(rolloutCluster(1), "new", "new", "new")
	o.TargetVersion = "3.7.3"
	if s := Progress(o, Decide(o)); s == nil || s.StepVersion != "3.6.16" || s.PendingMembers != 0 {
		t.Fatalf("between two steps, progress %+v", s)
	}
}

// TestMissingPodStopsTheRollout (path 1 of issue 9): the member restarted last has no pod
// (its new pod was refused at admission, or a quota stops it): the preflight counts members
// from etcd's member list, so no other member restarts until it is back.
func TestMissingPodStopsTheRollout(t *testing.T) {
	o := ro(rolloutCluster(1, 3), "old", "old")
	a := Decide(o)
	if a.Kind != plan.Wait || !strings.Contains(a.Message, "e-2") || !strings.Contains(a.Message, "no pod") {
		t.Fatalf("got %s %s (%s), want a wait naming the missing pod e-2", a.Kind, a.Member, a.Message)
	}
	// Also past the member timeout: the rollout stops and says so.
	o = ro(rolloutCluster(1, 3), "old", "old")
	o.Missing = map[string]time.Time{"e-2": roNow.Add(-time.Hour)}
	if a := Decide(o); a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonUpgradeStalled || !strings.Contains(a.Message, "e-2") {
		t.Fatalf("past the member timeout: got %s %s (%s), want UpgradeStalled", a.Kind, a.Reason, a.Message)
	}
}

// TestVersionWaitPollsOnlyAfterARecentRestart: etcd raising the cluster version is no
// Kubernetes event, so the wait looks every VersionPoll, but only while the newest member pod
// is young; a wait that outlasts a few of etcd's 4 s timer periods falls back to the usual
// interval instead of four passes a second.
func TestVersionWaitPollsOnlyAfterARecentRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		created time.Duration // age of the newest pod
		want    time.Duration
	}{
		{name: "newest pod 3 s old", created: 3 * time.Second, want: VersionPoll},
		{name: "newest pod just under the window", created: VersionPollFor - time.Second, want: VersionPoll},
		{name: "newest pod past the window", created: VersionPollFor + time.Second, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ro(rolloutCluster(1), "new", "new", "new")
			for i := range o.Pods {
				o.Pods[i].CreatedAt = roNow.Add(-time.Hour)
			}
			o.Pods[1].CreatedAt = roNow.Add(-tc.created)
			a := Decide(o)
			if a.Kind != plan.Wait || a.Reason != v1alpha1.ReasonVersionStep {
				t.Fatalf("got %s/%s (%s), want a wait for the cluster version", a.Kind, a.Reason, a.Message)
			}
			if a.RequeueAfter != tc.want {
				t.Fatalf("RequeueAfter %s, want %s", a.RequeueAfter, tc.want)
			}
		})
	}
}

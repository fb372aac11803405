package membership

import (
	"reflect"
	"strings"
	"testing"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// The replacement fast path: the StatefulSet re-creates a replaced member's pod right after
// the old member is removed; its etcd runs before the learner is added, exits (not a member),
// and the kubelet holds the pod in a crash-loop back-off. Such a pod is deleted once.

// replacing is ordinal 1 of three removed and re-added as a learner (ID 0x901, not started);
// its pod (UID pod-1) was created at created, ran etcd from created+0.1 s until exited, and
// crash loops since. With stored, the intent names that run as seen before the add.
func replacing(stored bool, created, exited time.Time) *mdFix {
	f := cluster3(3).removeMember(1).withIntent(membershipIntent{Op: intentReplace, Member: "etc-1", ID: mdID(1),
		ClaimUID: "uid-1", Reason: reasonReplaceMember})
	run := created.Add(100 * time.Millisecond)
	if stored {
		f.intent.RunBeforeAdd = &plan.PodRun{PodUID: "pod-1", StartedAt: run}
	}
	f.members = append(f.members, etcd.Member{ID: 0x901, PeerURLs: []string{mdPeerURL("etc-1")}, IsLearner: true})
	return f.pod(1, func(p *podInfo) {
		*p = podInfo{Name: "etc-1", Ordinal: 1, Exists: true, NodeReady: true, PVCExists: true, PVCUID: "uid-new", UID: "pod-1",
			CrashLooping: true, RestartCount: 1, CreatedAt: created, FailingSince: created, RunAt: run, LastExitRunAt: run, LastExitAt: exited,
			Problem: "CrashLoopBackOff: back-off 10s restarting failed container"}
		if exited.IsZero() {
			p.LastExitRunAt = time.Time{}
		}
	})
}

func sec(s float64) time.Time { return mdT0.Add(time.Duration(s * float64(time.Second))) }

func TestLearnerPodThatRanBeforeTheAddIsRecreatedOnce(t *testing.T) {
	// A timeline like the benchmark's: old member removed at -4 s, pod re-created at -3.8 s,
	// its etcd runs from -3.7 s, the learner is added at -1 s with that run stored first, the
	// run exits; now is 0. The times only describe the story: the rule compares no clocks.
	tests := []struct {
		name   string
		fix    *mdFix
		delete bool
		reason string
	}{
		{name: "the run stored before the add exited before it", fix: replacing(true, sec(-3.8), sec(-3)), delete: true},
		{name: "the run stored before the add exited after it", fix: replacing(true, sec(-3.8), sec(-0.5)), delete: true},
		{name: "the run stored, whatever the node's clock said of it", fix: replacing(true, sec(30), sec(40)), delete: true},
		{name: "a later run exited: failing as a learner, left to replaceAfter",
			fix:    replacing(true, sec(-3.8), sec(-3)).pod(1, func(p *podInfo) { p.RunAt, p.LastExitRunAt, p.LastExitAt = sec(-0.6), sec(-0.6), sec(-0.5) }),
			reason: reasonLearnerStarting},
		{name: "another pod (re-created already)",
			fix: replacing(true, sec(-3.8), sec(-3)).pod(1, func(p *podInfo) { p.UID = "pod-1b" }), reason: reasonLearnerStarting},
		{name: "no run stored (a run the add did not see first)", fix: replacing(false, sec(-3.8), sec(-3)), reason: reasonLearnerStarting},
		{name: "never exited", fix: replacing(true, sec(-3.8), time.Time{}).pod(1, func(p *podInfo) { p.CrashLooping = false }),
			reason: reasonLearnerStarting},
		{name: "exited but not in back-off (restarting now)",
			fix: replacing(true, sec(-3.8), sec(-3)).pod(1, func(p *podInfo) { p.CrashLooping = false }), reason: reasonLearnerStarting},
		{name: "running again",
			fix:    replacing(true, sec(-3.8), sec(-3)).pod(1, func(p *podInfo) { p.CrashLooping, p.Running, p.RunAt = false, true, sec(-0.2) }),
			reason: reasonLearnerStarting},
		{name: "pod terminating already", fix: replacing(true, sec(-3.8), sec(-3)).pod(1, func(p *podInfo) { p.Deleting = true }),
			reason: reasonPodTerminating},
		{name: "learner started (has a name): not this rule",
			fix: func() *mdFix {
				f := replacing(true, sec(-3.8), sec(-3))
				f.members[len(f.members)-1].Name = "etc-1"
				f.status[0x901] = etcd.MemberStatus{ID: 0x901, RaftIndex: 500, IsLearner: true}
				return f
			}(), reason: reasonLearnerCatchingUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.fix.obs()
			a := plan.Gate(Decide(o), o.Evidence())
			if !tt.delete {
				if a.Kind != actWait || a.Reason != tt.reason {
					t.Fatalf("got %s %s (%s), want a wait %s", a.Kind, a.Reason, a.Message, tt.reason)
				}
				return
			}
			if a.Kind != actDeletePod || a.Member != "etc-1" || a.Force || a.Reason != reasonReplaceMember {
				t.Fatalf("got %s member=%q force=%v reason=%s (%s), want DeletePod etc-1", a.Kind, a.Member, a.Force, a.Reason, a.Message)
			}
			for _, s := range []string{"etc-1", "before learner etc-1 was added", "crash-loop back-off", "does not vote"} {
				if !strings.Contains(a.Message, s) {
					t.Errorf("message %q does not say %q", a.Message, s)
				}
			}
			// Once: the pod the StatefulSet makes next is another pod; it is left alone
			// whatever its etcd does, and the learner is still waited for.
			next := tt.fix.pod(1, func(p *podInfo) { p.UID = "pod-1b" })
			o2 := next.obs()
			o2.Now = sec(12)
			if b := plan.Gate(Decide(o2), o2.Evidence()); b.Kind != actWait || b.Reason != reasonLearnerStarting {
				t.Fatalf("re-created pod: got %s %s (%s), want a wait", b.Kind, b.Reason, b.Message)
			}
		})
	}
}

func TestAddLearnerStoresTheRunItSawFirst(t *testing.T) {
	// Ordinal 1 was removed; its pod, re-created at -3.8 s, may have run etcd already.
	fix := func(stored *plan.PodRun, run time.Time, running bool) *mdFix {
		f := cluster3(3).removeMember(1).withIntent(membershipIntent{Op: intentReplace, Member: "etc-1", ID: mdID(1),
			ClaimUID: "uid-1", Reason: reasonReplaceMember, RunBeforeAdd: stored})
		return f.pod(1, func(p *podInfo) {
			*p = podInfo{Name: "etc-1", Ordinal: 1, Exists: true, NodeReady: true, PVCExists: true, PVCUID: "uid-new", UID: "pod-1",
				CreatedAt: sec(-3.8), FailingSince: sec(-3.8), RunAt: run, Running: running}
			if !run.IsZero() && !running {
				p.LastExitRunAt, p.LastExitAt, p.CrashLooping = run, run.Add(time.Second), true
			}
		})
	}
	this := &plan.PodRun{PodUID: "pod-1", StartedAt: sec(-3.7)}
	tests := []struct {
		name  string
		fix   *mdFix
		store bool
	}{
		{name: "etcd has not run: nothing to store", fix: fix(nil, time.Time{}, false)},
		{name: "no pod: nothing to store", fix: fix(nil, time.Time{}, false).noPod(1)},
		{name: "etcd runs, nothing stored", fix: fix(nil, sec(-3.7), true), store: true},
		{name: "etcd ran and exited, nothing stored", fix: fix(nil, sec(-3.7), false), store: true},
		{name: "a later run than the one stored (a refused attempt)",
			fix: fix(&plan.PodRun{PodUID: "pod-1", StartedAt: sec(-20)}, sec(-3.7), false), store: true},
		{name: "a run of another pod is stored", fix: fix(&plan.PodRun{PodUID: "pod-0", StartedAt: sec(-3.7)}, sec(-3.7), false), store: true},
		{name: "this run is stored already: not stored again", fix: fix(this, sec(-3.7), false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := *tt.fix.intent
			o := tt.fix.obs()
			a := plan.Gate(Decide(o), o.Evidence())
			if a.Kind != actAddLearner {
				t.Fatalf("got %s (%s), want AddLearner", a.Kind, a.Message)
			}
			if !tt.store {
				if a.Intent != nil {
					t.Errorf("stores %+v, want nothing stored", *a.Intent)
				}
				return
			}
			want := before
			want.RunBeforeAdd = this
			if a.Intent == nil || !reflect.DeepEqual(*a.Intent, want) {
				t.Errorf("stores %+v, want %+v", a.Intent, want)
			}
			if !reflect.DeepEqual(*tt.fix.intent, before) {
				t.Error("the observed intent was changed")
			}
		})
	}
}

func TestCrashLoopingVoterPodIsNeverDeletedAsEarlyExit(t *testing.T) {
	// A learner for etc-1 is being added; voter etc-2's pod crash loops with an exit before
	// the add: the rule is only about the learner's own pod.
	f := replacing(false, sec(-3.8), sec(-0.5)).pod(2, func(p *podInfo) {
		p.CrashLooping, p.Running, p.Ready, p.CreatedAt, p.LastExitAt, p.FailingSince = true, false, false, sec(-60), sec(-3), sec(-3)
	}).down(2)
	for _, now := range []float64{0, 5, 60} {
		o := f.obs()
		o.Now = sec(now)
		a := plan.Gate(Decide(o), o.Evidence())
		if a.Kind == actDeletePod {
			t.Fatalf("at %vs: %s %s (%s)", now, a.Kind, a.Member, a.Message)
		}
	}
	// The same with the learner promoted: a voter now, its pod is not deleted by this rule.
	g := replacing(true, sec(-3.8), sec(-3))
	last := &g.members[len(g.members)-1]
	last.IsLearner, last.Name = false, "etc-1"
	o := g.obs()
	if a := plan.Gate(Decide(o), o.Evidence()); a.Kind == actDeletePod {
		t.Fatalf("promoted member: %s %s (%s)", a.Kind, a.Member, a.Message)
	}
}

// TestStartingLearnerIsLookedAtSoon: a learner whose etcd container runs is looked at every
// LearnerStartPoll while its pod is young (etcd joining is no Kubernetes event), and at the
// usual interval once it is older or while its container is not running.
func TestStartingLearnerIsLookedAtSoon(t *testing.T) {
	running := func(created time.Time) *mdFix {
		return replacing(false, created, time.Time{}).pod(1, func(p *podInfo) {
			p.CrashLooping, p.Running, p.Problem, p.RestartCount = false, true, "", 0
		})
	}
	tests := []struct {
		name string
		fix  *mdFix
		poll bool
	}{
		{name: "container running, pod 2 s old", fix: running(sec(-2)), poll: true},
		{name: "container running, pod older than the window", fix: running(sec(-2).Add(-LearnerStartPollFor)), poll: false},
		{name: "container in a crash-loop back-off", fix: replacing(false, sec(-0.5), sec(-0.2)), poll: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.fix.obs()
			a := plan.Gate(Decide(o), o.Evidence())
			if a.Kind != actWait || a.Reason != reasonLearnerStarting {
				t.Fatalf("got %s %s (%s), want a wait %s", a.Kind, a.Reason, a.Message, reasonLearnerStarting)
			}
			if got := a.RequeueAfter == LearnerStartPoll; got != tt.poll {
				t.Fatalf("RequeueAfter %s, want the %s poll: %v", a.RequeueAfter, LearnerStartPoll, tt.poll)
			}
		})
	}
}

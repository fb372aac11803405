// Package rollout is the rollout planner: a rolling restart onto the StatefulSet's current pod
// template, one member at a time, followers first and the leader last after a hand-over. It is
// pure: an Observation in, at most one plan.Step out.
package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// DefaultMemberTimeout mirrors the CRD default of spec.upgrade.memberTimeout.
const DefaultMemberTimeout = 5 * time.Minute

// Pod is one member pod as the rollout sees it.
type Pod struct {
	Name      string
	Ordinal   int32
	Ready     bool
	Deleting  bool
	NodeReady bool
	// Revision is the pod's controller-revision-hash label: the StatefulSet template it runs.
	Revision string
	// FailingSince is when the pod last stopped being ready, or its creation when it never was.
	FailingSince time.Time
	// CreatedAt is the pod's creation time.
	CreatedAt time.Time
	// Problem says why the pod does not run, from its container status (empty when running).
	Problem string
}

// Observation is what Decide needs. The caller must guarantee that no
// membership change is under way (decideMembership returned None, or waits only for an
// unhealthy member) and that Etcd was read in this pass.
type Observation struct {
	// UpdateRevision is the StatefulSet's current template revision; pods on another one are
	// outdated.
	UpdateRevision string
	// StsCaughtUp is true once the StatefulSet read in this pass is the one last applied and the
	// StatefulSet controller has observed it (its status then names that template's revision).
	StsCaughtUp bool
	Pods        []Pod
	Etcd        *etcd.Observed
	Now         time.Time
	// MemberTimeout is spec.upgrade.memberTimeout.
	MemberTimeout time.Duration
	// MaxLag is how far (raft entries) a member may trail the leader and count as caught up.
	MaxLag uint64
	// StepVersion is the version rendered in this pass; TargetVersion is spec.version. They
	// differ while the cluster passes through an intermediate minor.
	StepVersion, TargetVersion string
	// Missing holds, for member pods that do not exist, since when the operator has seen them
	// missing (zero when unknown).
	Missing map[string]time.Time
	// LegacyLogIndex is status.legacyLogIndex; SnapshotCount the members' --snapshot-count.
	LegacyLogIndex, SnapshotCount uint64
}

// VersionPoll is how often the cluster version is read while every member runs the new
// template and etcd has not raised it yet. etcd's leader raises it on its own timer (every 4 s,
// and at the first commit of a new leader's term) and nothing shows up as a Kubernetes event,
// so the wait would otherwise end up to a whole requeue interval after etcd's did; this wait
// lasts at most one timer period per step.
const VersionPoll = 250 * time.Millisecond

// VersionPollFor is how long after the newest member pod was created the wait for the cluster
// version polls every VersionPoll, before falling back to the controller's usual interval:
// etcd raises the version within one 4 s timer period of every member running the new
// release, and a wait beyond a few periods is not worth four passes a second.
const VersionPollFor = 15 * time.Second

// RestartPollFor is how long after a member's restart the rollout polls every VersionPoll for
// etcd to answer on it, before falling back to the controller's usual interval: a healthy
// restart takes a few seconds, and a slow one is not worth four passes a second.
const RestartPollFor = 30 * time.Second

// MaxAdvancePerStep bounds the entries one AdvanceLog step appends, so one pass stays short.
const MaxAdvancePerStep = 4000

// Decide returns the next step of a rolling restart onto the StatefulSet's current
// template (the StatefulSet uses OnDelete, so pods change only when deleted), or a wait:
//
//   - a member restarted onto the new template must become healthy, ready and caught up with
//     the leader before anything else restarts; past spec.upgrade.memberTimeout the rollout
//     stops (UpgradeStalled, which degrades the cluster) and the other members keep serving;
//   - an outdated member that is down anyway (crash looping, not answering) restarts first:
//     that costs no quorum, and it is how a rollback reaches a member that failed on the new
//     template;
//   - then the preflight: every member healthy, voting, caught up, no alarm, a known leader;
//   - outdated followers restart one at a time, highest ordinal first; the leader goes last,
//     after MoveLeader hands leadership to an updated member, so no restart costs an election
//     timeout;
//   - once every member runs the template of an intermediate release, the rollout waits for
//     etcd to raise the cluster version (the next pass then renders the next minor).
func Decide(o Observation) plan.Step {
	if o.UpdateRevision == "" {
		return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
	}
	var outdated, updated []Pod
	for _, p := range o.Pods {
		if p.Revision != o.UpdateRevision {
			outdated = append(outdated, p)
		} else {
			updated = append(updated, p)
		}
	}
	// Before the StatefulSet is caught up, its revision and the pods' say nothing about the
	// template just applied: in the pass that applies a new one, the cached copy is still the
	// old one, and every pod looks up to date on it.
	if !o.StsCaughtUp {
		return plan.Waiting(v1alpha1.ReasonRollingOut, "waiting for the StatefulSet controller to observe the StatefulSet as last applied")
	}
	if len(outdated) == 0 {
		return o.afterStep()
	}
	if o.Etcd == nil {
		return plan.Waiting(v1alpha1.ReasonRolloutWaiting, "etcd did not answer; no member is restarted without a healthy quorum")
	}
	leader := o.Etcd.Leader()
	if leader == 0 {
		return plan.Waiting(v1alpha1.ReasonRolloutWaiting, "no leader is known; no member is restarted during an election")
	}
	members := map[string]etcd.Member{}
	for _, m := range o.Etcd.Cluster.Members {
		if m.Name != "" {
			members[m.Name] = m
		}
	}
	// Members are counted from etcd's member list, not from the pods that exist: a member
	// whose pod was not re-created (refused at admission, a quota, a slow informer) is down,
	// and no other member restarts until it is back.
	havePod := map[string]bool{}
	for _, p := range o.Pods {
		havePod[p.Name] = true
	}
	for _, m := range o.Etcd.Cluster.Members {
		if m.Name == "" || havePod[m.Name] {
			continue
		}
		since := o.Missing[m.Name]
		d := plan.Since(o.Now, since)
		if !since.IsZero() && d >= o.MemberTimeout {
			a := plan.Waiting(v1alpha1.ReasonUpgradeStalled, fmt.Sprintf(
				"member %s has had no pod for %s (spec.upgrade.memberTimeout %s): the StatefulSet does not re-create it; check the StatefulSet's events "+
					"for an admission refusal, a ResourceQuota or a policy. The rollout stopped and no other member restarts until %s is back",
				m.Name, d.Round(time.Second), o.MemberTimeout, m.Name))
			a.Member = m.Name
			return a
		}
		a := plan.Waiting(v1alpha1.ReasonMemberRestarting, fmt.Sprintf(
			"member %s has no pod: the StatefulSet has not re-created it yet; no other member restarts until it is back (%s)", m.Name, o.versionText()))
		a.Member = m.Name
		if !since.IsZero() {
			a.RequeueAfter = o.MemberTimeout - d
		}
		return a
	}
	leaderIndex := o.Etcd.Status[leader].RaftIndex
	// etcdUp: etcd says the member answers, follows the leader, reports no alarm and is caught
	// up. up: that, and its pod is ready as well.
	var etcdUp func(Pod) (bool, string)
	up := func(p Pod) (bool, string) {
		if ok, why := etcdUp(p); !ok {
			return false, why
		}
		if !p.Ready || p.Deleting {
			return false, "its pod is not ready"
		}
		return true, ""
	}
	etcdUp = func(p Pod) (bool, string) {
		m, ok := members[p.Name]
		if !ok {
			return false, "it is not a member of the cluster"
		}
		st, ok := o.Etcd.Status[m.ID]
		switch {
		case !ok:
			if err := o.Etcd.StatusErr[m.ID]; err != nil {
				return false, fmt.Sprintf("etcd does not answer: %v", err)
			}
			return false, "etcd does not answer"
		case len(plan.MemberErrors(st)) > 0:
			return false, "it reports " + strings.Join(plan.MemberErrors(st), ", ")
		case st.Leader != leader:
			return false, "it does not follow the leader"
		case leaderIndex > st.RaftIndex+o.MaxLag:
			return false, fmt.Sprintf("it trails the leader by %d raft entries", leaderIndex-st.RaftIndex)
		case p.Deleting:
			return false, "its pod is being deleted"
		}
		return true, ""
	}

	// A member restarted onto the new template comes back before anything else restarts. One
	// that etcd already reports healthy and caught up, whose pod only waits for its probes,
	// holds every restart but not the hand-over below: that moves no member's process and
	// needs a quorum of healthy voters, which etcd shows; and etcd's leader raises the cluster
	// version on a timer that starts with the new leader's term, so handing over early ends the
	// upgrade earlier.
	var restarting *plan.Step
	for _, p := range updated {
		ok, why := up(p)
		if ok {
			continue
		}
		if eok, _ := etcdUp(p); eok && plan.Since(o.Now, p.FailingSince) < o.MemberTimeout {
			if restarting != nil {
				continue
			}
			d := plan.Since(o.Now, p.FailingSince)
			a := plan.Waiting(v1alpha1.ReasonMemberRestarting, fmt.Sprintf("member %s restarted on the new pod template (%s) %s ago and etcd reports it healthy and caught up; its pod is not ready yet; the next member restarts once it is (%d outdated)",
				p.Name, o.versionText(), d.Round(time.Second), len(outdated)))
			a.Member = p.Name
			a.RequeueAfter = o.MemberTimeout - d
			restarting = &a
			continue
		}
		if p.Problem != "" {
			why = p.Problem
		}
		d := plan.Since(o.Now, p.FailingSince)
		if d >= o.MemberTimeout && !p.Deleting {
			a := plan.Waiting(v1alpha1.ReasonUpgradeStalled, fmt.Sprintf(
				"member %s has not become healthy on the new pod template (%s) within %s (spec.upgrade.memberTimeout): %s. "+
					"The rollout stopped; %d members keep serving on the previous template. Fix the cause and the rollout resumes "+
					"(a failing pod restarts by itself, or delete it), or set spec.version back to the version the other members run to roll %s back",
				p.Name, o.versionText(), o.MemberTimeout, why, len(outdated), p.Name))
			a.Member = p.Name
			return a
		}
		a := plan.Waiting(v1alpha1.ReasonMemberRestarting, fmt.Sprintf("member %s restarted on the new pod template (%s) %s ago and is not back yet: %s; the next member restarts once it is healthy and caught up (%d outdated)",
			p.Name, o.versionText(), d.Round(time.Second), why, len(outdated)))
		a.Member = p.Name
		if !p.Deleting {
			a.RequeueAfter = o.MemberTimeout - d
			if p.Problem == "" && d < RestartPollFor {
				// etcd starting to answer is no Kubernetes event; the hand-over above may
				// follow as soon as it does.
				a.RequeueAfter = VersionPoll
			}
		}
		return a
	}

	sort.Slice(outdated, func(i, j int) bool { return outdated[i].Ordinal > outdated[j].Ordinal })
	// An outdated member that is down anyway restarts on the current template: it serves
	// nothing now, so this costs no quorum.
	for _, p := range outdated {
		if restarting != nil {
			break
		}
		m, isMember := members[p.Name]
		_, answers := o.Etcd.Status[m.ID]
		if !isMember || answers || p.Ready || p.Deleting || !p.NodeReady || m.ID == leader {
			continue
		}
		why := p.Problem
		if why == "" {
			why = "its pod is not ready and etcd does not answer"
		}
		return plan.Step{Kind: plan.DeletePod, Member: p.Name, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("restarting member %s on the current pod template (%s): it is down on the previous one (%s), so this costs no quorum", p.Name, o.versionText(), why)}
	}

	// Preflight: every member voting, healthy, caught up, no alarm.
	for _, m := range o.Etcd.Cluster.Members {
		if m.IsLearner {
			return plan.Waiting(v1alpha1.ReasonRolloutWaiting, fmt.Sprintf("learner %s is joining; members restart once it is promoted", plan.NameOr(m)))
		}
		if st, ok := o.Etcd.Status[m.ID]; ok {
			if errs := plan.MemberErrors(st); len(errs) > 0 {
				return plan.Waiting(v1alpha1.ReasonRolloutWaiting, fmt.Sprintf("member %s reports %s; no member restarts while etcd raises an alarm (fix the cause, then etcdctl alarm disarm)",
					plan.NameOr(m), strings.Join(errs, ", ")))
			}
		}
	}
	for _, p := range o.Pods {
		check := up
		if restarting != nil && p.Name == restarting.Member {
			check = etcdUp
		}
		if ok, why := check(p); !ok {
			return plan.Waiting(v1alpha1.ReasonRolloutWaiting, fmt.Sprintf("member %s is not ready for the rollout: %s; the next member restarts once every member is healthy and caught up", p.Name, why))
		}
	}

	for _, p := range outdated {
		if m := members[p.Name]; m.ID == leader {
			continue
		}
		if restarting != nil {
			return *restarting
		}
		return plan.Step{Kind: plan.DeletePod, Member: p.Name, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("restarting follower %s on the new pod template (%s); %d members outdated", p.Name, o.versionText(), len(outdated))}
	}
	// Only the leader is outdated: hand leadership to an updated member, then restart it.
	p := outdated[0]
	var best etcd.Member
	var bestIndex uint64
	for _, q := range updated {
		m := members[q.Name]
		if restarting != nil && q.Name == restarting.Member {
			continue // leadership goes to a member whose pod is ready
		}
		if st := o.Etcd.Status[m.ID]; m.ID != leader && (best.ID == 0 || st.RaftIndex > bestIndex) {
			best, bestIndex = m, st.RaftIndex
		}
	}
	if best.ID == 0 && restarting != nil {
		return *restarting
	}
	if best.ID != 0 {
		return plan.Step{Kind: plan.MoveLeader, Member: p.Name, ID: leader, Target: best.ID, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("moving leadership from %s to the updated member %s before restarting %s", p.Name, best.Name, p.Name)}
	}
	if len(o.Pods) == 1 {
		return plan.Step{Kind: plan.DeletePod, Member: p.Name, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("restarting the only member %s on the new pod template (%s)", p.Name, o.versionText())}
	}
	return plan.Waiting(v1alpha1.ReasonRolloutWaiting, "no updated member can take over leadership yet")
}

// afterStep: every pod runs the current template. Until etcd raises the cluster version to
// that template's minor the upgrade is not done (and an intermediate step cannot go on).
func (o Observation) afterStep() plan.Step {
	if o.StepVersion == "" || o.Etcd == nil {
		return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
	}
	step, err := versions.Parse(o.StepVersion)
	if err != nil {
		return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
	}
	stepping := o.StepVersion != o.TargetVersion
	cv := o.Etcd.ClusterVersion()
	c, err := versions.Parse(cv)
	switch {
	case err != nil && !stepping:
		// etcd did not say; nothing waits on it.
		return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
	case err == nil && !c.Less(versions.Version{Major: step.Major, Minor: step.Minor}):
		if !stepping {
			return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled}
		}
		if o.LegacyLogIndex != 0 {
			return o.advanceLog()
		}
		a := plan.Waiting(v1alpha1.ReasonVersionStep, fmt.Sprintf("every member runs %s and the cluster version is %s; the next step towards %s starts", o.StepVersion, cv, o.TargetVersion))
		a.RequeueAfter = VersionPoll // the next pass renders the next minor
		return a
	}
	if cv == "" {
		cv = "unknown"
	}
	next := ""
	if stepping {
		next = " before the next minor towards " + o.TargetVersion
	}
	a := plan.Waiting(v1alpha1.ReasonVersionStep, fmt.Sprintf("every member runs %s; waiting for etcd to raise the cluster version (now %s) to %s%s",
		o.StepVersion, cv, step.MinorString(), next))
	var newest time.Time
	for _, p := range o.Pods {
		if p.CreatedAt.After(newest) {
			newest = p.CreatedAt
		}
	}
	if plan.Since(o.Now, newest) < VersionPollFor {
		a.RequeueAfter = VersionPoll
	}
	return a
}

// advanceLog: before members move to 3.7, each must have snapshotted past the entries
// written under cluster version 3.5 (etcd 3.7 cannot replay them). Once every member applied
// more than --snapshot-count entries past LegacyLogIndex, each has; an idle cluster gets there
// through entries that change no key.
func (o Observation) advanceLog() plan.Step {
	need := uint64(0)
	for _, m := range o.Etcd.Cluster.Members {
		st, ok := o.Etcd.Status[m.ID]
		if !ok {
			return plan.Waiting(v1alpha1.ReasonRolloutWaiting, fmt.Sprintf("member %s does not answer; the members must each take a raft snapshot past index %d before %s, which cannot replay older entries",
				plan.NameOr(m), o.LegacyLogIndex, o.TargetVersion))
		}
		if want := o.LegacyLogIndex + o.SnapshotCount + 1; st.AppliedIndex < want {
			need = max(need, want-st.AppliedIndex)
		}
	}
	if need == 0 {
		return plan.Waiting(v1alpha1.ReasonVersionStep, fmt.Sprintf("every member has taken a raft snapshot past index %d; the next step towards %s starts", o.LegacyLogIndex, o.TargetVersion))
	}
	n := int(min(need, MaxAdvancePerStep))
	return plan.Step{Kind: plan.AdvanceLog, Entries: n, Reason: v1alpha1.ReasonVersionStep, Message: fmt.Sprintf(
		"the raft logs may still hold entries written under cluster version 3.5 (up to index %d), which etcd %s cannot replay: appending %d entries that change no key (lease grant and revoke), %d still needed for every member to snapshot past them (--snapshot-count %d)",
		o.LegacyLogIndex, o.TargetVersion, n, need, o.SnapshotCount)}
}

// versionText names the version being rolled out, for messages.
func (o Observation) versionText() string {
	switch {
	case o.StepVersion == "":
		return "same version"
	case o.StepVersion != o.TargetVersion && o.TargetVersion != "":
		return fmt.Sprintf("etcd %s, on the way to %s", o.StepVersion, o.TargetVersion)
	}
	return "etcd " + o.StepVersion
}

// Progress is the status of a rollout, nil when none runs.
func Progress(o Observation, a plan.Step) *v1alpha1.UpgradeStatus {
	var pending, updated int32
	for _, p := range o.Pods {
		if p.Revision != o.UpdateRevision {
			pending++
		} else {
			updated++
		}
	}
	if o.UpdateRevision == "" || (pending == 0 && a.Reason != v1alpha1.ReasonVersionStep) {
		return nil
	}
	s := &v1alpha1.UpgradeStatus{StepVersion: o.StepVersion, UpdatedMembers: updated, PendingMembers: pending, Message: a.Message}
	if a.Kind == plan.DeletePod || a.Kind == plan.MoveLeader || a.Reason == v1alpha1.ReasonMemberRestarting || a.Reason == v1alpha1.ReasonUpgradeStalled {
		s.Member = a.Member
	}
	return s
}

// PodsOf is the rollout's view of the member pods.
func PodsOf(pods []plan.Pod) []Pod {
	var out []Pod
	for _, p := range pods {
		if !p.Exists {
			continue
		}
		out = append(out, Pod{Name: p.Name, Ordinal: p.Ordinal, Ready: p.Ready, Deleting: p.Deleting, NodeReady: p.NodeReady,
			Revision: p.Revision, FailingSince: p.FailingSince, CreatedAt: p.CreatedAt, Problem: p.Problem})
	}
	return out
}

package membership

// Package membership is the membership planner: one observation in, at most one next membership action
// out. It does no I/O and reads no clock; the controller gathers a Observation,
// calls Decide, carries out the single action it returns (recording intent first
// where the action says so) and requeues. Every step is chosen so that a crash between any two
// steps leaves a state from which the next pass finishes or undoes the change.
//
// The target state: etcd's member list holds exactly the pods of ordinals 0..Desired-1, all
// started voting members, and the StatefulSet has Desired replicas.
//
// Flows, one step per pass (an intent is recorded before the first irreversible etcd call):
//
//   - scale out, or give a member back to a pod that has none (ScaleOut, ReaddPod):
//     RecordIntent(add) → AddLearner → [DeletePVC of a stale claim] → ScaleStatefulSet →
//     (pod starts, learner catches up) → PromoteLearner → ClearIntent
//   - replace a lost member (ReplaceMember): RecordIntent(replace) → [MoveLeader] →
//     RemoveMember(old ID) → AddLearner (same name and peer URL, new ID) → DeletePVC (old
//     claim) → DeletePod → (the StatefulSet recreates both) → PromoteLearner → ClearIntent
//   - scale in (ScaleIn): RecordIntent(remove) → [MoveLeader] → RemoveMember →
//     ScaleStatefulSet (down) → DeletePVC (retention policy) → ClearIntent
//
// Ordinals of a StatefulSet are contiguous, so a member removed from the middle (scale-in
// takes an unhealthy member first) leaves a pod without a member. That pod is then re-added
// as a learner on a fresh volume (ReaddPod), and the scale-in goes on with the highest
// ordinal. The broken member goes first, so the cluster never keeps a broken member while
// removing a healthy one; the price is one extra learner catch-up.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// Observation is one pass's view of a cluster run as a StatefulSet. The caller must
// guarantee:
//   - Etcd was read in this pass (member list from any member, status from each member that
//     answered), or is nil when no member answered;
//   - SplitBrain is true when members (or member pods) report different cluster IDs;
//   - Pods lists every ordinal that has a pod or a claim, from the same pass;
//   - Intent is the stored intent, or nil;
//   - PeerURL returns the stable peer URL of a pod name, as the chart advertises it;
//   - Desired is at least 1.
type Observation struct {
	// Desired is spec.replicas: the number of voting members wanted.
	Desired int32
	// StatefulSet is the StatefulSet's name; pod names are "<StatefulSet>-<ordinal>".
	StatefulSet string
	// StsReplicas is the StatefulSet's .spec.replicas now. The controller owns it.
	StsReplicas int32
	// Pods describes every ordinal with a pod or a claim.
	Pods []podInfo
	// Etcd is the member list and each member's status; nil when no member answered.
	// Whether quorum holds is computed from it (healthy voting members that follow the
	// leader), not passed in, so it cannot disagree with the member list.
	Etcd *etcd.Observed
	// SplitBrain is true when members disagree on the cluster ID: nothing is done.
	SplitBrain bool
	// FoundingList is the founding member list ("name=peerURL"), recorded at the first render.
	FoundingList []string
	// FormedBefore is true when a pass before this one saw the cluster formed
	// (status.clusterID is set).
	FormedBefore bool
	// Reached is how many members answered a status call when Etcd is nil (no member could
	// read the member list): members alive without a quorum.
	Reached int
	// Founders is the size of the founding member list recorded at the first render (0 when
	// none is recorded): until the cluster forms, the StatefulSet runs exactly these.
	Founders int32
	// Bootstrapped is true when the cluster has formed before (status.clusterID was set). It
	// only chooses between Bootstrapping and a failure reason when the operator must wait.
	Bootstrapped bool
	// Intent is the membership change in progress, nil when none.
	Intent *membershipIntent
	// PeerURL returns the peer URL a pod advertises, from its name.
	PeerURL func(podName string) string
	// LearnerMaxLag is how far (in raft index) a started learner may trail the leader and
	// still be promoted.
	LearnerMaxLag uint64
	// LostMemberTimeout is how long a member's pod may sit on a NotReady node, or crash loop,
	// before the member is replaced.
	LostMemberTimeout time.Duration
	// UpdateRevision is the StatefulSet's current template revision. A member crash looping
	// on it while other pods still run an older one failed an upgrade and is not replaced.
	UpdateRevision string
	// DeletePVCOnScaleIn is the retention policy: delete the claim of a member removed by a
	// scale-in. When false, such claims stay, and a later scale-out onto that ordinal waits
	// for the user to delete the claim (a removed member's data can never be reused).
	DeletePVCOnScaleIn bool
	// Now is the time of the observation.
	Now time.Time
}

// Reasons of membership actions. The controller surfaces them in the Progressing and
// Degraded conditions and in events.
const (
	reasonReconciled      = v1alpha1.ReasonReconciled
	reasonBootstrapping   = v1alpha1.ReasonBootstrapping
	reasonEtcdUnreachable = v1alpha1.ReasonEtcdUnreachable
	reasonQuorumLost      = v1alpha1.ReasonQuorumLost
	reasonNoLeader        = v1alpha1.ReasonNoLeader
	reasonSplitBrain      = v1alpha1.ReasonSplitBrain
	reasonUnknownMember   = v1alpha1.ReasonUnknownMember
	reasonPodNotMember    = v1alpha1.ReasonPodNotMember
	reasonQuorumAtRisk    = v1alpha1.ReasonQuorumAtRisk
	reasonStaleVolume     = v1alpha1.ReasonStaleVolume
	reasonMemberUnhealthy = v1alpha1.ReasonMemberUnhealthy
	reasonInvalidIntent   = v1alpha1.ReasonInvalidIntent

	// Reasons of changes (stored in the intent, reported by each step).
	reasonScaleOut      = v1alpha1.ReasonScaleOut
	reasonScaleIn       = v1alpha1.ReasonScaleIn
	reasonReplaceMember = v1alpha1.ReasonReplaceMember
	reasonReaddPod      = v1alpha1.ReasonReaddPod
	reasonAdoptLearner  = v1alpha1.ReasonAdoptLearner

	// Reasons of waits within a change.
	reasonWaitingForPod       = v1alpha1.ReasonWaitingForPod
	reasonPodTerminating      = v1alpha1.ReasonPodTerminating
	reasonVolumeDeleting      = v1alpha1.ReasonVolumeDeleting
	reasonLearnerStarting     = v1alpha1.ReasonLearnerStarting
	reasonLearnerCatchingUp   = v1alpha1.ReasonLearnerCatchingUp
	reasonMemberStarting      = v1alpha1.ReasonMemberStarting
	reasonLeaderUnreachable   = v1alpha1.ReasonLeaderUnreachable
	reasonLearnerNeverStarted = v1alpha1.ReasonLearnerNeverStarted
	reasonPodNotCreated       = v1alpha1.ReasonPodNotCreated
)

// Decide returns the one next membership step for o. It is pure: the same
// observation gives the same action. It acts only when etcd answered with a member list, the
// members agree on the cluster ID and follow one leader, and a quorum of voting members is
// healthy; otherwise it returns Wait. It never returns a step that could cost quorum: removals
// pass a preflight on the remaining members, only one learner exists at a time, and pods and
// claims are only deleted for members that do not vote.
func Decide(o Observation) membershipAction {
	switch {
	case o.SplitBrain:
		return wait(reasonSplitBrain, "members report different cluster IDs: some member formed or joined another cluster. "+
			"The operator changes nothing until one cluster ID remains; find the odd member (etcdctl endpoint status on each pod), "+
			"save its data if clients wrote to it, then delete its claim and pod so it is re-added as a learner")
	case !o.FormedBefore && o.Founders > 0 && o.StsReplicas != o.Founders:
		// Until the cluster first formed, the StatefulSet runs exactly the founding members
		// recorded at the first render, whatever spec.replicas says meanwhile.
		return membershipAction{Kind: actScaleStatefulSet, Replicas: o.Founders, Reason: reasonBootstrapping,
			Message: fmt.Sprintf("starting the %d founding members", o.Founders)}
	case !o.Bootstrapped:
		msg := fmt.Sprintf("the %d founding members are forming the cluster", o.Founders)
		if o.Desired != o.Founders {
			msg += fmt.Sprintf("; spec.replicas (%d) applies once it has formed", o.Desired)
		}
		return wait(reasonBootstrapping, msg)
	case !o.FormedBefore:
		// The pass that first sees the cluster formed records it (status.clusterID) and
		// changes nothing: founders may still be starting, and their pods and claims may not
		// all show yet.
		return wait(reasonBootstrapping, "the cluster formed; membership is checked from the next pass on")
	case o.Etcd == nil && o.Reached > 0:
		return wait(reasonQuorumLost, fmt.Sprintf("%d members answer, but none can read the member list: quorum is lost and the cluster does not serve. "+
			"The operator changes no membership until a quorum answers. Bring the failed members back (check their pods, nodes and volumes); "+
			"if a majority of members lost their data, restore the cluster from a snapshot", o.Reached))
	case o.Etcd == nil:
		return wait(reasonEtcdUnreachable, "no member answered: the operator changes no membership until a quorum answers. "+
			"Check the member pods, their nodes and volumes; if a majority of members lost their data, restore from a snapshot")
	case len(o.Etcd.Cluster.Members) == 0:
		return wait(reasonBootstrapping, "etcd reports no members yet")
	}
	v := newMemberView(o)
	if len(v.foreign) > 0 {
		return wait(reasonUnknownMember, fmt.Sprintf("etcd lists members that are not pods of StatefulSet %s: %s. "+
			"The operator does not touch them and waits; remove them with etcdctl member remove if nobody needs them",
			o.StatefulSet, strings.Join(v.foreign, ", ")))
	}
	if up := v.answeringVoters(); up < plan.Quorum(v.voters) && o.Bootstrapped {
		return wait(reasonQuorumLost, fmt.Sprintf("%d of %d voting members answer, quorum needs %d: the operator changes no membership "+
			"while quorum is lost. Bring the failed members back (check their pods, nodes and volumes); if a majority of members "+
			"lost their data, restore the cluster from a snapshot", up, v.voters, plan.Quorum(v.voters)))
	}
	if v.leader == 0 || !v.isVoter(v.leader) {
		if !o.Bootstrapped {
			return wait(reasonBootstrapping, "the first members are electing a leader")
		}
		return wait(reasonNoLeader, "the members do not agree on a leader (an election may be under way); no membership change without a leader")
	}
	if v.healthyVoters < plan.Quorum(v.voters) {
		if !o.Bootstrapped {
			return wait(reasonBootstrapping, fmt.Sprintf("%d of %d voting members are up; the cluster forms when %d are", v.healthyVoters, v.voters, plan.Quorum(v.voters)))
		}
		return wait(reasonQuorumLost, fmt.Sprintf("%d of %d voting members are healthy, quorum needs %d: the operator changes no membership "+
			"while quorum is lost. Bring the failed members back (check their pods, nodes and volumes); if a majority of members "+
			"lost their data, restore the cluster from a snapshot", v.healthyVoters, v.voters, plan.Quorum(v.voters)))
	}
	if o.Intent != nil {
		return v.continueIntent(*o.Intent)
	}
	return v.nextChange()
}

// memberView indexes an observation by ordinal. Only Decide builds it, after it
// checked that Etcd is set.
type memberView struct {
	o       Observation
	leader  uint64
	members []etcd.Member         // in the order etcd listed them
	byOrd   map[int32]etcd.Member // member of each ordinal
	ordOf   map[uint64]int32      // ordinal of each member ID
	pods    map[int32]podInfo
	foreign []string // members that map to no ordinal

	voters, healthyVoters int32
	maxMemberOrd          int32 // highest ordinal with a member; -1 when none
}

func newMemberView(o Observation) *memberView {
	v := &memberView{
		o: o, leader: o.Etcd.Leader(), members: o.Etcd.Cluster.Members,
		byOrd: map[int32]etcd.Member{}, ordOf: map[uint64]int32{}, pods: map[int32]podInfo{}, maxMemberOrd: -1,
	}
	limit := max(o.StsReplicas, o.Desired)
	for _, p := range o.Pods {
		v.pods[p.Ordinal] = p
		limit = max(limit, p.Ordinal+1)
	}
	if o.Intent != nil {
		if k, ok := v.ordinalOf(o.Intent.Member); ok {
			limit = max(limit, k+1)
		}
	}
	var unstarted []etcd.Member
	for _, m := range v.members {
		if m.Name == "" {
			unstarted = append(unstarted, m)
			continue
		}
		k, ok := v.ordinalOf(m.Name)
		if _, dup := v.byOrd[k]; !ok || dup {
			v.foreign = append(v.foreign, m.Name)
			continue
		}
		v.index(k, m)
		limit = max(limit, k+1)
	}
	// A member that has not started yet has no name: find its ordinal by its peer URL. Such a
	// member was added for an ordinal near the StatefulSet's range (bootstrap or a learner
	// added before its pod), so a bounded search suffices.
	limit += int32(len(v.members))
	for _, m := range unstarted {
		found := false
		for k := int32(0); k < limit && !found; k++ {
			if _, taken := v.byOrd[k]; !taken && hasPeerURL(m, o.PeerURL(v.podName(k))) {
				v.index(k, m)
				found = true
			}
		}
		if !found {
			v.foreign = append(v.foreign, "unstarted "+etcd.FormatID(m.ID)+" "+strings.Join(m.PeerURLs, ","))
		}
	}
	for _, m := range v.members {
		if _, ok := v.ordOf[m.ID]; !ok || m.IsLearner {
			continue
		}
		v.voters++
		if v.healthy(m) {
			v.healthyVoters++
		}
	}
	return v
}

func (v *memberView) index(k int32, m etcd.Member) {
	v.byOrd[k], v.ordOf[m.ID] = m, k
	v.maxMemberOrd = max(v.maxMemberOrd, k)
}

// hasPeerURL reports whether m has a peer URL on u's host (see plan.SamePeerHost).
func hasPeerURL(m etcd.Member, u string) bool {
	for _, p := range m.PeerURLs {
		if plan.SamePeerHost(p, u) {
			return true
		}
	}
	return false
}

func (v *memberView) podName(k int32) string { return fmt.Sprintf("%s-%d", v.o.StatefulSet, k) }

// ordinalOf parses "<statefulset>-<ordinal>".
func (v *memberView) ordinalOf(name string) (int32, bool) { return plan.Ordinal(v.o.StatefulSet, name) }

func (v *memberView) memberByID(id uint64) (etcd.Member, bool) {
	for _, m := range v.members {
		if m.ID == id {
			return m, true
		}
	}
	return etcd.Member{}, false
}

func (v *memberView) isVoter(id uint64) bool {
	m, ok := v.memberByID(id)
	return ok && !m.IsLearner
}

func (v *memberView) nameOf(m etcd.Member) string {
	if k, ok := v.ordOf[m.ID]; ok {
		return v.podName(k)
	}
	return etcd.FormatID(m.ID)
}

// answeringVoters counts the voting members that answered their status call, whatever
// leader they follow.
func (v *memberView) answeringVoters() int32 {
	var n int32
	for _, m := range v.members {
		if _, ok := v.o.Etcd.Status[m.ID]; ok && !m.IsLearner {
			n++
		}
	}
	return n
}

// answering reports whether the member answered its status call and follows the leader.
// Alarms (Errors) are cluster-wide in etcd and do not make one member unhealthy here.
func (v *memberView) answering(id uint64) bool {
	st, ok := v.o.Etcd.Status[id]
	return ok && v.leader != 0 && st.Leader == v.leader
}

// dataGone says why a started voting member's data is gone, if it is (see plan.DataGone).
func (v *memberView) dataGone(m etcd.Member) (string, bool) {
	if m.Name == "" || m.IsLearner {
		return "", false
	}
	p, ok := v.pods[v.ordOf[m.ID]]
	_, answers := v.o.Etcd.Status[m.ID]
	return plan.DataGone(p, ok, answers)
}

// healthy: started, answering, data in place.
func (v *memberView) healthy(m etcd.Member) bool {
	if m.Name == "" || !v.answering(m.ID) {
		return false
	}
	_, gone := v.dataGone(m)
	return !gone
}

// lost says why member m must be replaced (or, for a learner, get a fresh volume), if it
// must; otherwise, when a timeout runs, how long until it would be.
func (v *memberView) lost(m etcd.Member) (why string, lost bool, after time.Duration) {
	if why, gone := v.dataGone(m); gone {
		return why, true, 0
	}
	if v.answering(m.ID) {
		return "", false, 0
	}
	p, ok := v.pods[v.ordOf[m.ID]]
	if !ok || !p.Exists {
		return "", false, 0
	}
	timeout := v.o.LostMemberTimeout
	if !p.NodeReady {
		d := plan.Since(v.o.Now, p.NodeNotReadySince)
		if d >= timeout {
			return fmt.Sprintf("its pod's node has been NotReady for %s", d.Round(time.Second)), true, 0
		}
		after = timeout - d
	}
	if p.CrashLooping && v.failsOnNewTemplate(p) {
		// It fails on the new pod template while other members still run the previous one: a
		// failed upgrade, not lost data. A fresh member would run the same template; the
		// rollout reports it (UpgradeStalled) and a rollback restarts it on the old one.
		return "", false, after
	}
	if p.CrashLooping {
		d := plan.Since(v.o.Now, p.FailingSince)
		if d >= timeout {
			return fmt.Sprintf("its pod has been crash looping for %s (%d restarts)", d.Round(time.Second), p.RestartCount), true, 0
		}
		if after == 0 || timeout-d < after {
			after = timeout - d
		}
	}
	return "", false, after
}

// failsOnNewTemplate reports whether p runs the StatefulSet's current template while another
// member pod still runs an older one (a rollout is under way).
func (v *memberView) failsOnNewTemplate(p podInfo) bool {
	if v.o.UpdateRevision == "" || p.Revision != v.o.UpdateRevision {
		return false
	}
	for _, q := range v.pods {
		if q.Exists && q.Revision != "" && q.Revision != v.o.UpdateRevision {
			return true
		}
	}
	return false
}

// canRemove is the removal preflight: after removing id, the remaining voting members must
// still have a healthy quorum (and at least one voting member must remain).
func (v *memberView) canRemove(id uint64) (bool, string) {
	m, ok := v.memberByID(id)
	if !ok || m.IsLearner {
		return true, ""
	}
	voters, healthy := v.voters-1, v.healthyVoters
	if v.healthy(m) {
		healthy--
	}
	if voters < 1 {
		return false, fmt.Sprintf("removing %s would leave no voting member; restore the cluster from a snapshot instead", v.nameOf(m))
	}
	if healthy < plan.Quorum(voters) {
		return false, fmt.Sprintf("removing %s would leave %d healthy of %d voting members, quorum needs %d; waiting for members to recover",
			v.nameOf(m), healthy, voters, plan.Quorum(voters))
	}
	return true, ""
}

// moveLeaderFrom hands leadership from the leader to the healthy voting member with the
// highest raft index, before the leader is removed.
func (v *memberView) moveLeaderFrom(m etcd.Member, reason string) membershipAction {
	if !v.answering(m.ID) {
		return wait(reasonLeaderUnreachable, fmt.Sprintf("%s leads but does not answer; waiting for a new election before removing it", v.nameOf(m)))
	}
	var best etcd.Member
	var bestIdx uint64
	found := false
	for _, c := range v.sortedMembers() {
		if c.ID == m.ID || c.IsLearner || !v.healthy(c) {
			continue
		}
		if _, lost, _ := v.lost(c); lost {
			continue
		}
		if idx := v.o.Etcd.Status[c.ID].RaftIndex; !found || idx > bestIdx {
			best, bestIdx, found = c, idx, true
		}
	}
	if !found {
		return wait(reasonQuorumAtRisk, fmt.Sprintf("%s leads and no other healthy voting member can take over; waiting", v.nameOf(m)))
	}
	return membershipAction{Kind: actMoveLeader, Member: v.nameOf(m), ID: m.ID, Target: best.ID, Reason: reason,
		Message: fmt.Sprintf("moving leadership from %s to %s before removing %s", v.nameOf(m), v.nameOf(best), v.nameOf(m))}
}

// sortedMembers returns the mapped members by ordinal.
func (v *memberView) sortedMembers() []etcd.Member {
	ords := make([]int32, 0, len(v.byOrd))
	for k := range v.byOrd {
		ords = append(ords, k)
	}
	sort.Slice(ords, func(i, j int) bool { return ords[i] < ords[j] })
	out := make([]etcd.Member, 0, len(ords))
	for _, k := range ords {
		out = append(out, v.byOrd[k])
	}
	return out
}

// removeStep is the common step of removal and replacement: preflight, leadership away, remove.
func (v *memberView) removeStep(m etcd.Member, reason, why string) membershipAction {
	if ok, msg := v.canRemove(m.ID); !ok {
		return wait(reasonQuorumAtRisk, msg)
	}
	if m.ID == v.leader {
		return v.moveLeaderFrom(m, reason)
	}
	return membershipAction{Kind: actRemoveMember, Member: v.nameOf(m), ID: m.ID, Reason: reason,
		Message: fmt.Sprintf("removing member %s (%s): %s", v.nameOf(m), etcd.FormatID(m.ID), why)}
}

// continueIntent carries a recorded change one step further.
func (v *memberView) continueIntent(in membershipIntent) membershipAction {
	k, ok := v.ordinalOf(in.Member)
	if !ok || (in.Op != intentAdd && in.Op != intentRemove && in.Op != intentReplace) {
		return membershipAction{Kind: actClearIntent, Member: in.Member, Reason: reasonInvalidIntent,
			Message: fmt.Sprintf("dropping a recorded %q intent for %q that names no member pod; the next pass starts afresh", in.Op, in.Member)}
	}
	reason := in.Reason
	if reason == "" {
		reason = map[intentOp]string{intentAdd: reasonScaleOut, intentRemove: reasonScaleIn, intentReplace: reasonReplaceMember}[in.Op]
	}
	if in.Op == intentRemove {
		return v.continueRemove(in, k, reason)
	}
	return v.continueAdd(in, k, reason)
}

func (v *memberView) continueRemove(in membershipIntent, k int32, reason string) membershipAction {
	m, present := v.memberByID(in.ID)
	if !present && in.ID == 0 {
		m, present = v.byOrd[k]
	}
	if present {
		if !m.IsLearner && v.healthy(m) && v.voters <= v.o.Desired {
			return membershipAction{Kind: actClearIntent, Member: in.Member, ID: m.ID, Reason: reason,
				Message: fmt.Sprintf("spec.replicas rose to %d before %s was removed; the removal is dropped", v.o.Desired, in.Member)}
		}
		return v.removeStep(m, reason, "recorded scale-in")
	}
	// The member is gone. Shrink the StatefulSet to the ordinals still wanted or still
	// holding a member: only pods without a member go.
	if top := max(v.o.Desired, v.maxMemberOrd+1); v.o.StsReplicas > top {
		return membershipAction{Kind: actScaleStatefulSet, Member: in.Member, Replicas: top, Reason: reason,
			Message: fmt.Sprintf("member %s is removed; shrinking the StatefulSet from %d to %d replicas", in.Member, v.o.StsReplicas, top)}
	}
	if v.o.DeletePVCOnScaleIn {
		for _, j := range v.sortedPodOrdinals() {
			p := v.pods[j]
			_, hasMember := v.byOrd[j]
			if j >= v.o.StsReplicas && j >= v.o.Desired && !hasMember && p.PVCExists && !p.PVCDeleting && !p.Ephemeral {
				return membershipAction{Kind: actDeletePVC, Member: p.Name, Reason: reason,
					Message: fmt.Sprintf("deleting the volume claim of removed member %s (retention policy: delete on scale-in)", p.Name)}
			}
		}
	}
	return membershipAction{Kind: actClearIntent, Member: in.Member, ID: in.ID, Reason: reason,
		Message: fmt.Sprintf("member %s is removed", in.Member)}
}

func (v *memberView) sortedPodOrdinals() []int32 {
	out := make([]int32, 0, len(v.pods))
	for k := range v.pods {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (v *memberView) continueAdd(in membershipIntent, k int32, reason string) membershipAction {
	name := v.podName(k)
	peerURL := in.PeerURL
	if peerURL == "" {
		peerURL = v.o.PeerURL(name)
	}
	// Replace: the old member goes first (unless it recovered).
	if in.Op == intentReplace && in.ID != 0 {
		if old, ok := v.memberByID(in.ID); ok {
			if _, lost, _ := v.lost(old); !lost && v.healthy(old) {
				return membershipAction{Kind: actClearIntent, Member: name, ID: old.ID, Reason: reason,
					Message: fmt.Sprintf("member %s recovered before it was removed; the replacement is dropped", name)}
			}
			return v.removeStep(old, reason, "it is being replaced")
		}
	}
	m, ok := v.byOrd[k]
	if !ok && plan.Since(v.o.Now, in.StartedAt) >= v.o.LostMemberTimeout {
		return membershipAction{Kind: actClearIntent, Member: name, Reason: reasonLearnerNeverStarted,
			Message: fmt.Sprintf("the change for %s did not finish within %s and no learner is left of it; it starts over", name, v.o.LostMemberTimeout)}
	}
	if !ok {
		if k >= v.o.Desired {
			return membershipAction{Kind: actClearIntent, Member: name, Reason: reason,
				Message: fmt.Sprintf("%s is no longer wanted (spec.replicas is %d) and no learner was added for it; the change is dropped", name, v.o.Desired)}
		}
		if l, ok := v.learner(); ok {
			return membershipAction{Kind: actClearIntent, Member: name, Reason: reason,
				Message: fmt.Sprintf("learner %s exists that this change did not add; dropping the change so that learner is finished first", v.nameOf(l))}
		}
		a := membershipAction{Kind: actAddLearner, Member: name, PeerURL: peerURL, Reason: reason,
			Message: fmt.Sprintf("adding %s as a learner (%s)", name, peerURL)}
		// When the pod has run etcd (before it was a member) and the intent does not name
		// that run yet, the intent is stored with it before etcd is called, so a later pass
		// knows the run started before the learner existed (restartedTooEarly). Only then:
		// each store wakes the controller again, and etcd may refuse the add for some seconds.
		if p := v.pods[k]; p.Exists && !p.RunAt.IsZero() && !in.RunBeforeAdd.Latest(p) {
			adding := in
			adding.RunBeforeAdd = &plan.PodRun{PodUID: p.UID, StartedAt: p.RunAt}
			a.Intent = &adding
		}
		return a
	}
	if !m.IsLearner {
		return membershipAction{Kind: actClearIntent, Member: name, ID: m.ID, Reason: reason,
			Message: fmt.Sprintf("%s is a voting member (%s)", name, etcd.FormatID(m.ID))}
	}
	if k >= v.o.Desired {
		// Learners do not vote: removing one never costs quorum.
		return membershipAction{Kind: actRemoveMember, Member: name, ID: m.ID, Reason: reason,
			Message: fmt.Sprintf("spec.replicas dropped to %d: removing learner %s instead of promoting it", v.o.Desired, name)}
	}
	p := v.pods[k]
	if in.ClaimUID != "" && p.PVCExists && p.PVCUID == in.ClaimUID {
		return v.freshVolume(p, reason, fmt.Sprintf("the volume claim of %s holds data the new learner must not start on", name))
	}
	if k >= v.o.StsReplicas {
		return membershipAction{Kind: actScaleStatefulSet, Member: name, Replicas: k + 1, Reason: reason,
			Message: fmt.Sprintf("growing the StatefulSet to %d replicas to start learner %s", k+1, name)}
	}
	// A learner whose pod never starts (Pending, an image that cannot be pulled, a refused
	// pod) would block every later change: past the deadline it is removed (a learner does
	// not vote, so this costs nothing) and the change is tried again from the start. The
	// deadline counts from the change, or from the pod's creation when the pod came later
	// (the change deletes the pod to start the learner on a fresh volume): a pod re-created
	// a moment ago has not failed to start.
	since := in.StartedAt
	if p.Exists && p.CreatedAt.After(since) {
		since = p.CreatedAt
	}
	if d := plan.Since(v.o.Now, since); m.Name == "" && d >= v.o.LostMemberTimeout {
		why := "its pod does not exist"
		if p.Exists {
			why = "its pod does not run"
		}
		if p.Problem != "" {
			why += " (" + p.Problem + ")"
		}
		return membershipAction{Kind: actRemoveMember, Member: name, ID: m.ID, Reason: reasonLearnerNeverStarted,
			Message: fmt.Sprintf("learner %s has not started within %s (spec.membership.replaceAfter): %s. It is removed so that other changes "+
				"can go on, and added again; fix the cause (check the pod and the StatefulSet's events)", name, d.Round(time.Second), why)}
	}
	if !p.Exists {
		return wait(reasonWaitingForPod, fmt.Sprintf("waiting for the StatefulSet to create pod %s for learner %s", name, name))
	}
	if p.Deleting {
		if !p.NodeReady {
			return membershipAction{Kind: actDeletePod, Member: name, Force: true, Reason: reason,
				Message: fmt.Sprintf("pod %s is stuck terminating on a NotReady node; force-deleting it (its member is a learner and cannot vote)", name)}
		}
		return wait(reasonPodTerminating, fmt.Sprintf("waiting for pod %s to terminate", name))
	}
	if !p.PVCExists && !p.Running {
		return membershipAction{Kind: actDeletePod, Member: name, Force: !p.NodeReady, Reason: reason,
			Message: fmt.Sprintf("pod %s has no volume claim; deleting it so the StatefulSet re-creates both", name)}
	}
	if why, lost, _ := v.lostLearnerPod(p); lost {
		return v.freshVolume(p, reason, fmt.Sprintf("learner %s never caught up: %s", name, why))
	}
	if m.Name == "" && restartedTooEarly(p, in) {
		return membershipAction{Kind: actDeletePod, Member: name, Reason: reason,
			Message: fmt.Sprintf("deleting pod %s so the StatefulSet re-creates it now: its etcd exited at %s, before learner %s was added "+
				"(it was not a member yet), and the kubelet holds it in a crash-loop back-off; the learner does not vote",
				name, p.LastExitAt.UTC().Format(time.RFC3339), name)}
	}
	if m.Name == "" {
		msg := fmt.Sprintf("waiting for learner %s to start (pod restarts: %d)", name, p.RestartCount)
		if p.Problem != "" {
			msg += ": " + p.Problem
		}
		a := wait(reasonLearnerStarting, msg)
		a.RequeueAfter = v.o.LostMemberTimeout - plan.Since(v.o.Now, since)
		if p.Running && p.Problem == "" && plan.Since(v.o.Now, p.CreatedAt) < LearnerStartPollFor {
			// etcd on the learner's pod starting, connecting and publishing its name is no
			// Kubernetes event; the promotion may follow as soon as it has.
			a.RequeueAfter = min(a.RequeueAfter, LearnerStartPoll)
		}
		return a
	}
	if p.PVCFresh {
		// Promoted on a claim not recorded for it, the member would look like one that lost
		// its data, and be replaced.
		return wait(reasonLearnerStarting, fmt.Sprintf("waiting for the volume claim of learner %s to be recorded as its own", name))
	}
	lag, known := v.lag(m.ID)
	if !known || lag > v.o.LearnerMaxLag {
		msg := fmt.Sprintf("waiting for learner %s to catch up with the leader", name)
		if known {
			msg += fmt.Sprintf(" (%d raft entries behind, promoted within %d)", lag, v.o.LearnerMaxLag)
		}
		return wait(reasonLearnerCatchingUp, msg)
	}
	// No quorum preflight: a healthy quorum of n voters plus one caught-up voter is a healthy
	// quorum of n+1.
	return membershipAction{Kind: actPromoteLearner, Member: name, ID: m.ID, Reason: reason,
		Message: fmt.Sprintf("promoting learner %s (%s): it has caught up with the leader", name, etcd.FormatID(m.ID))}
}

// restartedTooEarly reports whether the pod of a learner not started yet waits in a crash-loop
// back-off only because its etcd ran before the learner was added: the run that ended last is
// the one stored in the intent before the add (in.RunBeforeAdd), on the same pod. Such a run
// started with an initial cluster that did not name the learner, so it could only fail. Any
// later run, and any pod created since, fail that match, so the rule deletes each pod at most
// once; a pod whose etcd started after the add and exits is failing as a learner and is left
// to lostLearnerPod.
func restartedTooEarly(p podInfo, in membershipIntent) bool {
	return p.Exists && !p.Deleting && p.CrashLooping && !p.Running && in.RunBeforeAdd.Ended(p)
}

// lostLearnerPod reports whether a learner's pod is failing past the timeout.
func (v *memberView) lostLearnerPod(p podInfo) (string, bool, time.Duration) {
	d := plan.Since(v.o.Now, p.FailingSince)
	switch {
	case !p.NodeReady && plan.Since(v.o.Now, p.NodeNotReadySince) >= v.o.LostMemberTimeout:
		return "its node is NotReady", true, 0
	case p.CrashLooping && d >= v.o.LostMemberTimeout:
		return fmt.Sprintf("its pod has been crash looping for %s", d.Round(time.Second)), true, 0
	}
	return "", false, 0
}

// freshVolume gives the pod p (whose member does not vote) a new, empty claim: delete the
// claim, then the pod (the claim goes once no pod uses it), then the StatefulSet creates both.
func (v *memberView) freshVolume(p podInfo, reason, why string) membershipAction {
	switch {
	case p.PVCExists && !p.PVCDeleting && !p.Ephemeral:
		return membershipAction{Kind: actDeletePVC, Member: p.Name, Reason: reason,
			Message: fmt.Sprintf("deleting the volume claim of %s: %s", p.Name, why)}
	case p.Exists && (!p.Deleting || !p.NodeReady):
		return membershipAction{Kind: actDeletePod, Member: p.Name, Force: !p.NodeReady, Reason: reason,
			Message: fmt.Sprintf("deleting pod %s so the StatefulSet re-creates it on a fresh volume", p.Name)}
	case p.Exists:
		return wait(reasonPodTerminating, fmt.Sprintf("waiting for pod %s to terminate so its old volume claim goes", p.Name))
	}
	return wait(reasonVolumeDeleting, fmt.Sprintf("waiting for the old volume claim of %s to be deleted", p.Name))
}

// learner returns the first learner by ordinal.
func (v *memberView) learner() (etcd.Member, bool) {
	for _, m := range v.sortedMembers() {
		if m.IsLearner {
			return m, true
		}
	}
	return etcd.Member{}, false
}

// lag is how far member id trails the leader's raft index.
func (v *memberView) lag(id uint64) (uint64, bool) {
	st, ok := v.o.Etcd.Status[id]
	ls, lok := v.o.Etcd.Status[v.leader]
	if !ok || !lok {
		return 0, false
	}
	if st.RaftIndex >= ls.RaftIndex {
		return 0, true
	}
	return ls.RaftIndex - st.RaftIndex, true
}

// nextChange starts the next change when no intent is recorded. In order: finish a learner
// someone left behind; scale in; replace a lost member; let the StatefulSet cover every
// member; shrink it to the wanted and used ordinals; give every wanted ordinal a member.
func (v *memberView) nextChange() membershipAction {
	o := v.o
	if l, ok := v.learner(); ok {
		k := v.ordOf[l.ID]
		return v.record(intentAdd, k, 0, "", reasonAdoptLearner,
			fmt.Sprintf("adopting learner %s (%s), added without a recorded intent: it is finished like a scale-out", v.podName(k), etcd.FormatID(l.ID)))
	}

	if v.voters > o.Desired {
		return v.scaleIn()
	}

	var waitAfter time.Duration
	var unhealthy, unstarted, podless []string
	for _, m := range v.sortedMembers() {
		why, lost, after := v.lost(m)
		if p, ok := v.pods[v.ordOf[m.ID]]; ok && !p.Exists && !p.MissingSince.IsZero() && !v.answering(m.ID) {
			if d := plan.Since(o.Now, p.MissingSince); d >= o.LostMemberTimeout {
				podless = append(podless, fmt.Sprintf("%s (for %s)", v.nameOf(m), d.Round(time.Second)))
			} else if rest := o.LostMemberTimeout - d; waitAfter == 0 || rest < waitAfter {
				waitAfter = rest
			}
		}
		if !lost {
			switch {
			case m.Name == "":
				unstarted = append(unstarted, v.nameOf(m))
			case !v.healthy(m):
				unhealthy = append(unhealthy, v.nameOf(m))
			}
			if after > 0 && (waitAfter == 0 || after < waitAfter) {
				waitAfter = after
			}
			continue
		}
		if ok, msg := v.canRemove(m.ID); !ok {
			return wait(reasonQuorumAtRisk, fmt.Sprintf("member %s must be replaced (%s), but %s", v.nameOf(m), why, msg))
		}
		if m.ID == v.leader {
			return v.moveLeaderFrom(m, reasonReplaceMember)
		}
		k := v.ordOf[m.ID]
		return v.record(intentReplace, k, m.ID, v.claimUID(k), reasonReplaceMember,
			fmt.Sprintf("replacing member %s (%s): %s. It is removed, then re-added as a learner on a fresh volume", v.podName(k), etcd.FormatID(m.ID), why))
	}

	if v.maxMemberOrd >= o.StsReplicas {
		return membershipAction{Kind: actScaleStatefulSet, Member: v.podName(v.maxMemberOrd), Replicas: v.maxMemberOrd + 1, Reason: reasonScaleOut,
			Message: fmt.Sprintf("member %s has no pod: growing the StatefulSet from %d to %d replicas", v.podName(v.maxMemberOrd), o.StsReplicas, v.maxMemberOrd+1)}
	}
	if top := max(o.Desired, v.maxMemberOrd+1); o.StsReplicas > top {
		return membershipAction{Kind: actScaleStatefulSet, Member: v.podName(o.StsReplicas - 1), Replicas: top, Reason: reasonScaleIn,
			Message: fmt.Sprintf("pods above ordinal %d have no member: shrinking the StatefulSet from %d to %d replicas", top-1, o.StsReplicas, top)}
	}

	for k := int32(0); k < o.Desired; k++ {
		if _, ok := v.byOrd[k]; ok {
			continue
		}
		return v.fillOrdinal(k)
	}

	switch {
	case len(podless) > 0:
		// A new member would need a pod too: replacing one would only take a voter away.
		return wait(reasonPodNotCreated, fmt.Sprintf("members without a pod: %s. The StatefulSet does not create them: check its events "+
			"(an admission refusal, a ResourceQuota, a policy) and fix the cause; the members are not replaced, since a new member would need a pod as well",
			strings.Join(podless, ", ")))
	case len(unhealthy) > 0:
		a := wait(reasonMemberUnhealthy, fmt.Sprintf("unhealthy members: %s; a member whose pod stays on a NotReady node or crash loops for %s is replaced",
			strings.Join(unhealthy, ", "), o.LostMemberTimeout))
		a.RequeueAfter = waitAfter
		return a
	case len(unstarted) > 0:
		// A voting member in the list that never started (bootstrap, or added as a voter by
		// hand) counts against quorum without serving. Its pod is left to start it; if the
		// pod fails past the timeout, the member is replaced through a learner.
		a := wait(reasonMemberStarting, fmt.Sprintf("voting members not started yet: %s", strings.Join(unstarted, ", ")))
		a.RequeueAfter = waitAfter
		return a
	}
	return membershipAction{Kind: actNone, Reason: reasonReconciled,
		Message: fmt.Sprintf("%d voting members, as spec.replicas asks", v.voters)}
}

// fillOrdinal starts adding a member for a wanted ordinal k that has none.
func (v *memberView) fillOrdinal(k int32) membershipAction {
	name := v.podName(k)
	p, known := v.pods[k]
	switch {
	case known && p.Exists && p.Ready && !p.Deleting:
		// Ready without being a member means its etcd serves some other cluster: it may have
		// bootstrapped on its own and taken writes. Never wipe that without a person.
		return wait(reasonPodNotMember, fmt.Sprintf("pod %s is ready but not a member of the cluster: it may have formed a cluster of its own. "+
			"Check it (etcdctl endpoint status), save its data if clients wrote to it, then delete its volume claim and pod; "+
			"the operator then re-adds it as a learner", name))
	case known && p.Exists && !p.NodeReady && p.Running && p.DataStamp == "" && !p.Deleting:
		// On a node that is not ready no kubelet reports: the container's last state says it
		// ran, and whether its etcd serves a cluster of its own cannot be read. Its volume
		// carries no member's stamp, so nothing shows its data is a member's of this cluster
		// (a removed member's data, stamped, holds nothing a quorum did not acknowledge, and
		// is re-added below like any other).
		return wait(reasonPodNotMember, fmt.Sprintf("pod %s is not a member of the cluster, its node is not ready and its volume carries no member's stamp: "+
			"whether its etcd serves a cluster of its own cannot be read. Check it once its node is back (etcdctl endpoint status), save its data if clients wrote to it, "+
			"then delete its volume claim and pod; the operator then re-adds it as a learner", name))
	case known && p.Exists && p.Deleting && p.NodeReady:
		return wait(reasonPodTerminating, fmt.Sprintf("waiting for pod %s to terminate before adding a member for it", name))
	case known && !p.Exists && p.PVCExists && k >= v.o.StsReplicas && !v.o.DeletePVCOnScaleIn && !p.PVCDeleting:
		return wait(reasonStaleVolume, fmt.Sprintf("volume claim of %s is left from a removed member and the retention policy keeps it; "+
			"its data can never be used by a new member. Delete the claim to let the cluster grow to %d members", name, v.o.Desired))
	}
	reason, why := reasonScaleOut, fmt.Sprintf("%d voting members, spec.replicas is %d", v.voters, v.o.Desired)
	if known && p.Exists {
		reason, why = reasonReaddPod, fmt.Sprintf("pod %s has no member (its member was removed); it is re-added as a learner on a fresh volume", name)
	}
	// A claim here belongs to no member: its data (if any) is a removed member's, so the
	// new learner must not start on it.
	return v.record(intentAdd, k, 0, v.claimUID(k), reason, fmt.Sprintf("adding member %s: %s", name, why))
}

func (v *memberView) claimUID(k int32) string {
	if p, ok := v.pods[k]; ok && p.PVCExists {
		return p.PVCUID
	}
	return ""
}

// scaleIn picks the voting member to remove: a lost one first, then an unhealthy one, else
// the highest ordinal; ties go to the highest ordinal.
func (v *memberView) scaleIn() membershipAction {
	var pick etcd.Member
	rank := -1
	for _, m := range v.sortedMembers() {
		if m.IsLearner {
			continue
		}
		r := 0
		if _, lost, _ := v.lost(m); lost {
			r = 2
		} else if !v.healthy(m) {
			r = 1
		}
		if r >= rank {
			pick, rank = m, r
		}
	}
	k := v.ordOf[pick.ID]
	why := fmt.Sprintf("%d voting members, spec.replicas is %d", v.voters, v.o.Desired)
	switch rank {
	case 2, 1:
		why += "; " + v.podName(k) + " is unhealthy, so it goes first"
	}
	if ok, msg := v.canRemove(pick.ID); !ok {
		return wait(reasonQuorumAtRisk, "scale-in: "+msg)
	}
	if pick.ID == v.leader {
		return v.moveLeaderFrom(pick, reasonScaleIn)
	}
	return v.record(intentRemove, k, pick.ID, "", reasonScaleIn,
		fmt.Sprintf("removing member %s (%s): %s", v.podName(k), etcd.FormatID(pick.ID), why))
}

func (v *memberView) record(op intentOp, k int32, id uint64, claimUID, reason, msg string) membershipAction {
	name := v.podName(k)
	peerURL := v.o.PeerURL(name)
	in := &membershipIntent{Op: op, Member: name, ID: id, PeerURL: peerURL, ClaimUID: claimUID, Reason: reason, StartedAt: v.o.Now}
	return membershipAction{Kind: actRecordIntent, Member: name, ID: id, PeerURL: peerURL, Intent: in, Reason: reason, Message: msg}
}

func wait(reason, msg string) membershipAction {
	return membershipAction{Kind: actWait, Reason: reason, Message: msg}
}

// Evidence is what the safety gate reads of the observation.
func (o Observation) Evidence() plan.Evidence {
	return plan.Evidence{
		Etcd: o.Etcd, SplitBrain: o.SplitBrain, StatefulSet: o.StatefulSet, StsReplicas: o.StsReplicas,
		Desired: o.Desired, Formed: o.Bootstrapped, Founders: o.Founders, Pods: o.Pods, PeerURL: o.PeerURL,
		MaxLag: o.LearnerMaxLag,
	}
}

// MayStartEmpty reports whether member m may start on an empty data directory: a learner (it
// does not vote; it gets a snapshot) or a member that never started (a learner being added, a
// founder that starts late). A voting member that started before must never: with an empty
// log it could vote for a leader that lacks writes it acknowledged. The membership ConfigMap
// names exactly these members (see InitialCluster).
func MayStartEmpty(m etcd.Member) bool { return m.Name == "" || m.IsLearner }

// LearnerStartPoll is how often the engine looks whether a learner whose etcd container runs
// has started (joined with its name), for LearnerStartPollFor after its pod was created; later,
// at the controller's usual interval. A learner starts within a second or two of its container;
// one that takes longer is not worth four passes a second.
const (
	LearnerStartPoll    = 250 * time.Millisecond
	LearnerStartPollFor = 30 * time.Second
)

// NoMemberMayStart is the initial cluster when no member may start without data.
const NoMemberMayStart = "no-member-is-joining=http://127.0.0.1:1"

// InitialCluster is what a starting member reads from the membership ConfigMap. Members with
// data ignore it; it decides which members may start on an empty data directory, because etcd
// refuses to start a member whose --name the initial cluster does not name ("couldn't find
// local name ... in the initial cluster configuration"):
//
//   - before the cluster formed: the founding list with state "new";
//   - after: every member of etcd's list with state "existing", where only learners (they do
//     not vote; one that lost its data gets a snapshot) and members that never started (a
//     founder that starts late) appear under their own names; started voting members appear
//     under an alias of their member ID. etcd matches the
//     other members by peer URL, so a joining member finds the cluster, while a started
//     member that lost its data (a wiped volume, a re-created emptyDir, during a join or not)
//     fails to start instead of rejoining under its old identity with an empty log, and is
//     replaced.
func InitialCluster(mo Observation) map[string]string {
	if !mo.Bootstrapped {
		return map[string]string{"ETCD_INITIAL_CLUSTER": strings.Join(mo.FoundingList, ","), "ETCD_INITIAL_CLUSTER_STATE": "new"}
	}
	if mo.Etcd == nil {
		// Formed, but etcd did not answer in this pass: nobody may start empty until it does
		// (the founding list with "new" would let a wiped founder form a second cluster).
		return map[string]string{"ETCD_INITIAL_CLUSTER": NoMemberMayStart, "ETCD_INITIAL_CLUSTER_STATE": "existing"}
	}
	var parts []string
	empty := false
	for _, m := range mo.Etcd.Cluster.Members {
		if len(m.PeerURLs) == 0 {
			continue
		}
		name := "member-" + etcd.FormatID(m.ID)
		if MayStartEmpty(m) {
			if pod := podOfPeerURL(mo, m.PeerURLs[0]); pod != "" {
				name, empty = pod, true
			}
		}
		parts = append(parts, name+"="+m.PeerURLs[0])
	}
	if !empty {
		return map[string]string{"ETCD_INITIAL_CLUSTER": NoMemberMayStart, "ETCD_INITIAL_CLUSTER_STATE": "existing"}
	}
	sort.Strings(parts)
	return map[string]string{"ETCD_INITIAL_CLUSTER": strings.Join(parts, ","), "ETCD_INITIAL_CLUSTER_STATE": "existing"}
}

// podOfPeerURL is the pod whose advertised peer URL is u, among the ordinals the observation
// knows and those up to the StatefulSet's size; "" when none.
func podOfPeerURL(mo Observation, u string) string {
	limit := max(mo.StsReplicas, mo.Desired, mo.Founders)
	for _, p := range mo.Pods {
		limit = max(limit, p.Ordinal+1)
	}
	if mo.Etcd != nil {
		limit += int32(len(mo.Etcd.Cluster.Members))
	}
	return plan.PodOfPeerURL(mo.StatefulSet, mo.PeerURL, limit, []string{u})
}

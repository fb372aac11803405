package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// Evidence is what the safety gate reads: etcd's member list and each member's status as read
// from etcd in this pass, and the Kubernetes objects of every ordinal. The caller must
// guarantee that Etcd was read in this pass (nil when no member answered with a member list)
// and that Pods lists every ordinal with a pod or a claim, from the same pass.
type Evidence struct {
	// Etcd is etcd's member list and the status of each member that answered.
	Etcd *etcd.Observed
	// SplitBrain is true when members report different cluster IDs.
	SplitBrain bool
	// StatefulSet is the StatefulSet's name; pod names are "<StatefulSet>-<ordinal>".
	StatefulSet string
	// StsReplicas is the StatefulSet's .spec.replicas now.
	StsReplicas int32
	// Desired is spec.replicas.
	Desired int32
	// Formed is true once the cluster has formed (etcd answered with a member list before).
	Formed bool
	// Founders is the size of the founding member list recorded at the first render; 0 when
	// none is recorded.
	Founders int32
	// Pods describes every ordinal with a pod or a claim.
	Pods []Pod
	// PeerURL returns the peer URL a pod advertises, from its name.
	PeerURL func(podName string) string
	// MaxLag is how far (raft entries) a member may trail the leader and count as caught up.
	MaxLag uint64
	// PeerURLAnswers holds, for each peer URL the operator asked in this pass (before an
	// UpdatePeerURL), "" when a member of this cluster answered there (etcd's peer handler,
	// with this cluster's ID), else what went wrong. A URL not asked is absent.
	PeerURLAnswers map[string]string
	// Answers are the status replies of every member that answered in this pass, by member
	// ID, also when no member could read the member list (Etcd nil).
	Answers map[uint64]etcd.MemberStatus
	// Record is the last member list read with a quorum (the operator's memory), nil when
	// none is recorded.
	Record *MemberRecord
	// Intent is the membership change in flight, nil when none.
	Intent *Intent
	// Defragmentation is the defragmentation the operator recorded before it started it, while
	// the record stands (nil when none does).
	Defragmentation *Defragmentation
	// Auth is etcd's authentication as the authentication planner read it in this pass, with
	// the roles of the users it read (nil when it was not read), and OperatorUser the user the
	// operator authenticates as now (its client certificate's common name).
	Auth         *etcd.AuthState
	OperatorUser string
}

// Invariant is one named rule of the safety gate. Check returns why step s breaks the rule
// given the evidence, or "" when it holds.
type Invariant struct {
	Name  string
	Check func(s Step, v *evidenceView) string
}

// Refusal is the gate's answer to a step that breaks an invariant.
type Refusal struct {
	Invariant string
	Why       string
}

func (r *Refusal) Error() string { return r.Invariant + ": " + r.Why }

// Invariants is the safety gate: every step a planner proposes passes every rule here before
// the executor runs it. The README lists them.
var Invariants = []Invariant{
	{"OneClusterID", oneClusterID},
	{"EtcdIsTheTruth", etcdIsTheTruth},
	{"DefragmentationCountsAsDisruption", defragmentationCountsAsDisruption},
	{"VotersUpBeforeDisruption", votersUpBeforeDisruption},
	{"NoHealthyVoterRemoved", noHealthyVoterRemoved},
	{"OneLearner", oneLearner},
	{"PromoteOnlyCaughtUpLearners", promoteCaughtUp},
	{"LeaderMovesToAHealthyVoter", leaderTarget},
	{"NoDefragmentOfTheLeader", noDefragmentOfTheLeader},
	{"NeverDisarmCorrupt", neverDisarmCorrupt},
	{"ClaimsOnlyOfNonVoters", claimsOnlyOfNonVoters},
	{"FoundersFixedUntilFormed", foundersFixed},
	{"ScaleDownOnlyPodsWithoutVoters", scaleDownOnlyNonVoters},
	{"RestoreOnlyWithoutQuorum", restoreOnlyWithoutQuorum},
	{"RestoreOnlyWhenAQuorumLostItsData", restoreOnlyWhenDataLost},
	{"AuthChangesWithAHealthyQuorum", authWithQuorum},
	{"OperatorKeepsARootUser", operatorKeepsRoot},
	{"PeerURLMovesToAnAnsweringListener", peerURLAnswers},
	{"StorageChangesOnASettledCluster", storageOnASettledCluster},
}

// Check passes s through every invariant and returns the first refusal, or nil. Waits, None
// and the intent bookkeeping (which changes nothing in etcd or in the pods) always pass.
func Check(s Step, e Evidence) *Refusal {
	switch s.Kind {
	case None, Wait, RecordIntent, ClearIntent, "":
		return nil
	}
	v := newEvidenceView(e)
	for _, inv := range Invariants {
		if why := inv.Check(s, v); why != "" {
			return &Refusal{Invariant: inv.Name, Why: why}
		}
	}
	return nil
}

// Gate returns s when it passes the gate, else a wait that names the broken invariant.
func Gate(s Step, e Evidence) Step {
	r := Check(s, e)
	if r == nil {
		return s
	}
	return Step{Kind: Wait, Member: s.Member, Reason: v1alpha1.ReasonStepRefused,
		Message: fmt.Sprintf("the safety gate refused %s %s (%s): %s", s.Kind, s.Member, r.Invariant, r.Why)}
}

// evidenceView indexes Evidence once per check.
type evidenceView struct {
	e        Evidence
	leader   uint64
	pods     map[string]Pod         // by pod name
	podOf    map[uint64]string      // member ID -> pod name
	memberAt map[string]etcd.Member // pod name -> member
	status   map[uint64]etcd.MemberStatus
	voters   []etcd.Member
	learners []etcd.Member
}

func newEvidenceView(e Evidence) *evidenceView {
	v := &evidenceView{e: e, pods: map[string]Pod{}, podOf: map[uint64]string{}, memberAt: map[string]etcd.Member{}}
	for _, p := range e.Pods {
		v.pods[p.Name] = p
	}
	if e.Etcd == nil {
		return v
	}
	v.leader = e.Etcd.Leader()
	v.status = e.Etcd.Status
	for _, m := range e.Etcd.Cluster.Members {
		name := m.Name
		if name == "" && e.PeerURL != nil {
			name = v.podByPeerURL(m)
		}
		if name != "" {
			v.podOf[m.ID], v.memberAt[name] = name, m
		}
		if m.IsLearner {
			v.learners = append(v.learners, m)
		} else {
			v.voters = append(v.voters, m)
		}
	}
	return v
}

// podByPeerURL finds the pod of a member that has not started (and so has no name) by its
// peer URL, among the ordinals the evidence knows and those up to the StatefulSet's size.
func (v *evidenceView) podByPeerURL(m etcd.Member) string {
	limit := max(v.e.StsReplicas, v.e.Desired)
	for _, p := range v.e.Pods {
		limit = max(limit, p.Ordinal+1)
	}
	limit += int32(len(v.e.Etcd.Cluster.Members))
	return PodOfPeerURL(v.e.StatefulSet, v.e.PeerURL, limit, m.PeerURLs)
}

func (v *evidenceView) member(id uint64) (etcd.Member, bool) {
	if v.e.Etcd == nil {
		return etcd.Member{}, false
	}
	for _, m := range v.e.Etcd.Cluster.Members {
		if m.ID == id {
			return m, true
		}
	}
	return etcd.Member{}, false
}

func (v *evidenceView) name(m etcd.Member) string {
	if n := v.podOf[m.ID]; n != "" {
		return n
	}
	return NameOr(m)
}

// problem says why member m is not up, healthy and caught up for step s, or "" when it is.
func (v *evidenceView) problem(s Step, m etcd.Member) string {
	st, ok := v.status[m.ID]
	switch {
	case m.Name == "":
		return "it has not started"
	case !ok:
		return "it does not answer"
	case v.leader == 0 || st.Leader != v.leader:
		return "it does not follow the leader"
	case len(errorsAgainst(s, st)) > 0:
		return "it reports " + strings.Join(errorsAgainst(s, st), ", ")
	}
	if why, gone := v.dataGone(m); gone {
		return why
	}
	if ls, ok := v.status[v.leader]; ok && ls.RaftIndex > st.RaftIndex+v.e.MaxLag {
		return fmt.Sprintf("it trails the leader by %d raft entries", ls.RaftIndex-st.RaftIndex)
	}
	return ""
}

// errorsAgainst are the problems member status st reports that count against step s. etcd
// puts every active alarm of the cluster in every member's status, so under a NOSPACE alarm
// every member reports it; for the steps that recover from it (Defragment, and MoveLeader
// ahead of a defragmentation) it does not make a member unhealthy, or the recovery could
// never pass. Any other alarm (CORRUPT) still counts.
func errorsAgainst(s Step, st etcd.MemberStatus) []string {
	errs := MemberErrors(st)
	if s.Kind != Defragment && (s.Kind != MoveLeader || s.Reason != v1alpha1.ReasonDefragmenting) {
		return errs
	}
	var out []string
	for _, e := range errs {
		if !strings.Contains(e, AlarmNoSpace) {
			out = append(out, e)
		}
	}
	return out
}

// answering reports whether m answered and follows the leader (it serves, whatever its data).
func (v *evidenceView) answering(m etcd.Member) bool {
	st, ok := v.status[m.ID]
	return ok && v.leader != 0 && st.Leader == v.leader
}

func (v *evidenceView) dataGone(m etcd.Member) (string, bool) {
	if m.Name == "" || m.IsLearner {
		return "", false
	}
	p, ok := v.pods[v.podOf[m.ID]]
	_, answers := v.status[m.ID]
	return DataGone(p, ok, answers)
}

// DataGone says why the data of a started voting member whose ordinal has evidence p (ok false
// when the ordinal has neither pod nor claim) is gone, if it is: its claim (or, for emptyDir
// storage, its pod) is missing, being deleted, or newer than the member. Such a member may
// still answer (it restarted empty and got a snapshot) but must not vote: it may have
// acknowledged writes it no longer holds. A member that answers (answering) while neither its
// pod nor its claim is seen is not taken for gone: it runs in a pod, so the view of the pods
// (a cache) is behind etcd, and the next pass looks again.
func DataGone(p Pod, ok, answering bool) (string, bool) {
	if answering && (!ok || (!p.Exists && !p.PVCExists)) {
		return "", false
	}
	switch {
	case (!ok || !p.PVCExists) && p.Ephemeral:
		return "its pod is gone, and its emptyDir data with it", true
	case !ok || !p.PVCExists:
		return "its volume claim is gone", true
	case p.PVCDeleting && p.Ephemeral:
		return "its pod is being deleted, and its emptyDir data with it", true
	case p.PVCDeleting:
		return "its volume claim is being deleted", true
	case p.PVCFresh && p.Ephemeral:
		return "its pod was re-created after it had started, so its emptyDir data is gone", true
	case p.PVCFresh:
		return "its volume claim was re-created after it had started, so its data is gone", true
	}
	return "", false
}

// healthyVoters counts the voters that are up, healthy and caught up for step s, leaving out
// skip.
func (v *evidenceView) healthyVoters(s Step, skip uint64) (n int32, sick []string) {
	for _, m := range v.voters {
		if m.ID == skip {
			continue
		}
		if why := v.problem(s, m); why != "" {
			sick = append(sick, v.name(m)+": "+why)
			continue
		}
		n++
	}
	sort.Strings(sick)
	return n, sick
}

func oneClusterID(s Step, v *evidenceView) string {
	if v.e.SplitBrain {
		return "members report different cluster IDs"
	}
	return ""
}

// etcdIsTheTruth: every step but the first formation's StatefulSet size needs etcd's member
// list and a leader from this pass; without them no step can know which members vote.
func etcdIsTheTruth(s Step, v *evidenceView) string {
	if isRestore(s) {
		return "" // RestoreOnlyWithoutQuorum decides: a restore runs exactly when etcd has no quorum
	}
	if s.Kind == ScaleStatefulSet && !v.e.Formed {
		return "" // FoundersFixedUntilFormed decides
	}
	switch {
	case v.e.Etcd == nil:
		return "etcd did not answer with a member list in this pass"
	case v.leader == 0:
		return "no leader is known"
	}
	return ""
}

// disrupted is the voting member a step takes down, if any: the member of a deleted pod, a
// removed member, a defragmented member (etcd blocks its reads and writes while it runs, and
// it may miss heartbeats).
func (v *evidenceView) disrupted(s Step) (etcd.Member, bool) {
	switch s.Kind {
	case DeletePod:
		m, ok := v.memberAt[s.Member]
		return m, ok && !m.IsLearner
	case RemoveMember, Defragment:
		m, ok := v.member(s.ID)
		return m, ok && !m.IsLearner
	}
	return etcd.Member{}, false
}

// votersUpBeforeDisruption: a step that takes a voting member down runs only if every other
// voting member in etcd's member list is up, healthy and caught up (counted from etcd's list,
// not from the pods that exist). A member that is down already (it does not answer) may be
// restarted or removed when the voters that are up still make a quorum afterwards.
func votersUpBeforeDisruption(s Step, v *evidenceView) string {
	m, ok := v.disrupted(s)
	if !ok {
		return ""
	}
	healthy, sick := v.healthyVoters(s, m.ID)
	if v.answering(m) {
		if len(sick) > 0 {
			return fmt.Sprintf("it takes voting member %s down while other voting members are not up, healthy and caught up: %s",
				v.name(m), strings.Join(sick, "; "))
		}
		return ""
	}
	after := int32(len(v.voters))
	if s.Kind == RemoveMember {
		after--
	}
	if after < 1 {
		return fmt.Sprintf("removing %s would leave no voting member", v.name(m))
	}
	if healthy < Quorum(after) {
		return fmt.Sprintf("%s is down, and only %d of the other voting members are up, healthy and caught up, quorum of %d needs %d (%s)",
			v.name(m), healthy, after, Quorum(after), strings.Join(sick, "; "))
	}
	return ""
}

// defragmentationCountsAsDisruption: while a defragmentation the operator recorded is not
// shown over (DefragmentationOver), its member counts as down: no second member is
// defragmented, no other voting member is taken down (a deleted pod, a removed member), and
// leadership does not move to it. A frozen applied index does not pass for caught up,
// whatever the committed index says. Steps on the member itself (restarting it) are left to
// the other invariants; restores are judged by RestoreOnlyWithoutQuorum alone.
func defragmentationCountsAsDisruption(s Step, v *evidenceView) string {
	d := v.e.Defragmentation
	if d == nil || isRestore(s) {
		return ""
	}
	over, why := DefragmentationOver(*d, v.e.Etcd)
	if over {
		return ""
	}
	switch s.Kind {
	case Defragment:
		return why + ": one member is defragmented at a time"
	case MoveLeader:
		if s.Target == d.ID {
			return "the transferee " + why
		}
	case DeletePod, RemoveMember:
		if m, ok := v.disrupted(s); ok && m.ID != d.ID {
			return fmt.Sprintf("%s: it counts as down, so voting member %s is not taken down meanwhile", why, v.name(m))
		}
	}
	return ""
}

// noHealthyVoterRemoved: a healthy voting member with its data is removed only by a scale-in
// of a cluster with more voting members than spec.replicas; it is never replaced.
func noHealthyVoterRemoved(s Step, v *evidenceView) string {
	if s.Kind != RemoveMember {
		return ""
	}
	m, ok := v.member(s.ID)
	if !ok || m.IsLearner || v.problem(s, m) != "" {
		return ""
	}
	if s.Reason == v1alpha1.ReasonScaleIn && int32(len(v.voters)) > v.e.Desired {
		return ""
	}
	return fmt.Sprintf("%s is a healthy voting member with its data (%d voting members, spec.replicas %d)", v.name(m), len(v.voters), v.e.Desired)
}

// oneLearner: at most one learner at a time.
func oneLearner(s Step, v *evidenceView) string {
	if s.Kind == AddLearner && len(v.learners) > 0 {
		return fmt.Sprintf("learner %s exists", v.name(v.learners[0]))
	}
	return ""
}

// promoteCaughtUp: a learner becomes a voter only when it started, answers and caught up.
func promoteCaughtUp(s Step, v *evidenceView) string {
	if s.Kind != PromoteLearner {
		return ""
	}
	m, ok := v.member(s.ID)
	if !ok || !m.IsLearner {
		return fmt.Sprintf("%s is not a learner in etcd's member list", etcd.FormatID(s.ID))
	}
	if why := v.problem(s, m); why != "" {
		return fmt.Sprintf("learner %s: %s", v.name(m), why)
	}
	return ""
}

// leaderTarget: leadership moves from the leader to a voting member that is up, healthy and
// caught up.
func leaderTarget(s Step, v *evidenceView) string {
	if s.Kind != MoveLeader {
		return ""
	}
	if s.ID != v.leader {
		return fmt.Sprintf("%s does not lead (the leader is %s)", etcd.FormatID(s.ID), etcd.FormatID(v.leader))
	}
	t, ok := v.member(s.Target)
	if !ok || t.IsLearner {
		return fmt.Sprintf("the transferee %s is not a voting member", etcd.FormatID(s.Target))
	}
	if why := v.problem(s, t); why != "" {
		return fmt.Sprintf("the transferee %s: %s", v.name(t), why)
	}
	return ""
}

// noDefragmentOfTheLeader: the leader is defragmented only after leadership moved away
// (MoveLeader), unless it is the only voting member: a leader that stops serving while it
// defragments may miss heartbeats, and the cluster would pay an election for it.
func noDefragmentOfTheLeader(s Step, v *evidenceView) string {
	if s.Kind != Defragment || s.ID != v.leader || len(v.voters) < 2 {
		return ""
	}
	m, _ := v.member(s.ID)
	return fmt.Sprintf("%s leads %d voting members: leadership moves to another voting member before it is defragmented", v.name(m), len(v.voters))
}

// neverDisarmCorrupt: the operator disarms only NOSPACE alarms (after compaction and
// defragmentation freed space). A CORRUPT alarm means a member's data differs from the
// others'; disarming it would let the cluster serve diverging data.
func neverDisarmCorrupt(s Step, v *evidenceView) string {
	switch {
	case s.Kind != DisarmAlarm || s.Alarm == AlarmNoSpace:
		return ""
	case s.Alarm == AlarmCorrupt:
		return "a CORRUPT alarm is never disarmed by the operator: find the corrupt member (etcdctl alarm list, etcdctl endpoint hashkv), " +
			"remove it so that it is replaced, or restore from a backup"
	}
	return fmt.Sprintf("only a NOSPACE alarm may be disarmed, not %q", s.Alarm)
}

// storageOnASettledCluster: a member's claim is expanded, or the StatefulSet re-created
// (orphaning its pods), only while no membership change or defragmentation is recorded, and
// only for claims that exist and are not being deleted. The StatefulSet is re-created only
// once the cluster formed: the new one is created with the replicas that keep every member
// pod, which a formation has not settled yet.
func storageOnASettledCluster(s Step, v *evidenceView) string {
	if s.Kind != ExpandClaim && s.Kind != RecreateStatefulSet {
		return ""
	}
	switch {
	case v.e.Intent != nil:
		return fmt.Sprintf("a membership change is recorded (%s %s)", v.e.Intent.Op, v.e.Intent.Member)
	case v.e.Defragmentation != nil:
		return fmt.Sprintf("a defragmentation of %s is recorded", v.e.Defragmentation.Member)
	case s.Kind == RecreateStatefulSet && !v.e.Formed:
		return "the cluster has not formed"
	case s.Kind == RecreateStatefulSet:
		if why := PodsUnsettled(v.e.Pods, v.e.StsReplicas); why != "" {
			return "the new StatefulSet is created with the replicas the member pods show, which must be exactly its own: " + why
		}
	}
	if s.Kind == ExpandClaim {
		p, ok := v.pods[s.Member]
		switch {
		case !ok || !p.PVCExists || p.Ephemeral:
			return fmt.Sprintf("%s has no volume claim", s.Member)
		case p.PVCDeleting:
			return fmt.Sprintf("the claim of %s is being deleted", s.Member)
		}
	}
	return ""
}

// PodsUnsettled says which member pods differ from what a StatefulSet of replicas runs
// settled ("" when none does): every ordinal below replicas has a pod that exists, is Ready
// and is not being deleted, and no ordinal at or above it has one.
func PodsUnsettled(pods []Pod, replicas int32) string {
	var out []string
	have := map[int32]bool{}
	for _, p := range pods {
		if !p.Exists {
			continue
		}
		have[p.Ordinal] = true
		switch {
		case p.Ordinal >= replicas:
			out = append(out, fmt.Sprintf("%s runs above the StatefulSet's %d replicas", p.Name, replicas))
		case p.Deleting:
			out = append(out, p.Name+" is being deleted")
		case !p.Ready:
			out = append(out, p.Name+" is not ready")
		}
	}
	for k := int32(0); k < replicas; k++ {
		if !have[k] {
			out = append(out, fmt.Sprintf("the pod of ordinal %d does not exist", k))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// claimsOnlyOfNonVoters: a claim is deleted only when it exists (emptyDir storage has none)
// and no voting member is the pod's member.
func claimsOnlyOfNonVoters(s Step, v *evidenceView) string {
	if s.Kind != DeletePVC {
		return ""
	}
	p, ok := v.pods[s.Member]
	switch {
	case ok && p.Ephemeral:
		return fmt.Sprintf("%s keeps its data in an emptyDir: there is no claim to delete", s.Member)
	case !ok || !p.PVCExists:
		return fmt.Sprintf("%s has no volume claim", s.Member)
	}
	if m, ok := v.memberAt[s.Member]; ok && !m.IsLearner {
		return fmt.Sprintf("the claim holds the data of voting member %s", v.name(m))
	}
	return ""
}

// foundersFixed: until the cluster has formed, the StatefulSet runs exactly the founding
// members recorded at the first render; a replicas change waits for formation.
func foundersFixed(s Step, v *evidenceView) string {
	if s.Kind != ScaleStatefulSet || v.e.Formed || isRestore(s) {
		return ""
	}
	if v.e.Founders > 0 && s.Replicas != v.e.Founders {
		return fmt.Sprintf("the cluster has not formed yet: the StatefulSet keeps the %d founding members (asked for %d)", v.e.Founders, s.Replicas)
	}
	return ""
}

// scaleDownOnlyNonVoters: shrinking the StatefulSet deletes the pods above the new size; none
// of them may be a voting member's.
func scaleDownOnlyNonVoters(s Step, v *evidenceView) string {
	if isRestore(s) {
		return "" // RestoreOnlyWithoutQuorum decides
	}
	if s.Kind != ScaleStatefulSet || !v.e.Formed || s.Replicas >= v.e.StsReplicas {
		return ""
	}
	var voters []string
	for _, m := range v.voters {
		name := v.podOf[m.ID]
		if k, ok := Ordinal(v.e.StatefulSet, name); ok && k >= s.Replicas {
			voters = append(voters, name)
		}
	}
	if len(voters) > 0 {
		sort.Strings(voters)
		return fmt.Sprintf("shrinking to %d replicas would delete the pods of voting members %s", s.Replicas, strings.Join(voters, ", "))
	}
	return ""
}

// isRestore reports whether s is a step of a restore (spec.bootstrap or disaster recovery):
// those change members' data, and are judged by RestoreOnlyWithoutQuorum.
func isRestore(s Step) bool {
	switch s.Reason {
	case v1alpha1.ReasonRestoring, v1alpha1.ReasonRecoveringFromBackup:
		return true
	case v1alpha1.ReasonRestored, v1alpha1.ReasonRestoreFailed:
		// Only the end of a restore (its record, deleting finished restore pods) carries
		// these: any other step with them is judged like every step.
		return s.Kind == "FinishRestore" || s.Kind == "CleanUpRestore"
	}
	return false
}

// restoreOnlyWithoutQuorum: a restore replaces members' data. A bootstrap restore runs only
// before the cluster first formed. Disaster recovery runs only on positive evidence, read in
// this pass, that etcd has no quorum (JudgeQuorum): members answered without a leader, or do
// not run etcd at all, and too few are left to make a quorum in any voter set etcd may have.
// "The operator cannot reach etcd" is not such evidence. The end of a restore (Restored,
// RestoreFailed: a status record, deleting finished restore pods) touches no member.
func restoreOnlyWithoutQuorum(s Step, v *evidenceView) string {
	switch s.Reason {
	case v1alpha1.ReasonRestoring:
		if v.e.Formed {
			return "the cluster has formed: a bootstrap restore runs only before the founding members first start"
		}
	case v1alpha1.ReasonRecoveringFromBackup:
		if v.e.StsReplicas == 0 && s.Kind != "BeginRestore" && s.Kind != ScaleStatefulSet {
			return "" // every member was stopped by this recovery: its later steps re-form the cluster
		}
		state, why := JudgeQuorum(v.quorumEvidence())
		switch state {
		case QuorumServing:
			return fmt.Sprintf("etcd shows leader %s followed by a quorum of healthy voting members: the cluster serves, so it is never re-formed from a backup",
				etcd.FormatID(v.leader))
		case QuorumUnknown:
			return "quorum is not known to be lost: " + why
		}
	}
	return ""
}

// restoreOnlyWhenDataLost: disaster recovery starts (BeginRestore) and stops the members
// (ScaleStatefulSet) only while the claims read in this pass show that, in every voter set
// etcd may have, fewer members than its quorum keep their data: otherwise quorum can come back
// with the data it had, and stopping the members could destroy it (a claim being deleted is
// held only while its pod exists).
func restoreOnlyWhenDataLost(s Step, v *evidenceView) string {
	if s.Reason != v1alpha1.ReasonRecoveringFromBackup || (s.Kind != "BeginRestore" && s.Kind != ScaleStatefulSet) {
		return ""
	}
	if s.Kind == ScaleStatefulSet && v.e.StsReplicas == 0 {
		return ""
	}
	d := JudgeData(v.e.Record, v.e.Intent, v.e.Pods)
	if d.Hopeless {
		return ""
	}
	if d.Why != "" {
		return d.Why
	}
	return fmt.Sprintf("%d of %d recorded voting members keep their data (%s), a quorum", len(d.Kept), d.Voters, strings.Join(d.Kept, ", "))
}

// quorumEvidence is the part of the evidence JudgeQuorum reads.
func (v *evidenceView) quorumEvidence() QuorumEvidence {
	return QuorumEvidence{Etcd: v.e.Etcd, Answers: v.e.Answers, Record: v.e.Record, Intent: v.e.Intent, Pods: v.e.Pods}
}

// authWithQuorum: users are added and authentication turned on or off only while a quorum
// of voters is up, healthy and caught up, so the change commits at once and every member
// applies it before clients are cut off.
// peerURLAnswers: a member's peer URL moves only while every voter is up, healthy and caught
// up (the change commits at once, and no member is out of reach of the others while it does),
// and only to a URL at which the member answered in this pass as a member of this cluster, so
// the others reach it there as soon as they apply the change.
func peerURLAnswers(s Step, v *evidenceView) string {
	if s.Kind != UpdatePeerURL {
		return ""
	}
	if _, ok := v.member(s.ID); !ok {
		return fmt.Sprintf("member %s is not in etcd's member list", etcd.FormatID(s.ID))
	}
	if n, sick := v.healthyVoters(s, 0); n < int32(len(v.voters)) {
		return fmt.Sprintf("%d of %d voters are healthy (%s)", n, len(v.voters), strings.Join(sick, "; "))
	}
	why, asked := v.e.PeerURLAnswers[s.PeerURL]
	switch {
	case s.PeerURL == "":
		return "the step names no peer URL"
	case !asked:
		return fmt.Sprintf("nobody asked at %s in this pass whether %s serves it", s.PeerURL, s.Member)
	case why != "":
		return fmt.Sprintf("%s did not answer as a member of this cluster at %s: %s", s.Member, s.PeerURL, why)
	}
	return ""
}

// operatorKeepsRoot: the operator never removes the user it authenticates as (nor root), and
// its certificate takes a new user's name only when etcd reported, in this pass, that the user
// has the root role, or that authentication is off.
func operatorKeepsRoot(s Step, v *evidenceView) string {
	a := v.e.Auth
	switch s.Kind {
	case RemoveUser:
		if s.User == "" || s.User == "root" || s.User == v.e.OperatorUser {
			return fmt.Sprintf("etcd user %q is root or the one the operator authenticates as", s.User)
		}
	case AdoptOperatorUser:
		switch {
		case a == nil:
			return "etcd's authentication was not read in this pass"
		case s.User == "":
			return "the step names no user"
		case a.Enabled && !slices.Contains(a.Roles[s.User], "root"):
			return fmt.Sprintf("etcd's authentication is on and etcd user %s has no root role in this pass's reading: a certificate with that name would lock the operator out", s.User)
		}
	}
	return ""
}

func authWithQuorum(s Step, v *evidenceView) string {
	switch s.Kind {
	case EnsureRootUser, RemoveUser, EnableAuth, DisableAuth:
	default:
		return ""
	}
	n, sick := v.healthyVoters(s, 0)
	if len(v.voters) == 0 || n < Quorum(int32(len(v.voters))) {
		return fmt.Sprintf("%d of %d voters are healthy, fewer than quorum (%s)", n, len(v.voters), strings.Join(sick, "; "))
	}
	return ""
}

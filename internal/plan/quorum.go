package plan

import (
	"fmt"
	"strings"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// QuorumState is what a pass can prove about etcd's quorum.
type QuorumState string

const (
	// QuorumServing: a quorum of voting members answered and follows one leader.
	QuorumServing QuorumState = "Serving"
	// QuorumLost: no member that answered knows a leader, and too few voting members run
	// etcd at all (their pods are gone, their etcd containers do not run, or they answered
	// without a leader) to make a quorum, whatever membership change was in flight.
	QuorumLost QuorumState = "Lost"
	// QuorumUnknown: neither can be shown. The operator could not reach members that may
	// serve (an operator-side fault, a network partition, a node that stopped reporting), or
	// it has no record of who votes. "Could not read" is never "gone": nothing irreversible
	// is done on it.
	QuorumUnknown QuorumState = "Unknown"
)

// QuorumEvidence is what a pass read that bears on etcd's quorum. The caller must guarantee
// that Etcd, Answers and Pods were read in this pass.
type QuorumEvidence struct {
	// Etcd is etcd's member list and statuses, nil when no member could read the list.
	Etcd *etcd.Observed
	// Answers are the status replies of every member that answered in this pass, by member
	// ID, also when no member list could be read.
	Answers map[uint64]etcd.MemberStatus
	// Record is the last member list read with a quorum (the operator's memory), nil when
	// none is recorded.
	Record *MemberRecord
	// Intent is the membership change in flight, nil when none.
	Intent *Intent
	// Pods describes every ordinal with a pod or a claim.
	Pods []Pod
}

// Serving reports whether a quorum of voting members answers and follows one leader.
func Serving(e etcd.Observed) bool {
	leader := e.Leader()
	if leader == 0 {
		return false
	}
	voters, up := 0, 0
	for _, m := range e.Cluster.Members {
		if m.IsLearner {
			continue
		}
		voters++
		if st, ok := e.Status[m.ID]; ok && st.Leader == leader {
			up++
		}
	}
	return voters > 0 && up >= voters/2+1
}

// PossibleVoterSets are the sets of voting members etcd may have now, given the record and
// the membership change in flight: the recorded voters, each recorded learner promoted or not
// (a promotion may have committed after the record was written), and the voter the intent
// removes, removed or not. The recorded voters come first. A conclusion that needs a quorum
// to be gone must hold for every set.
func PossibleVoterSets(rec MemberRecord, in *Intent) [][]RecordedMember {
	var base, maybe []RecordedMember
	var removed *RecordedMember
	for _, m := range rec.Members {
		switch {
		case m.Learner:
			maybe = append(maybe, m)
		case in != nil && (in.Op == IntentRemove || in.Op == IntentReplace) && in.ID == m.ID && removed == nil:
			removed = &m
		default:
			base = append(base, m)
		}
	}
	// Uncertain members: promoted learners join, the removed voter may have left.
	var uncertain []RecordedMember
	uncertain = append(uncertain, maybe...)
	if removed != nil {
		uncertain = append(uncertain, *removed)
	}
	if len(uncertain) > maxUncertain {
		return nil // KnownVoterSets says why: the sets are too many to judge
	}
	var sets [][]RecordedMember
	for bits := 0; bits < 1<<len(uncertain); bits++ {
		set := append([]RecordedMember{}, base...)
		for i, m := range uncertain {
			changed := bits&(1<<i) != 0
			isRemoved := removed != nil && m.ID == removed.ID
			// Bit clear: as recorded (a learner out, the removed voter in); set: changed.
			if changed != isRemoved {
				set = append(set, m)
			}
		}
		if len(set) > 0 {
			sets = append(sets, set)
		}
	}
	return sets
}

// maxUncertain bounds the members whose vote PossibleVoterSets leaves open (2^n sets); etcd
// allows one learner at a time and an intent removes one member, so a record has two at most
// unless members were added by hand.
const maxUncertain = 8

// votersUnknown says why no voter set can be judged, or "" when they can: no member list is
// recorded, the membership change in flight cannot be read (it might remove a voter), or too
// many members may have changed their vote.
func votersUnknown(rec *MemberRecord, in *Intent) string {
	switch {
	case rec == nil || len(rec.Voters()) == 0:
		return "no member list read with a quorum is recorded, so which members vote is not known"
	case in != nil && in.Op != IntentAdd && in.Op != IntentRemove && in.Op != IntentReplace:
		return fmt.Sprintf("the membership change in flight cannot be read (%q: %s), so which members vote is not known", in.Op, in.Reason)
	case len(PossibleVoterSets(*rec, in)) == 0:
		return "too many recorded members are learners or being removed to tell which members vote"
	}
	return ""
}

// podsByName indexes pods by name.
func podsByName(pods []Pod) map[string]Pod {
	out := make(map[string]Pod, len(pods))
	for _, p := range pods {
		out[p.Name] = p
	}
	return out
}

// memberName is the recorded member's pod name, or its ID.
func (m RecordedMember) memberName() string {
	if m.Name != "" {
		return m.Name
	}
	return etcd.FormatID(m.ID)
}

// JudgeQuorum says what this pass proves about etcd's quorum, and why. Quorum is lost only on
// positive evidence: no member that answered knows a leader, and for every possible voter set
// fewer members than its quorum can serve at all (each one's pod is gone, its etcd container
// does not run, or it answered without a leader). A member whose etcd runs but did not answer
// the operator may serve: then the state is Unknown.
func JudgeQuorum(e QuorumEvidence) (QuorumState, string) {
	if e.Etcd != nil && Serving(*e.Etcd) {
		return QuorumServing, ""
	}
	answers := map[uint64]etcd.MemberStatus{}
	for id, st := range e.Answers {
		answers[id] = st
	}
	if e.Etcd != nil {
		for id, st := range e.Etcd.Status {
			answers[id] = st
		}
	}
	for id, st := range answers {
		if st.Leader != 0 {
			return QuorumUnknown, fmt.Sprintf("member %s follows leader %s, but a quorum of voting members following it was not seen in this pass",
				etcd.FormatID(id), etcd.FormatID(st.Leader))
		}
	}
	if why := votersUnknown(e.Record, e.Intent); why != "" {
		return QuorumUnknown, why
	}
	pods := podsByName(e.Pods)
	down := func(m RecordedMember) (bool, string) {
		if _, ok := answers[m.ID]; ok {
			return true, m.memberName() + " answers without a leader"
		}
		if m.Name == "" {
			return false, m.memberName() + ": no pod is known for it"
		}
		p, ok := pods[m.Name]
		switch {
		case !ok || !p.Exists:
			return true, m.Name + ": its pod does not exist"
		case !p.Running:
			why := m.Name + ": its etcd container does not run"
			if p.Problem != "" {
				why += " (" + p.Problem + ")"
			}
			return true, why
		}
		why := m.Name + ": its etcd container runs but did not answer the operator"
		if !p.NodeReady {
			why += " (its node is not ready, so the container's state may be stale)"
		}
		return false, why
	}
	var downWhy []string
	for _, m := range e.Record.Members {
		if isDown, why := down(m); isDown {
			downWhy = append(downWhy, why)
		}
	}
	for _, set := range PossibleVoterSets(*e.Record, e.Intent) {
		var may []string
		for _, m := range set {
			if isDown, why := down(m); !isDown {
				may = append(may, why)
			}
		}
		if q := Quorum(int32(len(set))); int32(len(may)) >= q {
			return QuorumUnknown, fmt.Sprintf("no member that answered knows a leader, but %d of %d voting members may still serve, "+
				"and a quorum needs %d: %s", len(may), len(set), q, strings.Join(may, "; "))
		}
	}
	return QuorumLost, "no member that answered knows a leader and too few voting members run etcd to make a quorum: " + strings.Join(downWhy, "; ")
}

// DataVerdict is what the claims (or, under emptyDir storage, the pods) read in this pass say
// of the voting members' data.
type DataVerdict struct {
	// Voters is the number of recorded voting members; Kept and Gone name them by whether
	// their data is still there (GoneWhy says why, in Gone's order).
	Voters     int32
	Kept, Gone []string
	GoneWhy    []string
	// Hopeless is true when, in every possible voter set (PossibleVoterSets), fewer members
	// than its quorum keep their data: quorum cannot come back with the data it had.
	Hopeless bool
	// Why says why it is not hopeless when that comes from a voter set other than the
	// recorded voters (a membership change in flight) or from the record missing.
	Why string
}

// DataGoneOf says why the data of recorded member m is gone, given the ordinal evidence, or
// "" when it is (or may be) kept. A member's data is gone only if its claim no longer exists,
// is being deleted with no pod holding it, or exists with no member stamp (once the
// operator stamped any claim of the cluster) or a stamp of another member. A claim being
// deleted that a pod still mounts is kept: the pvc-protection finalizer holds it, and its
// data, while the pod exists.
func DataGoneOf(m RecordedMember, pods map[string]Pod, anyStamped bool) string {
	if m.Name == "" {
		return "" // where its data is, is not known: never counted as gone
	}
	p, ok := pods[m.Name]
	eph := ok && p.Ephemeral
	switch {
	case (!ok || !p.PVCExists) && eph:
		return "its pod is gone, and its emptyDir data with it"
	case !ok || !p.PVCExists:
		return "its volume claim is gone"
	case p.PVCDeleting && eph:
		return "its pod is being deleted, and its emptyDir data with it"
	case p.PVCDeleting && !p.PVCHeld:
		return "its volume claim is being deleted and no pod holds it"
	case p.DataStamp != "" && p.DataStamp != etcd.FormatID(m.ID):
		return "its data holder carries the stamp of member " + p.DataStamp + ", not " + etcd.FormatID(m.ID)
	case p.DataStamp == "" && anyStamped && eph:
		return "its pod was re-created after the member ran, so its emptyDir data is gone"
	case p.DataStamp == "" && anyStamped:
		return "its volume claim carries no member stamp: it was created after the member ran"
	}
	return ""
}

// JudgeData says whether a quorum of voting members lost its data, for every voter set etcd
// may have. Without a record nothing is known, so nothing is hopeless.
func JudgeData(rec *MemberRecord, in *Intent, pods []Pod) DataVerdict {
	if why := votersUnknown(rec, in); why != "" {
		return DataVerdict{Why: why}
	}
	byName := podsByName(pods)
	anyStamped := false
	for _, p := range pods {
		anyStamped = anyStamped || p.DataStamp != ""
	}
	v := DataVerdict{Hopeless: true}
	for _, m := range rec.Voters() {
		v.Voters++
		if why := DataGoneOf(m, byName, anyStamped); why != "" {
			v.Gone, v.GoneWhy = append(v.Gone, m.memberName()), append(v.GoneWhy, why)
		} else {
			v.Kept = append(v.Kept, m.memberName())
		}
	}
	for _, set := range PossibleVoterSets(*rec, in) {
		var kept []string
		for _, m := range set {
			if DataGoneOf(m, byName, anyStamped) == "" {
				kept = append(kept, m.memberName())
			}
		}
		if q := Quorum(int32(len(set))); int32(len(kept)) >= q {
			v.Hopeless = false
			if v.Why == "" && int32(len(v.Kept)) < Quorum(v.Voters) {
				v.Why = fmt.Sprintf("a membership change was in flight, and with it %d of %d voting members keep their data (%s), a quorum",
					len(kept), len(set), strings.Join(kept, ", "))
			}
		}
	}
	return v
}

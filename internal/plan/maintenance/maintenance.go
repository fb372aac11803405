// Package maintenance is the maintenance planner: defragmentation of members whose database
// file holds much free space or nears the space quota, and the recovery from etcd's alarms
// (NOSPACE: compact, defragment, disarm; CORRUPT: report, never disarm). It is pure: an
// Observation in, at most one plan.Step out; the safety gate checks every step it proposes.
package maintenance

import (
	"fmt"
	"sort"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

const (
	// DefaultQuotaBytes is etcd's space quota when --quota-backend-bytes is 0.
	DefaultQuotaBytes int64 = 2 << 30
	// DefaultRatio is the fragmented share of a database file that triggers a defragmentation.
	DefaultRatio = 0.5
	// DefaultMinFragmentedBytes is the least free space worth a defragmentation for
	// fragmentation alone.
	DefaultMinFragmentedBytes int64 = 64 << 20
	// DefaultQuotaRatio is the share of the quota above which a member is defragmented
	// whatever its fragmentation, and below which every member must be before a NOSPACE alarm
	// is disarmed.
	DefaultQuotaRatio = 0.8
	// MinReclaimBytes is the least free space worth a defragmentation near the quota or under a
	// NOSPACE alarm. A member with less counts as defragmented: right after a defragmentation a
	// database holds a few free pages, so this is what makes a defragmentation observable (and
	// the planner idempotent) from the sizes alone.
	MinReclaimBytes int64 = 1 << 20
)

// Member is one etcd member as the maintenance planner sees it, from etcd's member list and
// the member's own status in this pass.
type Member struct {
	// Name is the member's (and pod's) name; empty for a member that has not started.
	Name string
	ID   uint64
	// Voter is false for a learner.
	Voter bool
	// Leader is true for the member every answering member names as leader.
	Leader bool
	// Answering is true when the member answered its status call in this pass; the sizes and
	// the raft index are meaningful only then.
	Answering bool
	// DBSize is the size of the member's database (bbolt's high-water mark, what etcd checks
	// against the quota); DBSizeInUse the part of it that holds data. 0 when unknown (etcd
	// before 3.4 reports no DBSizeInUse).
	DBSize, DBSizeInUse int64
	RaftIndex           uint64
}

// Alarm is one active etcd alarm.
type Alarm struct {
	// MemberID is the member that raised it (it may have been removed since).
	MemberID uint64
	// Type is plan.AlarmNoSpace or plan.AlarmCorrupt (others are ignored).
	Type string
}

// Policy says when members are defragmented for fragmentation or for the quota
// (spec.maintenance.defragmentation). Zero values mean the defaults. It does not govern the
// NOSPACE recovery, which always runs.
type Policy struct {
	// Enabled turns on defragmentation for fragmentation and for the quota.
	Enabled bool
	// Ratio is the fragmented share of a member's database file, (DBSize-DBSizeInUse)/DBSize,
	// at which it is defragmented; ≤ 0 means DefaultRatio.
	Ratio float64
	// MinFragmentedBytes is the least free space for which a member is defragmented for
	// fragmentation; ≤ 0 means DefaultMinFragmentedBytes.
	MinFragmentedBytes int64
	// QuotaRatio: a member whose DBSize exceeds QuotaRatio of the quota and holds at least
	// MinReclaimBytes of free space is defragmented whatever its fragmentation (before etcd
	// raises NOSPACE); a NOSPACE alarm is disarmed once every member's DBSize is at most
	// QuotaRatio of the quota. ≤ 0 means DefaultQuotaRatio.
	QuotaRatio float64
	// Due is true when no schedule is set or a scheduled window is open. Only the
	// fragmentation trigger waits for it; the quota trigger and the NOSPACE recovery do not.
	Due bool
}

// Observation is what Decide needs. The caller must guarantee that Members and Alarms were
// read from etcd in this pass (every member of etcd's member list, answering or not) and that
// CompactedRevision is never above the revision the keyspace is really compacted to.
type Observation struct {
	Members []Member
	// LeaderRaftIndex is the leader's raft index; 0 means the leader member's RaftIndex.
	LeaderRaftIndex uint64
	// Alarms are the cluster's active alarms.
	Alarms []Alarm
	// Revision is the keyspace's current revision, from the leader's status; 0 when unknown.
	Revision int64
	// CompactedRevision is the revision the keyspace is known to be compacted to; 0 when
	// unknown. etcd's status does not report it, and without it a compaction that freed
	// nothing (the data really is larger than the quota) could not be told from one that never
	// ran, so the NOSPACE recovery would compact forever. The caller fills it from etcd (a read
	// at Revision-1 failing with "required revision has been compacted" means at least
	// Revision) or records the revision of each Compact step that succeeded (etcd answers a
	// revision already compacted with that same error: success). Losing the record costs one
	// compaction that changes nothing.
	CompactedRevision int64
	// DefragmentedSinceCompaction holds the members defragmented since the keyspace was
	// compacted to CompactedRevision; the caller records each Defragment step that succeeded
	// and forgets them when it records a newer compaction. Under a NOSPACE alarm a member's
	// DBSizeInUse can go on counting the pages a compaction freed: etcd updates it when a
	// write transaction commits, and the alarm refuses the writes that would commit one. So
	// after the compaction each member over the threshold is defragmented once whatever it
	// reports free, and only then judged by its free pages. Losing the record costs one more
	// defragmentation of each member over the threshold.
	DefragmentedSinceCompaction map[uint64]bool
	// QuotaBytes is the space quota the members run with, or will once the spec's is rolled
	// out (--quota-backend-bytes); ≤ 0 means DefaultQuotaBytes.
	QuotaBytes int64
	Policy     Policy
	// Busy is true while another planner (a rollout, a membership change) has work in
	// progress: defragmentation waits for it. The alarm handling does not (the rollout does
	// not restart members under an alarm, so each would wait for the other).
	Busy bool
	// MaxLag is how far (raft entries) a member may trail the leader and count as caught up.
	MaxLag uint64
	// Defragmentation is the defragmentation the operator recorded before it started it, when
	// that record stands and etcd does not show it over (plan.DefragmentationOver); nil when
	// none stands. DefragmentationWait is what DefragmentationOver says it waits for.
	Defragmentation     *plan.Defragmentation
	DefragmentationWait string
}

// Fragmented is how much of m's database file is free pages, in bytes and as a share of the
// file. Both are 0 when the sizes are unknown (DBSizeInUse 0: etcd before 3.4, or a member
// that did not answer): taking the whole file for free space would defragment it forever.
func Fragmented(m Member) (bytes int64, ratio float64) {
	if m.DBSize <= 0 || m.DBSizeInUse <= 0 || m.DBSizeInUse >= m.DBSize {
		return 0, 0
	}
	bytes = m.DBSize - m.DBSizeInUse
	return bytes, float64(bytes) / float64(m.DBSize)
}

// Decide returns the one next maintenance step, or a wait, or None:
//
//   - a CORRUPT alarm: wait, naming the members and what to do; nothing is defragmented and
//     the alarm is never disarmed;
//   - a NOSPACE alarm: etcd's recovery (compact to the current revision, defragment, disarm),
//     each step decided from what etcd reports so that a crash between two steps converges
//     (see noSpace); whatever Policy and Busy say;
//   - otherwise, when Policy.Enabled and no other planner is Busy: the members over a
//     threshold (fragmentation when Due, the quota at any time) are defragmented one at a
//     time, followers and learners first (the most free space first), the leader last after
//     MoveLeader hands leadership to a caught-up voter (the only voter is defragmented in
//     place); only when every voter answers and every answering member is caught up, else it
//     waits (the safety gate would refuse the step anyway).
func Decide(o Observation) plan.Step {
	v := newView(o)
	if s, ok := v.corrupt(); ok {
		return s
	}
	if o.Defragmentation != nil {
		return v.whileDefragmenting(v.decide())
	}
	return v.decide()
}

// decide is Decide without a recorded defragmentation standing.
func (v *view) decide() plan.Step {
	o := v.o
	if v.alarmed(plan.AlarmNoSpace) {
		return v.noSpace()
	}
	if !o.Policy.Enabled || o.Busy {
		return none()
	}
	var wanted []Member
	why := map[uint64]string{}
	for _, m := range o.Members {
		if w := v.defragTrigger(m); w != "" {
			wanted, why[m.ID] = append(wanted, m), w
		}
	}
	if len(wanted) == 0 {
		return none()
	}
	if problem := v.notReady(); problem != "" {
		return plan.Waiting(v1alpha1.ReasonDefragmenting, fmt.Sprintf("%s wants a defragmentation (%s), which waits: %s; the safety gate would refuse it",
			name(wanted[0]), why[wanted[0].ID], problem))
	}
	return v.defragmentNext(wanted, func(m Member) string { return why[m.ID] })
}

// ProbeEntries is how many raft entries the planner appends (AdvanceLog) to see whether a
// member with a recorded defragmentation applies them.
const ProbeEntries = 2

// whileDefragmenting replaces step s, decided as if no defragmentation were recorded, while
// one stands: no other member is defragmented and leadership does not move for one (the
// compaction and the disarming of the NOSPACE recovery go on: they disturb no member). On a
// cluster that committed nothing since the record, the member's applied index cannot move
// by itself, so the planner appends ProbeEntries entries that change no key: the next pass
// sees the member apply them (done) or not (still busy). Not under a NOSPACE alarm: etcd
// refuses the lease grants it takes; there a defragmentation that finished shows in the
// member's smaller database.
func (v *view) whileDefragmenting(s plan.Step) plan.Step {
	d := v.o.Defragmentation
	switch s.Kind {
	case plan.Compact, plan.DisarmAlarm:
		return s
	}
	if d.Unreadable == "" && v.leader != nil && v.leaderIdx <= d.AppliedIndex && !v.alarmed(plan.AlarmNoSpace) {
		return plan.Step{Kind: plan.AdvanceLog, Entries: ProbeEntries, Member: d.Member, Reason: v1alpha1.ReasonDefragmenting,
			Message: fmt.Sprintf("appending %d raft entries that change no key, so that the applied index of %s can show whether its defragmentation (recorded at applied index %d) is over: %s",
				ProbeEntries, d.Member, d.AppliedIndex, v.o.DefragmentationWait)}
	}
	w := plan.Waiting(v1alpha1.ReasonDefragmenting, v.o.DefragmentationWait+"; maintenance waits until it is over")
	w.Member = d.Member
	return w
}

func none() plan.Step { return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled} }

// view is an Observation with its defaults applied and its leader found.
type view struct {
	o          Observation
	leader     *Member
	leaderIdx  uint64
	quota      int64
	nearQuota  int64 // QuotaRatio of the quota
	ratio      float64
	minFrag    int64
	quotaRatio float64
}

func newView(o Observation) *view {
	v := &view{o: o, quota: o.QuotaBytes, ratio: o.Policy.Ratio, minFrag: o.Policy.MinFragmentedBytes, quotaRatio: o.Policy.QuotaRatio}
	if v.quota <= 0 {
		v.quota = DefaultQuotaBytes
	}
	if v.ratio <= 0 {
		v.ratio = DefaultRatio
	}
	if v.minFrag <= 0 {
		v.minFrag = DefaultMinFragmentedBytes
	}
	if v.quotaRatio <= 0 {
		v.quotaRatio = DefaultQuotaRatio
	}
	v.nearQuota = int64(v.quotaRatio * float64(v.quota))
	for i, m := range o.Members {
		if m.Leader && m.Answering {
			if v.leader != nil {
				v.leader = nil // two leaders: an election under way, no leader is known
				break
			}
			v.leader = &o.Members[i]
		}
	}
	if v.leader != nil {
		v.leaderIdx = o.LeaderRaftIndex
		if v.leaderIdx == 0 {
			v.leaderIdx = v.leader.RaftIndex
		}
	}
	return v
}

func (v *view) isLeader(m Member) bool { return v.leader != nil && m.ID == v.leader.ID }

// defragTrigger says why m is due a defragmentation outside a NOSPACE alarm, or "".
func (v *view) defragTrigger(m Member) string {
	if !m.Answering {
		return ""
	}
	b, r := Fragmented(m)
	switch {
	case m.DBSize > v.nearQuota && b >= MinReclaimBytes:
		return fmt.Sprintf("its database is %s, above %s (%.0f%% of the %s quota), and %s of it is free", size(m.DBSize), size(v.nearQuota),
			100*v.quotaRatio, size(v.quota), size(b))
	case v.o.Policy.Due && b >= v.minFrag && r >= v.ratio:
		return fmt.Sprintf("%s of its %s database is free (%.0f%%, the threshold is %.0f%% and at least %s)", size(b), size(m.DBSize), 100*r, 100*v.ratio, size(v.minFrag))
	}
	return ""
}

// notReady says why no member may be defragmented now, or "": every voting member must answer
// and follow a known leader, and every answering member must be caught up with it.
func (v *view) notReady() string {
	if v.leader == nil {
		return "no leader is known"
	}
	var down, behind []string
	for _, m := range v.o.Members {
		switch {
		case m.Voter && !m.Answering:
			down = append(down, name(m))
		case m.Answering && v.leaderIdx > m.RaftIndex+v.o.MaxLag:
			behind = append(behind, fmt.Sprintf("%s trails the leader by %d raft entries", name(m), v.leaderIdx-m.RaftIndex))
		}
	}
	switch {
	case len(down) > 0:
		sort.Strings(down)
		return "voting member " + strings.Join(down, ", ") + " does not answer"
	case len(behind) > 0:
		sort.Strings(behind)
		return strings.Join(behind, "; ")
	}
	return ""
}

// defragmentNext picks, among the wanted members, the next to defragment: a follower or
// learner first (the most free space first, then by name), the leader last after a hand-over,
// or in place when it is the only voter. The caller must have checked notReady.
func (v *view) defragmentNext(wanted []Member, why func(Member) string) plan.Step {
	sort.SliceStable(wanted, func(i, j int) bool {
		bi, _ := Fragmented(wanted[i])
		bj, _ := Fragmented(wanted[j])
		if bi != bj {
			return bi > bj
		}
		return name(wanted[i]) < name(wanted[j])
	})
	for _, m := range wanted {
		if !v.isLeader(m) {
			return defragment(m, why(m))
		}
	}
	l := *v.leader
	var target *Member
	for i, m := range v.o.Members {
		if !m.Voter || !m.Answering || v.isLeader(m) {
			continue
		}
		// The caught-up voter furthest ahead; by name among equals.
		if target == nil || m.RaftIndex > target.RaftIndex || (m.RaftIndex == target.RaftIndex && name(m) < name(*target)) {
			target = &v.o.Members[i]
		}
	}
	if target == nil {
		return defragment(l, why(l)+"; it is the only voting member, so it is defragmented in place")
	}
	return plan.Step{Kind: plan.MoveLeader, Member: l.Name, ID: l.ID, Target: target.ID, Reason: v1alpha1.ReasonDefragmenting,
		Message: fmt.Sprintf("moving leadership from %s to %s before defragmenting %s (%s)", name(l), name(*target), name(l), why(l))}
}

func defragment(m Member, why string) plan.Step {
	return plan.Step{Kind: plan.Defragment, Member: m.Name, ID: m.ID, Reason: v1alpha1.ReasonDefragmenting,
		Message: fmt.Sprintf("defragmenting %s: %s", name(m), why)}
}

// corrupt: a CORRUPT alarm stops all maintenance, and is never disarmed.
func (v *view) corrupt() (plan.Step, bool) {
	ids := v.alarmedMembers(plan.AlarmCorrupt)
	if len(ids) == 0 {
		return plan.Step{}, false
	}
	names := v.names(ids)
	s := plan.Waiting(v1alpha1.ReasonCorruptAlarm, fmt.Sprintf(
		"etcd raised a CORRUPT alarm (member %s): a member's data differs from the others'. The operator does not defragment or disarm it. "+
			"Find the corrupt member (etcdctl alarm list; etcdctl endpoint hashkv --cluster shows the member whose hash differs at the same revision), "+
			"then remove it (etcdctl member remove) so that the operator replaces it with a fresh member, or restore the cluster from a backup; "+
			"then disarm the alarm (etcdctl alarm disarm)", strings.Join(names, ", ")))
	s.Member = v.memberName(ids[0])
	return s, true
}

// noSpace is etcd's recovery from a NOSPACE alarm (the "space quota" section of etcd's
// maintenance guide): compact the keyspace to the current revision, defragment the members,
// disarm the alarm. While the alarm is active etcd refuses every write but deletions, so each
// step is decided from what etcd reports, and a crash between two steps converges:
//
//  1. every voting member answers and its DBSize is at most QuotaRatio of the quota (the
//     quota was raised, or steps 2 and 3 freed enough): disarm the alarms, one member's per
//     step; a disarmed alarm is gone from Alarms;
//  2. the keyspace is not known to be compacted to the current revision (CompactedRevision <
//     Revision): compact to Revision. Under the alarm the revision moves only when keys are
//     deleted (by a client, or by an expiring lease), and only a finite set of keys can be
//     deleted, so this repeats only while deletions free history;
//  3. members whose DBSize is above QuotaRatio of the quota and that were not defragmented
//     since the compaction, or hold at least MinReclaimBytes of free pages: defragment them
//     one at a time, followers first, the most free space first, the leader last after
//     MoveLeader. The free pages alone would not do: a member may report the pages the
//     compaction freed as in use until a write commits, and none commits under the alarm
//     (see DefragmentedSinceCompaction). A defragmented member is recorded and holds no free
//     pages, so it drops out by itself;
//  4. otherwise compaction and defragmentation freed what they can: the data does not fit.
//     Wait (degraded) for the user to raise the quota or delete data; nothing loops.
//
// Members under QuotaRatio are not defragmented here: they do not keep the alarm up, and
// each defragmentation costs a member's availability; the quota and fragmentation triggers
// deal with them once the alarm is gone.
func (v *view) noSpace() plan.Step {
	ids := v.alarmedMembers(plan.AlarmNoSpace)
	alarmed := strings.Join(v.names(ids), ", ")
	wait := func(format string, a ...any) plan.Step {
		return plan.Waiting(v1alpha1.ReasonNoSpaceAlarm, fmt.Sprintf("etcd raised a NOSPACE alarm (member %s) and refuses writes: ", alarmed)+fmt.Sprintf(format, a...))
	}
	if v.leader == nil {
		return wait("no leader is known; the recovery (compact, defragment, disarm) waits for one")
	}
	var down []string
	var over []Member
	for _, m := range v.o.Members {
		switch {
		case m.Voter && !m.Answering:
			down = append(down, name(m))
		case m.Answering && m.DBSize > v.nearQuota:
			over = append(over, m)
		}
	}
	sort.Strings(down)
	if len(down) == 0 && len(over) == 0 {
		id := ids[0]
		return plan.Step{Kind: plan.DisarmAlarm, Member: v.memberName(id), ID: id, Alarm: plan.AlarmNoSpace, Reason: v1alpha1.ReasonDisarmingAlarm,
			Message: fmt.Sprintf("disarming the NOSPACE alarm of %s: every member's database is at most %s (%.0f%% of the %s quota)",
				v.nameOf(id), size(v.nearQuota), 100*v.quotaRatio, size(v.quota))}
	}
	if v.o.Revision <= 0 {
		return wait("the current revision is unknown, so the keyspace cannot be compacted yet")
	}
	if v.o.CompactedRevision < v.o.Revision {
		return plan.Step{Kind: plan.Compact, Revision: v.o.Revision, Reason: v1alpha1.ReasonCompacting,
			Message: fmt.Sprintf("NOSPACE alarm (member %s): compacting the keyspace to the current revision %d, so that a defragmentation can give the history's space back (watchers older than that revision must re-list)",
				alarmed, v.o.Revision)}
	}
	var wanted []Member
	for _, m := range over {
		if b, _ := Fragmented(m); b >= MinReclaimBytes || !v.o.DefragmentedSinceCompaction[m.ID] {
			wanted = append(wanted, m)
		}
	}
	if len(wanted) > 0 {
		if problem := v.notReady(); problem != "" {
			return wait("the keyspace is compacted to revision %d; defragmenting %s waits: %s (the safety gate would refuse it)", v.o.CompactedRevision, name(wanted[0]), problem)
		}
		return v.defragmentNext(wanted, func(m Member) string {
			b, _ := Fragmented(m)
			free := fmt.Sprintf("%s of it is free after compaction", size(b))
			if b < MinReclaimBytes {
				free = fmt.Sprintf("it was not defragmented since the compaction; it reports %s free, but etcd may count what the compaction freed as in use until a write commits, and the alarm refuses writes", size(b))
			}
			return fmt.Sprintf("NOSPACE alarm: its database is %s, above %s (%.0f%% of the %s quota), and %s",
				size(m.DBSize), size(v.nearQuota), 100*v.quotaRatio, size(v.quota), free)
		})
	}
	if len(down) > 0 {
		return wait("voting member %s does not answer, so its database size is unknown; the alarm is disarmed once it answers (or is replaced) and every member's database is at most %s",
			strings.Join(down, ", "), size(v.nearQuota))
	}
	var full []string
	for _, m := range over {
		full = append(full, fmt.Sprintf("%s %s (%s in use)", name(m), size(m.DBSize), size(m.DBSizeInUse)))
	}
	sort.Strings(full)
	return wait("after compaction to revision %d and defragmentation the data does not fit: %s, above %s (%.0f%% of the %s quota); "+
		"disarming would let writes fill the rest and raise the alarm again. Raise spec.etcd.quotaBackendBytes (the alarm is disarmed once the data "+
		"fits under %.0f%% of the new quota) or delete data (deletions are allowed; the operator then compacts, defragments and disarms)",
		v.o.CompactedRevision, strings.Join(full, ", "), size(v.nearQuota), 100*v.quotaRatio, size(v.quota), 100*v.quotaRatio)
}

func (v *view) alarmed(typ string) bool { return len(v.alarmedMembers(typ)) > 0 }

// alarmedMembers are the members with an alarm of type typ, in ID order, each once.
func (v *view) alarmedMembers(typ string) []uint64 {
	seen := map[uint64]bool{}
	var ids []uint64
	for _, a := range v.o.Alarms {
		if a.Type == typ && !seen[a.MemberID] {
			seen[a.MemberID] = true
			ids = append(ids, a.MemberID)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// memberName is the name of member id, or "" when it is not in the member list or has not
// started.
func (v *view) memberName(id uint64) string {
	for _, m := range v.o.Members {
		if m.ID == id {
			return m.Name
		}
	}
	return ""
}

// nameOf is the name of member id, or its ID when it has none (removed since it raised an
// alarm, or not started).
func (v *view) nameOf(id uint64) string {
	if n := v.memberName(id); n != "" {
		return n
	}
	return etcd.FormatID(id)
}

func (v *view) names(ids []uint64) []string {
	var out []string
	for _, id := range ids {
		out = append(out, v.nameOf(id))
	}
	return out
}

func name(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	return etcd.FormatID(m.ID)
}

// size formats a byte count for messages.
func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

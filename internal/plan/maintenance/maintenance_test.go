package maintenance

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

const mib = 1 << 20

// cluster is n healthy voting members e-0..e-(n-1) (IDs 1..n) at raft index 1000, led by
// e-0, each with a 100 MiB database of which 90 MiB in use; maintenance enabled and due.
func cluster(n int) Observation {
	o := Observation{LeaderRaftIndex: 1000, Revision: 5000, MaxLag: 100, Policy: Policy{Enabled: true, Due: true}}
	for k := 0; k < n; k++ {
		o.Members = append(o.Members, Member{Name: fmt.Sprintf("e-%d", k), ID: uint64(k + 1), Voter: true, Leader: k == 0, Answering: true,
			DBSize: 100 * mib, DBSizeInUse: 90 * mib, RaftIndex: 1000})
	}
	return o
}

type edit func(o *Observation)

func with(o Observation, edits ...edit) Observation {
	o.Members = slices.Clone(o.Members)
	o.Alarms = slices.Clone(o.Alarms)
	for _, e := range edits {
		e(&o)
	}
	return o
}

// sizes sets member k's database size and the part of it in use, in MiB.
func sizes(k int, db, inUse int64) edit {
	return func(o *Observation) { o.Members[k].DBSize, o.Members[k].DBSizeInUse = db*mib, inUse*mib }
}

func down(k int) edit {
	return func(o *Observation) {
		m := &o.Members[k]
		m.Answering, m.Leader, m.DBSize, m.DBSizeInUse, m.RaftIndex = false, false, 0, 0, 0
	}
}

func lag(k int, n uint64) edit { return func(o *Observation) { o.Members[k].RaftIndex = 1000 - n } }

// defragging records a defragmentation of e-k that started at applied index applied and is
// not shown over.
func defragging(k int, applied uint64) edit {
	return func(o *Observation) {
		m := o.Members[k]
		o.Defragmentation = &plan.Defragmentation{Member: m.Name, ID: m.ID, AppliedIndex: applied, RaftIndex: applied, DBSize: m.DBSize}
		o.DefragmentationWait = m.Name + " is being defragmented (frozen)"
	}
}

func learner(k int) edit { return func(o *Observation) { o.Members[k].Voter = false } }

func leader(k int) edit {
	return func(o *Observation) {
		for i := range o.Members {
			o.Members[i].Leader = i == k
		}
	}
}

func alarm(id uint64, typ string) edit {
	return func(o *Observation) { o.Alarms = append(o.Alarms, Alarm{MemberID: id, Type: typ}) }
}

func quota(b int64) edit { return func(o *Observation) { o.QuotaBytes = b } }

func compacted(o *Observation) { o.CompactedRevision = o.Revision }

// defragmented records members (by ID) as defragmented since the compaction.
func defragmented(ids ...uint64) edit {
	return func(o *Observation) {
		o.DefragmentedSinceCompaction = map[uint64]bool{}
		for _, id := range ids {
			o.DefragmentedSinceCompaction[id] = true
		}
	}
}

func TestFragmented(t *testing.T) {
	tests := []struct {
		m     Member
		bytes int64
		ratio float64
	}{
		{Member{DBSize: 100 * mib, DBSizeInUse: 25 * mib}, 75 * mib, 0.75},
		{Member{DBSize: 100 * mib, DBSizeInUse: 100 * mib}, 0, 0},
		{Member{DBSize: 100 * mib}, 0, 0},                         // etcd before 3.4 reports no size in use
		{Member{}, 0, 0},                                          // did not answer
		{Member{DBSize: 100 * mib, DBSizeInUse: 120 * mib}, 0, 0}, // read between two updates
	}
	for _, tt := range tests {
		if b, r := Fragmented(tt.m); b != tt.bytes || r != tt.ratio {
			t.Errorf("Fragmented(%d/%d) = %d, %v; want %d, %v", tt.m.DBSizeInUse, tt.m.DBSize, b, r, tt.bytes, tt.ratio)
		}
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		o      Observation
		kind   plan.Kind
		reason string
		member string
		id     uint64
		target uint64
		msg    string // a part of the message
	}{
		{name: "nothing fragmented", o: cluster(3), kind: plan.None},
		{name: "a fragmented follower", o: with(cluster(3), sizes(2, 400, 100)), kind: plan.Defragment, reason: v1alpha1.ReasonDefragmenting,
			member: "e-2", id: 3, msg: "300.0 MiB of its 400.0 MiB database is free (75%"},
		{name: "fragmentation waits for the schedule", o: with(cluster(3), sizes(2, 400, 100), func(o *Observation) { o.Policy.Due = false }), kind: plan.None},
		{name: "disabled", o: with(cluster(3), sizes(2, 400, 100), func(o *Observation) { o.Policy.Enabled = false }), kind: plan.None},
		{name: "another planner is busy", o: with(cluster(3), sizes(2, 400, 100), func(o *Observation) { o.Busy = true }), kind: plan.None},
		{name: "below the ratio", o: with(cluster(3), sizes(2, 400, 250)), kind: plan.None},
		{name: "below the least free space", o: with(cluster(3), sizes(2, 100, 40)), kind: plan.None},
		{name: "a lower ratio and least free space", o: with(cluster(3), sizes(2, 100, 40), func(o *Observation) {
			o.Policy.Ratio, o.Policy.MinFragmentedBytes = 0.3, 32*mib
		}), kind: plan.Defragment, member: "e-2"},
		{name: "size in use unknown", o: with(cluster(3), sizes(2, 400, 0)), kind: plan.None},
		{name: "near the quota, outside the schedule", o: with(cluster(3), sizes(1, 1700, 1690), func(o *Observation) { o.Policy.Due = false }),
			kind: plan.Defragment, member: "e-1", msg: "above 1.60 GiB (80% of the 2.00 GiB quota)"},
		{name: "near the quota with nothing to reclaim", o: with(cluster(3), sizes(1, 1700, 1700)), kind: plan.None},
		{name: "near a smaller quota", o: with(cluster(3), sizes(1, 90, 80), quota(100*mib)), kind: plan.Defragment, member: "e-1"},
		{name: "followers first, the most free space first", o: with(cluster(3), sizes(0, 900, 100), sizes(1, 400, 100), sizes(2, 500, 100)),
			kind: plan.Defragment, member: "e-2"},
		{name: "the leader last: move leadership away", o: with(cluster(3), sizes(0, 900, 100)),
			kind: plan.MoveLeader, reason: v1alpha1.ReasonDefragmenting, member: "e-0", id: 1, target: 2, msg: "before defragmenting e-0"},
		{name: "leadership goes to the voter furthest ahead", o: with(cluster(3), sizes(0, 900, 100), func(o *Observation) {
			o.Members[2].RaftIndex, o.LeaderRaftIndex = 1010, 1010
		}), kind: plan.MoveLeader, target: 3},
		{name: "leadership moved: the former leader is defragmented", o: with(cluster(3), sizes(0, 900, 100), leader(1)),
			kind: plan.Defragment, member: "e-0", id: 1},
		{name: "the only member is defragmented in place", o: with(cluster(1), sizes(0, 900, 100)), kind: plan.Defragment, member: "e-0",
			msg: "only voting member"},
		{name: "the only voter beside a learner", o: with(cluster(2), learner(1), sizes(0, 900, 100)), kind: plan.Defragment, member: "e-0"},
		{name: "a learner is a follower", o: with(cluster(3), learner(2), sizes(2, 400, 100)), kind: plan.Defragment, member: "e-2"},
		{name: "a voter is down", o: with(cluster(3), sizes(2, 400, 100), down(1)), kind: plan.Wait, reason: v1alpha1.ReasonDefragmenting,
			msg: "voting member e-1 does not answer; the safety gate would refuse it"},
		{name: "a voter is down, nothing to do", o: with(cluster(3), down(1)), kind: plan.None},
		{name: "a silent learner does not hold the others", o: with(cluster(4), learner(3), down(3), sizes(2, 400, 100)), kind: plan.Defragment, member: "e-2"},
		{name: "a member trails the leader", o: with(cluster(3), sizes(2, 400, 100), lag(1, 500)), kind: plan.Wait,
			msg: "e-1 trails the leader by 500 raft entries"},
		{name: "no leader", o: with(cluster(3), sizes(2, 400, 100), leader(-1)), kind: plan.Wait, msg: "no leader is known"},
		{name: "no leader, nothing to do", o: with(cluster(3), leader(-1)), kind: plan.None},

		// Path 5: a recorded defragmentation that is not shown over holds every other one.
		{name: "a recorded defragmentation holds the next", o: with(cluster(3), sizes(2, 400, 100), defragging(1, 900)),
			kind: plan.Wait, reason: v1alpha1.ReasonDefragmenting, member: "e-1", msg: "e-1 is being defragmented (frozen)"},
		{name: "a recorded defragmentation holds the leader's hand-over", o: with(cluster(3), sizes(0, 900, 100), defragging(1, 900)),
			kind: plan.Wait, reason: v1alpha1.ReasonDefragmenting, msg: "e-1 is being defragmented"},
		{name: "a recorded defragmentation on a cluster that commits nothing: append entries to see it move", o: with(cluster(3), defragging(1, 1000)),
			kind: plan.AdvanceLog, reason: v1alpha1.ReasonDefragmenting, msg: "so that the applied index of e-1 can show"},
		{name: "the probe runs when disabled and busy", o: with(cluster(3), defragging(1, 1000), func(o *Observation) { o.Policy, o.Busy = Policy{}, true }),
			kind: plan.AdvanceLog},
		{name: "a frozen member while the others are quiet waits, nothing to do", o: with(cluster(3), defragging(1, 900)),
			kind: plan.Wait, reason: v1alpha1.ReasonDefragmenting, msg: "e-1 is being defragmented"},
		{name: "an unreadable record holds defragmentations", o: with(cluster(3), sizes(2, 400, 100), func(o *Observation) {
			o.Defragmentation, o.DefragmentationWait = &plan.Defragmentation{Unreadable: "bad"}, "the stored defragmentation record is unreadable"
		}), kind: plan.Wait, msg: "unreadable"},
		{name: "NOSPACE: a recorded defragmentation does not hold the compaction", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95),
			alarm(2, plan.AlarmNoSpace), defragging(1, 1000)), kind: plan.Compact},
		{name: "NOSPACE: no entry is appended (etcd refuses the lease grants), the defragmentation waits", o: with(cluster(3), quota(100*mib),
			sizes(0, 100, 40), sizes(1, 100, 50), sizes(2, 100, 30), alarm(2, plan.AlarmNoSpace), compacted, defragging(1, 1000)),
			kind: plan.Wait, reason: v1alpha1.ReasonDefragmenting, msg: "e-1 is being defragmented"},
		{name: "CORRUPT before a recorded defragmentation", o: with(cluster(3), alarm(2, plan.AlarmCorrupt), defragging(1, 1000)), kind: plan.Wait,
			reason: v1alpha1.ReasonCorruptAlarm},

		{name: "CORRUPT", o: with(cluster(3), sizes(2, 400, 100), alarm(2, plan.AlarmCorrupt)), kind: plan.Wait, reason: v1alpha1.ReasonCorruptAlarm,
			member: "e-1", msg: "CORRUPT alarm (member e-1)"},
		{name: "CORRUPT says what to do", o: with(cluster(3), alarm(2, plan.AlarmCorrupt)), kind: plan.Wait, msg: "etcdctl endpoint hashkv"},
		{name: "CORRUPT before NOSPACE", o: with(cluster(3), alarm(3, plan.AlarmNoSpace), alarm(2, plan.AlarmCorrupt)), kind: plan.Wait,
			reason: v1alpha1.ReasonCorruptAlarm},
		{name: "CORRUPT of a removed member", o: with(cluster(3), alarm(0x99, plan.AlarmCorrupt)), kind: plan.Wait, reason: v1alpha1.ReasonCorruptAlarm,
			msg: "member 99"},

		{name: "NOSPACE: compact first", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace)),
			kind: plan.Compact, reason: v1alpha1.ReasonCompacting, msg: "compacting the keyspace to the current revision 5000"},
		{name: "NOSPACE: compacted to an older revision", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace),
			func(o *Observation) { o.CompactedRevision = 4000 }), kind: plan.Compact},
		{name: "NOSPACE: compacted, defragment the fullest follower", o: with(cluster(3), quota(100*mib), sizes(0, 100, 40), sizes(1, 100, 50),
			sizes(2, 100, 30), alarm(2, plan.AlarmNoSpace), compacted),
			kind: plan.Defragment, reason: v1alpha1.ReasonDefragmenting, member: "e-2", msg: "NOSPACE alarm"},
		{name: "NOSPACE: members under the threshold are left alone", o: with(cluster(3), quota(100*mib), sizes(0, 100, 40), sizes(1, 100, 50),
			sizes(2, 70, 30), alarm(2, plan.AlarmNoSpace), compacted), kind: plan.Defragment, member: "e-1"},
		{name: "NOSPACE: the leader last", o: with(cluster(3), quota(100*mib), sizes(0, 100, 40), sizes(1, 50, 50), sizes(2, 50, 50),
			alarm(1, plan.AlarmNoSpace), compacted), kind: plan.MoveLeader, reason: v1alpha1.ReasonDefragmenting, member: "e-0", target: 2},
		{name: "NOSPACE: everything fits, disarm", o: with(cluster(3), quota(100*mib), sizes(0, 50, 50), sizes(1, 50, 50), sizes(2, 50, 50),
			alarm(3, plan.AlarmNoSpace), alarm(2, plan.AlarmNoSpace), compacted),
			kind: plan.DisarmAlarm, reason: v1alpha1.ReasonDisarmingAlarm, member: "e-1", id: 2, msg: "at most 80.0 MiB (80% of the 100.0 MiB quota)"},
		{name: "NOSPACE: the quota was raised, disarm without compacting", o: with(cluster(3), alarm(2, plan.AlarmNoSpace)),
			kind: plan.DisarmAlarm, id: 2},
		{name: "NOSPACE: disarm the alarm of a removed member", o: with(cluster(3), alarm(0x99, plan.AlarmNoSpace)),
			kind: plan.DisarmAlarm, member: "", id: 0x99, msg: "alarm of 99"},
		{name: "NOSPACE: the data does not fit", o: with(cluster(3), quota(100*mib), sizes(0, 50, 50), sizes(1, 95, 95), sizes(2, 50, 50),
			alarm(2, plan.AlarmNoSpace), compacted, defragmented(2)),
			kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "the data does not fit: e-1 95.0 MiB (95.0 MiB in use), above 80.0 MiB"},
		// etcd updates the size in use when a write commits, and the alarm refuses writes: a
		// member may go on reporting the space the compaction freed as in use.
		{name: "NOSPACE: compacted, a member not defragmented since is, whatever it reports free", o: with(cluster(3), quota(100*mib),
			sizes(0, 50, 50), sizes(1, 95, 95), sizes(2, 50, 50), alarm(2, plan.AlarmNoSpace), compacted),
			kind: plan.Defragment, reason: v1alpha1.ReasonDefragmenting, member: "e-1", msg: "was not defragmented since the compaction"},
		{name: "NOSPACE: compacted, a member defragmented since is judged by its free pages", o: with(cluster(3), quota(100*mib),
			sizes(0, 50, 50), sizes(1, 95, 60), sizes(2, 50, 50), alarm(2, plan.AlarmNoSpace), compacted, defragmented(2)),
			kind: plan.Defragment, member: "e-1", msg: "35.0 MiB of it is free after compaction"},
		{name: "NOSPACE: the leader not defragmented since the compaction, last", o: with(cluster(3), quota(100*mib), sizes(0, 95, 95),
			sizes(1, 95, 95), sizes(2, 50, 50), alarm(2, plan.AlarmNoSpace), compacted, defragmented(2)),
			kind: plan.MoveLeader, member: "e-0", target: 2},
		{name: "NOSPACE: handled when disabled and busy", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace),
			func(o *Observation) { o.Policy, o.Busy = Policy{}, true }), kind: plan.Compact},
		{name: "NOSPACE: no leader", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace), leader(-1)),
			kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "no leader is known"},
		{name: "NOSPACE: revision unknown", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace),
			func(o *Observation) { o.Revision = 0 }), kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "revision is unknown"},
		{name: "NOSPACE: a voter down does not hold the compaction", o: with(cluster(3), quota(100*mib), sizes(1, 100, 95), alarm(2, plan.AlarmNoSpace), down(2)),
			kind: plan.Compact},
		{name: "NOSPACE: a voter down holds the defragmentation", o: with(cluster(3), quota(100*mib), sizes(1, 100, 40), alarm(2, plan.AlarmNoSpace), down(2), compacted),
			kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "voting member e-2 does not answer"},
		{name: "NOSPACE: a voter down holds the disarming", o: with(cluster(3), quota(100*mib), sizes(0, 50, 50), sizes(1, 50, 50), alarm(2, plan.AlarmNoSpace), down(2), compacted),
			kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "its database size is unknown"},
		{name: "NOSPACE: a lagging member holds the defragmentation", o: with(cluster(3), quota(100*mib), sizes(1, 100, 40), alarm(2, plan.AlarmNoSpace), lag(2, 500), compacted),
			kind: plan.Wait, reason: v1alpha1.ReasonNoSpaceAlarm, msg: "trails the leader by 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Decide(tt.o)
			if s.Kind != tt.kind || (tt.reason != "" && s.Reason != tt.reason) || (tt.member != "" && s.Member != tt.member) ||
				(tt.id != 0 && s.ID != tt.id) || s.Target != tt.target || !strings.Contains(s.Message, tt.msg) || (s.Kind != plan.None && s.Message == "") {
				t.Fatalf("got %s %s %s/%d target %d (%s)\nwant %s %s %s/%d target %d (%q)", s.Kind, s.Reason, s.Member, s.ID, s.Target, s.Message,
					tt.kind, tt.reason, tt.member, tt.id, tt.target, tt.msg)
			}
			if s.Kind == plan.Compact && s.Revision != tt.o.Revision {
				t.Fatalf("compacts to %d, want the current revision %d", s.Revision, tt.o.Revision)
			}
			if s.Kind == plan.DisarmAlarm && s.Alarm != plan.AlarmNoSpace {
				t.Fatalf("disarms %q", s.Alarm)
			}
			// Whatever the planner proposes passes the safety gate, and what it does not
			// propose (it waits) the gate would refuse.
			if r := plan.Check(s, evidence(tt.o)); r != nil {
				t.Fatalf("the gate refuses %s %s: %v", s.Kind, s.Member, r)
			}
		})
	}
}

// TestWaitsAreWhatTheGateRefuses: where the planner waits for a member, the step it would
// otherwise take is one the safety gate refuses.
func TestWaitsAreWhatTheGateRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Observation
		step plan.Step
	}{
		{"a voter down", with(cluster(3), sizes(2, 400, 100), down(1)), plan.Step{Kind: plan.Defragment, Member: "e-2", ID: 3}},
		{"a voter trails", with(cluster(3), sizes(2, 400, 100), lag(1, 500)), plan.Step{Kind: plan.Defragment, Member: "e-2", ID: 3}},
		{"no leader", with(cluster(3), sizes(2, 400, 100), leader(-1)), plan.Step{Kind: plan.Defragment, Member: "e-2", ID: 3}},
		{"the leader in place", with(cluster(3), sizes(0, 900, 100)), plan.Step{Kind: plan.Defragment, Member: "e-0", ID: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r := plan.Check(tt.step, evidence(tt.o)); r == nil {
				t.Fatalf("the gate passes %s %s", tt.step.Kind, tt.step.Member)
			}
		})
	}
}

// TestCorruptIsNeverDisarmed: whatever else holds, a CORRUPT alarm yields only a wait.
func TestCorruptIsNeverDisarmed(t *testing.T) {
	base := []Observation{
		cluster(1), cluster(3),
		with(cluster(3), sizes(0, 900, 100), sizes(1, 900, 100)),
		with(cluster(3), quota(100*mib), sizes(1, 100, 40), alarm(2, plan.AlarmNoSpace)),
		with(cluster(3), quota(100*mib), sizes(1, 50, 50), alarm(2, plan.AlarmNoSpace), compacted),
		with(cluster(3), func(o *Observation) { o.Policy, o.Busy = Policy{}, true }),
	}
	for i, o := range base {
		for _, id := range []uint64{1, 2, 0x99} {
			o := with(o, alarm(id, plan.AlarmCorrupt))
			if s := Decide(o); s.Kind != plan.Wait || s.Reason != v1alpha1.ReasonCorruptAlarm {
				t.Errorf("case %d, CORRUPT of %x: got %s %s %s (%s)", i, id, s.Kind, s.Reason, s.Member, s.Message)
			}
		}
	}
}

// model is a tiny world the simulation applies steps to: a compaction frees each member's
// history (history bytes of its space in use), a defragmentation shrinks a member's file to
// what is in use, MoveLeader moves leadership, DisarmAlarm removes the alarm. Deletions (a
// client, an expiring lease) may move the revision and add history while the alarm is on.
type model struct {
	o       Observation
	history map[uint64]int64
	// forget: the controller loses the record of the next compaction (it crashed after it).
	forget bool
	// deletions: after each of the next deletions steps, a deletion moves the revision and
	// adds deleted bytes of history to every member.
	deletions, deleted int64
	// stale: members go on reporting the history a compaction freed as in use (no write
	// commits under the alarm); a defragmentation gives it back all the same.
	stale bool
	freed map[uint64]int64
}

func (md *model) apply(t *testing.T, s plan.Step) {
	t.Helper()
	o := &md.o
	switch s.Kind {
	case plan.Compact:
		for i := range o.Members {
			m := &o.Members[i]
			if md.stale {
				if md.freed == nil {
					md.freed = map[uint64]int64{}
				}
				md.freed[m.ID] += md.history[m.ID]
			} else {
				m.DBSizeInUse -= md.history[m.ID]
			}
			md.history[m.ID] = 0
		}
		// What the controller records: the compaction, which forgets the defragmentations
		// before it, unless it crashed and lost both.
		switch {
		case md.forget:
			md.forget = false
			o.DefragmentedSinceCompaction = nil
		case s.Revision > o.CompactedRevision:
			o.CompactedRevision = s.Revision
			o.DefragmentedSinceCompaction = nil
		}
	case plan.Defragment:
		for i := range o.Members {
			if m := &o.Members[i]; m.ID == s.ID {
				m.DBSizeInUse -= md.freed[m.ID]
				delete(md.freed, m.ID)
				m.DBSize = m.DBSizeInUse
			}
		}
		if o.DefragmentedSinceCompaction == nil {
			o.DefragmentedSinceCompaction = map[uint64]bool{}
		}
		o.DefragmentedSinceCompaction[s.ID] = true
	case plan.MoveLeader:
		for i := range o.Members {
			m := &o.Members[i]
			if m.Leader && m.ID != s.ID {
				t.Fatalf("MoveLeader from %d, but %d leads", s.ID, m.ID)
			}
			m.Leader = m.ID == s.Target
		}
	case plan.DisarmAlarm:
		n := len(o.Alarms)
		o.Alarms = slices.DeleteFunc(o.Alarms, func(a Alarm) bool { return a.MemberID == s.ID && a.Type == s.Alarm })
		if len(o.Alarms) == n {
			t.Fatalf("disarmed %s of %d, which is not raised", s.Alarm, s.ID)
		}
	default:
		t.Fatalf("unexpected step %s", s.Kind)
	}
	if md.deletions > 0 {
		md.deletions--
		o.Revision++
		for i := range o.Members {
			m := &o.Members[i]
			m.DBSizeInUse += md.deleted / 10 // the tombstones
			md.history[m.ID] += md.deleted
		}
	}
}

// run applies Decide's steps to the model until it returns None or a wait; every step must
// pass the safety gate. It returns the steps, the last one included.
func (md *model) run(t *testing.T) []plan.Step {
	t.Helper()
	var steps []plan.Step
	for range 50 {
		s := Decide(md.o)
		if r := plan.Check(s, evidence(md.o)); r != nil {
			t.Fatalf("after %v: the gate refuses %s %s: %v", kinds(steps), s.Kind, s.Member, r)
		}
		steps = append(steps, s)
		if s.Kind == plan.None || s.Kind == plan.Wait {
			return steps
		}
		md.apply(t, s)
	}
	t.Fatalf("no end after 50 steps: %v", kinds(steps))
	return nil
}

// kinds is each step's kind and member, for messages and comparisons.
func kinds(steps []plan.Step) []string {
	var out []string
	for _, s := range steps {
		switch {
		case s.Kind == plan.MoveLeader:
			out = append(out, fmt.Sprintf("%s %s>%d", s.Kind, s.Member, s.Target))
		case s.Kind == plan.DisarmAlarm:
			out = append(out, fmt.Sprintf("%s %d", s.Kind, s.ID))
		case s.Member != "":
			out = append(out, fmt.Sprintf("%s %s", s.Kind, s.Member))
		default:
			out = append(out, string(s.Kind))
		}
	}
	return out
}

// full is a 1 GiB-quota cluster of n members each at the quota, with the given MiB in use
// (history included) and the given MiB of history, and a NOSPACE alarm of every member.
func full(n int, inUse []int64, history int64) *model {
	md := &model{o: with(cluster(n), quota(1<<30)), history: map[uint64]int64{}}
	for k := 0; k < n; k++ {
		m := &md.o.Members[k]
		m.DBSize, m.DBSizeInUse = 1<<30, inUse[k]*mib
		md.history[m.ID] = history * mib
		md.o.Alarms = append(md.o.Alarms, Alarm{MemberID: m.ID, Type: plan.AlarmNoSpace})
	}
	return md
}

func TestSimulateNoSpace(t *testing.T) {
	tests := []struct {
		name string
		md   *model
		want []string
		last string // the last step's reason
	}{
		{name: "history fills the quota: compact, defragment followers, the leader last, disarm",
			md: full(3, []int64{1000, 900, 850}, 500),
			want: []string{"Compact", "Defragment e-2", "Defragment e-1", "MoveLeader e-0>2", "Defragment e-0",
				"DisarmAlarm 1", "DisarmAlarm 2", "DisarmAlarm 3", "None"}},
		{name: "the data is larger than the quota: a wait, not a loop",
			md:   full(3, []int64{1000, 1000, 1000}, 10),
			want: []string{"Compact", "Defragment e-1", "Defragment e-2", "MoveLeader e-0>2", "Defragment e-0", "Wait"},
			last: v1alpha1.ReasonNoSpaceAlarm},
		{name: "the only member", md: full(1, []int64{1000}, 500),
			want: []string{"Compact", "Defragment e-0", "DisarmAlarm 1", "None"}},
		{name: "a crash loses the record of the compaction: one more compaction that changes nothing",
			md:   func() *model { md := full(3, []int64{1000, 900, 850}, 500); md.forget = true; return md }(),
			want: []string{"Compact", "Compact", "Defragment e-2", "Defragment e-1", "MoveLeader e-0>2", "Defragment e-0", "DisarmAlarm 1", "DisarmAlarm 2", "DisarmAlarm 3", "None"}},
		{name: "expiring leases delete keys during the recovery: compactions until the deletions stop",
			md: func() *model {
				md := full(3, []int64{1000, 1000, 1000}, 10)
				md.deletions, md.deleted = 3, 100*mib
				return md
			}(),
			want: []string{"Compact", "Compact", "Compact", "Compact", "Defragment e-1", "Defragment e-2", "MoveLeader e-0>2", "Defragment e-0", "DisarmAlarm 1", "DisarmAlarm 2", "DisarmAlarm 3", "None"}},
		{name: "members report the history the compaction freed as in use, nothing free: each over the threshold is defragmented once, then disarm",
			md: func() *model {
				md := full(3, []int64{1024, 1024, 1024}, 500)
				md.stale = true
				return md
			}(),
			want: []string{"Compact", "Defragment e-1", "Defragment e-2", "MoveLeader e-0>2", "Defragment e-0",
				"DisarmAlarm 1", "DisarmAlarm 2", "DisarmAlarm 3", "None"}},
		{name: "the data does not fit and nothing is reported free: each member defragmented once, then a wait",
			md: func() *model {
				md := full(3, []int64{1024, 1024, 1024}, 10)
				md.stale = true
				return md
			}(),
			want: []string{"Compact", "Defragment e-1", "Defragment e-2", "MoveLeader e-0>2", "Defragment e-0", "Wait"},
			last: v1alpha1.ReasonNoSpaceAlarm},
		{name: "the quota is raised while the data does not fit: disarm",
			md: func() *model {
				md := full(3, []int64{1000, 1000, 1000}, 10)
				md.o.QuotaBytes = 4 << 30
				return md
			}(),
			want: []string{"DisarmAlarm 1", "DisarmAlarm 2", "DisarmAlarm 3", "None"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := tt.md.run(t)
			if got := kinds(steps); !slices.Equal(got, tt.want) {
				t.Fatalf("steps\n%v\nwant\n%v", got, tt.want)
			}
			last := steps[len(steps)-1]
			if tt.last != "" && last.Reason != tt.last {
				t.Fatalf("ends with %s %s (%s), want reason %s", last.Kind, last.Reason, last.Message, tt.last)
			}
			// The end is stable: the next pass decides the same.
			if again := Decide(tt.md.o); again.Kind != last.Kind || again.Reason != last.Reason {
				t.Fatalf("the next pass decides %s %s after %s %s", again.Kind, again.Reason, last.Kind, last.Reason)
			}
		})
	}
}

// TestSimulateFragmentation: without an alarm, every fragmented member once, followers first
// (the most free space first), the leader last after a hand-over; then nothing.
func TestSimulateFragmentation(t *testing.T) {
	md := &model{o: with(cluster(5), sizes(0, 900, 100), sizes(1, 300, 100), sizes(3, 600, 100), sizes(4, 90, 10)), history: map[uint64]int64{}}
	want := []string{"Defragment e-3", "Defragment e-1", "Defragment e-4", "MoveLeader e-0>2", "Defragment e-0", "None"}
	md.o.Policy.MinFragmentedBytes = 32 * mib
	if got := kinds(md.run(t)); !slices.Equal(got, want) {
		t.Fatalf("steps\n%v\nwant\n%v", got, want)
	}
}

// evidence is what the safety gate would read from the world the observation describes:
// StatefulSet "e", every member in a running pod on its claim, each answering member
// reporting every active alarm as etcd does.
func evidence(o Observation) plan.Evidence {
	peer := func(name string) string { return "http://" + name + ".e.ns.svc:2380" }
	obs := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	var leader uint64
	for _, m := range o.Members {
		if m.Leader && m.Answering {
			leader = m.ID
		}
	}
	var errs []string
	for _, a := range o.Alarms {
		errs = append(errs, fmt.Sprintf("memberID:%d alarm:%s ", a.MemberID, a.Type))
	}
	e := plan.Evidence{Etcd: obs, StatefulSet: "e", StsReplicas: int32(len(o.Members)), Desired: int32(len(o.Members)), Formed: true,
		PeerURL: peer, MaxLag: o.MaxLag, Defragmentation: o.Defragmentation}
	for k, m := range o.Members {
		obs.Cluster.Members = append(obs.Cluster.Members, etcd.Member{ID: m.ID, Name: m.Name, PeerURLs: []string{peer(m.Name)},
			ClientURLs: []string{"http://" + m.Name + ":2379"}, IsLearner: !m.Voter})
		if m.Answering {
			idx := m.RaftIndex
			if m.Leader {
				idx = max(idx, o.LeaderRaftIndex)
			}
			obs.Status[m.ID] = etcd.MemberStatus{ID: m.ID, Leader: leader, RaftIndex: idx, DBSize: m.DBSize, IsLearner: !m.Voter, Errors: errs}
		} else {
			obs.StatusErr[m.ID] = fmt.Errorf("connection refused")
		}
		e.Pods = append(e.Pods, plan.Pod{Name: m.Name, Ordinal: int32(k), Exists: true, Running: true, Started: true, Ready: true, NodeReady: true,
			PVCExists: true, PVCUID: fmt.Sprintf("uid-%d", k)})
	}
	return e
}

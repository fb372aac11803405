// Package backup is the backup planner: which member a snapshot is taken from, when the
// schedule wants the next backup, and which scheduled backups retention lets go. It is pure:
// the controllers gather the observation (etcd's member list and status, the EtcdBackups) and
// carry out what it decides.
package backup

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// Source is the member a snapshot is taken from.
type Source struct {
	Member   etcd.Member
	Status   etcd.MemberStatus
	Endpoint string
	// Committed is the leader's committed index read at the start of the backup; Status's
	// AppliedIndex is at least Committed.
	Committed uint64
}

// PickSource chooses the member to take a snapshot from: a voting member that answered, belongs
// to the cluster the member list describes, reports no alarm or error, follows the current
// leader, and has applied every entry up to committed, the leader's committed index read at
// the start of the backup (0: the leader's RaftIndex in o). etcd acknowledges a write only
// once it committed, so such a member holds every write acknowledged before the backup
// started; a member that merely knows the committed index (a follower a few entries behind,
// or one whose apply loop is blocked by a defragmentation) may not. A follower is preferred,
// so the snapshot's disk and network load stays off the leader; among followers the one
// furthest ahead. The leader serves when no follower qualifies (it too must have applied
// committed). It returns why no member qualifies when none does, and whether waiting may help:
// some otherwise healthy voter has only not applied committed yet, so the caller may read
// the members' status again (with the same committed) until a deadline.
func PickSource(o etcd.Observed, committed uint64) (Source, string, bool) {
	leader := o.Leader()
	if leader == 0 {
		return Source{}, "the members follow no common leader: a snapshot now could miss acknowledged writes", false
	}
	if committed == 0 {
		st, ok := o.Status[leader]
		if !ok {
			return Source{}, "the leader did not answer, so its committed index, which the snapshot must hold, is unknown", false
		}
		committed = st.RaftIndex
	}
	var out []Source
	var why []string
	behind := false
	for _, m := range o.Cluster.Members {
		name := plan.NameOr(m)
		st, ok := o.Status[m.ID]
		switch {
		case m.IsLearner:
			continue
		case !ok:
			why = append(why, name+" did not answer")
			continue
		case len(m.ClientURLs) == 0:
			why = append(why, name+" advertises no client URL")
			continue
		case st.ClusterID != o.Cluster.ClusterID:
			why = append(why, fmt.Sprintf("%s reports cluster %s", name, etcd.FormatID(st.ClusterID)))
			continue
		case len(st.Errors) > 0:
			why = append(why, fmt.Sprintf("%s reports %s", name, strings.Join(st.Errors, ", ")))
			continue
		case st.Leader != leader:
			why = append(why, name+" follows another leader")
			continue
		case st.AppliedIndex < committed:
			why = append(why, fmt.Sprintf("%s applied up to index %d, short of the leader's committed index %d", name, st.AppliedIndex, committed))
			behind = true
			continue
		}
		out = append(out, Source{Member: m, Status: st, Endpoint: m.ClientURLs[0], Committed: committed})
	}
	if len(out) == 0 {
		sort.Strings(why)
		return Source{}, fmt.Sprintf("no voting member is healthy and has applied the leader's committed index %d, read when the backup started: %s",
			committed, strings.Join(why, "; ")), behind
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Member.ID == leader) != (b.Member.ID == leader) {
			return b.Member.ID == leader
		}
		if a.Status.AppliedIndex != b.Status.AppliedIndex {
			return a.Status.AppliedIndex > b.Status.AppliedIndex
		}
		return a.Member.Name < b.Member.Name
	})
	return out[0], "", false
}

// Schedule is a parsed cron schedule in a time zone.
type Schedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseSchedule reads a five-field cron schedule or a descriptor (@daily, @every 6h) in the
// IANA time zone tz (UTC when empty).
func ParseSchedule(spec, tz string) (Schedule, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Schedule{}, fmt.Errorf("time zone %q is not an IANA time zone name (for example Europe/Berlin): %w", tz, err)
		}
		loc = l
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %q cannot be read: %w", spec, err)
	}
	return Schedule{sched: s, loc: loc}, nil
}

// maxMissed bounds the walk over missed schedule times: after a long outage only the latest
// missed time gets a backup, as a CronJob does.
const maxMissed = 100000

// Due returns the latest schedule time in (after, now], and false when there is none.
func (s Schedule) Due(after, now time.Time) (time.Time, bool) {
	t := s.sched.Next(after.In(s.loc))
	if t.After(now) {
		return time.Time{}, false
	}
	for i := 0; i < maxMissed; i++ {
		n := s.sched.Next(t)
		if n.After(now) {
			return t, true
		}
		t = n
	}
	return t, true
}

// Next returns the first schedule time after now.
func (s Schedule) Next(now time.Time) time.Time { return s.sched.Next(now.In(s.loc)) }

// Period is the time between the two schedule times after now: how stale the newest backup may
// get before the schedule is overdue.
func (s Schedule) Period(now time.Time) time.Duration {
	a := s.Next(now)
	return s.sched.Next(a).Sub(a)
}

// Name is the EtcdBackup name of cluster's backup for schedule time t: the same for every pass,
// so creating it twice is harmless.
func Name(cluster string, t time.Time) string {
	return fmt.Sprintf("%s-%s", cluster, t.UTC().Format("20060102-1504"))
}

// Phase is where a backup is.
type Phase string

// Phases, as in the EtcdBackup status.
const (
	Pending   Phase = "Pending"
	Running   Phase = "Running"
	Succeeded Phase = "Succeeded"
	Failed    Phase = "Failed"
)

// Record is one EtcdBackup as retention sees it.
type Record struct {
	Name string
	// Scheduled is true for backups the schedule created; retention applies only to those.
	Scheduled bool
	Phase     Phase
	Created   time.Time
	// Completed is when it succeeded or failed (zero while pending or running).
	Completed time.Time
}

// Retention is spec.backup.retention.
type Retention struct {
	MaxCount int
	// MaxAge is 0 for no age bound.
	MaxAge time.Duration
}

// Expired returns the scheduled backups retention deletes, oldest first. Successful backups
// beyond MaxCount, or older than MaxAge, and failed ones, go only when a newer backup
// succeeded; the newest successful backup is always kept; pending and running backups and
// backups made by hand are never touched.
func Expired(records []Record, r Retention, now time.Time) []string {
	var ok, failed []Record
	for _, b := range records {
		if !b.Scheduled {
			continue
		}
		switch b.Phase {
		case Succeeded:
			ok = append(ok, b)
		case Failed:
			failed = append(failed, b)
		}
	}
	if len(ok) == 0 {
		return nil
	}
	newestFirst := func(rs []Record) {
		sort.Slice(rs, func(i, j int) bool {
			if !rs[i].Completed.Equal(rs[j].Completed) {
				return rs[i].Completed.After(rs[j].Completed)
			}
			return rs[i].Name > rs[j].Name
		})
	}
	newestFirst(ok)
	newest := ok[0]
	var out []Record
	for i, b := range ok {
		if i == 0 {
			continue
		}
		if (r.MaxCount > 0 && i >= r.MaxCount) || (r.MaxAge > 0 && now.Sub(b.Completed) > r.MaxAge) {
			out = append(out, b)
		}
	}
	for _, b := range failed {
		if b.Created.Before(newest.Created) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	names := make([]string, len(out))
	for i, b := range out {
		names[i] = b.Name
	}
	return names
}

// MayDelete is the retention invariant, checked again right before a backup is deleted: the
// backup named is scheduled, not pending or running, and a backup created after it succeeded.
func MayDelete(name string, records []Record) string {
	var target *Record
	for i := range records {
		if records[i].Name == name {
			target = &records[i]
		}
	}
	switch {
	case target == nil:
		return ""
	case !target.Scheduled:
		return fmt.Sprintf("%s was not created by the schedule; retention never deletes it", name)
	case target.Phase != Succeeded && target.Phase != Failed:
		return fmt.Sprintf("%s is %s", name, strings.ToLower(string(target.Phase)))
	}
	for _, b := range records {
		if b.Name != name && b.Phase == Succeeded && b.Created.After(target.Created) {
			return ""
		}
	}
	return fmt.Sprintf("no backup newer than %s succeeded", name)
}

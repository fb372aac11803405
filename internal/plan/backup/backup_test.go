package backup

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// cluster builds an observation of n voters etcd-0..n-1 (IDs 1..n), all answering, with the
// leader ID leader, every member at raft (committed) and applied index 100, after edit.
func cluster(n int, leader uint64, edit func(*etcd.Observed)) etcd.Observed {
	o := etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for i := 0; i < n; i++ {
		id := uint64(i + 1)
		name := fmt.Sprintf("etcd-%d", i)
		o.Cluster.Members = append(o.Cluster.Members, etcd.Member{ID: id, Name: name,
			ClientURLs: []string{"http://" + name + ":2379"}})
		o.Status[id] = etcd.MemberStatus{ID: id, ClusterID: 7, Leader: leader, RaftIndex: 100, AppliedIndex: 100}
	}
	if edit != nil {
		edit(&o)
	}
	return o
}

func editStatus(o *etcd.Observed, id uint64, f func(*etcd.MemberStatus)) {
	st := o.Status[id]
	f(&st)
	o.Status[id] = st
}

func TestPickSource(t *testing.T) {
	cases := []struct {
		name      string
		o         etcd.Observed
		committed uint64 // the leader's committed index read at the start; 0: the leader's in o
		want      string
		wantWhy   []string
		wait      bool // none yet, but a member may apply the committed index soon
	}{
		{name: "a follower, not the leader", o: cluster(3, 1, nil), want: "etcd-1"},
		{name: "the follower furthest ahead", o: cluster(3, 1, func(o *etcd.Observed) {
			editStatus(o, 3, func(s *etcd.MemberStatus) { s.RaftIndex, s.AppliedIndex = 101, 101 })
		}), want: "etcd-2"},
		{name: "a lagging follower is skipped", o: cluster(3, 1, func(o *etcd.Observed) {
			editStatus(o, 2, func(s *etcd.MemberStatus) { s.RaftIndex, s.AppliedIndex = 10, 10 })
		}), want: "etcd-2"},
		// Path 6: a follower that knows the leader's committed index but has not applied it
		// lacks writes that may have been acknowledged before the backup started.
		{name: "a follower that has not applied the committed index is skipped", o: cluster(3, 1, func(o *etcd.Observed) {
			editStatus(o, 2, func(s *etcd.MemberStatus) { s.AppliedIndex = 99 })
		}), want: "etcd-2"},
		{name: "followers a few entries behind: the leader, which applied them", o: cluster(3, 1, func(o *etcd.Observed) {
			editStatus(o, 2, func(s *etcd.MemberStatus) { s.AppliedIndex = 95 })
			editStatus(o, 3, func(s *etcd.MemberStatus) { s.AppliedIndex = 99 })
		}), want: "etcd-0"},
		{name: "nobody applied the committed index yet: none, worth waiting", o: cluster(3, 1, func(o *etcd.Observed) {
			for id := uint64(1); id <= 3; id++ {
				editStatus(o, id, func(s *etcd.MemberStatus) { s.AppliedIndex = 90 })
			}
		}), wait: true, wantWhy: []string{"etcd-1 applied up to index 90, short of the leader's committed index 100"}},
		{name: "the committed index read at the start, not a later one", o: cluster(3, 1, func(o *etcd.Observed) {
			for id := uint64(1); id <= 3; id++ {
				editStatus(o, id, func(s *etcd.MemberStatus) { s.RaftIndex, s.AppliedIndex = 200, 120 })
			}
			editStatus(o, 3, func(s *etcd.MemberStatus) { s.AppliedIndex = 150 })
		}), committed: 150, want: "etcd-2"},
		{name: "the leader when no follower qualifies", o: cluster(3, 1, func(o *etcd.Observed) {
			delete(o.Status, 2)
			editStatus(o, 3, func(s *etcd.MemberStatus) { s.Errors = []string{"alarm: NOSPACE"} })
		}), want: "etcd-0"},
		{name: "the only member", o: cluster(1, 1, nil), want: "etcd-0"},
		{name: "learners never", o: cluster(2, 1, func(o *etcd.Observed) {
			o.Cluster.Members[1].IsLearner = true
		}), want: "etcd-0"},
		{name: "a member of another cluster never", o: cluster(2, 1, func(o *etcd.Observed) {
			editStatus(o, 2, func(s *etcd.MemberStatus) { s.ClusterID = 9 })
		}), want: "etcd-0"},
		{name: "no leader: none", o: cluster(3, 0, nil), wantWhy: []string{"no common leader"}},
		{name: "leader silent: none", o: cluster(3, 1, func(o *etcd.Observed) { delete(o.Status, 1) }),
			wantWhy: []string{"leader did not answer"}},
		{name: "every member sick: none, each named", o: cluster(2, 1, func(o *etcd.Observed) {
			editStatus(o, 1, func(s *etcd.MemberStatus) { s.Errors = []string{"alarm: CORRUPT"} })
			editStatus(o, 2, func(s *etcd.MemberStatus) { s.RaftIndex, s.AppliedIndex = 1, 1 })
		}), wait: true, wantWhy: []string{"etcd-0 reports alarm: CORRUPT", "etcd-1 applied up to index 1, short of the leader's committed index 100"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why, wait := PickSource(tc.o, tc.committed)
			if tc.want != "" {
				if why != "" || got.Member.Name != tc.want || got.Endpoint != "http://"+tc.want+":2379" {
					t.Fatalf("got %q at %q (why %q), want %s", got.Member.Name, got.Endpoint, why, tc.want)
				}
				committed := tc.committed
				if committed == 0 {
					committed = tc.o.Status[tc.o.Leader()].RaftIndex
				}
				if got.Committed != committed || got.Status.AppliedIndex < committed {
					t.Fatalf("source %s records committed index %d and applied %d, want %d and at least that", got.Member.Name, got.Committed, got.Status.AppliedIndex, committed)
				}
				return
			}
			if got.Member.Name != "" {
				t.Fatalf("got %s, want none", got.Member.Name)
			}
			if wait != tc.wait {
				t.Errorf("worth waiting: %v, want %v (%s)", wait, tc.wait, why)
			}
			for _, w := range tc.wantWhy {
				if !strings.Contains(why, w) {
					t.Errorf("why %q lacks %q", why, w)
				}
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	day := func(h, m int) time.Time { return time.Date(2026, 11, 23, h, m, 0, 0, time.UTC) }
	s, err := ParseSchedule("0 3 * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Due(day(2, 0), day(2, 59)); ok {
		t.Errorf("due at %v before 03:00", got)
	}
	if got, ok := s.Due(day(2, 0), day(3, 0)); !ok || !got.Equal(day(3, 0)) {
		t.Errorf("Due = %v %v, want 03:00", got, ok)
	}
	if _, ok := s.Due(day(3, 0), day(4, 0)); ok {
		t.Error("03:00 is due again after a backup was created for it")
	}
	// After a long outage only the latest missed time is due.
	if got, ok := s.Due(day(3, 0).AddDate(0, 0, -30), day(4, 0)); !ok || !got.Equal(day(3, 0)) {
		t.Errorf("after 30 missed days Due = %v, want today 03:00", got)
	}
	if got := s.Next(day(3, 0)); !got.Equal(day(3, 0).AddDate(0, 0, 1)) {
		t.Errorf("Next = %v", got)
	}
	if p := s.Period(day(4, 0)); p != 24*time.Hour {
		t.Errorf("Period = %v", p)
	}

	berlin, err := ParseSchedule("0 3 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if got := berlin.Next(day(0, 0)); !got.Equal(day(2, 0)) { // 03:00 CET is 02:00 UTC in November
		t.Errorf("03:00 in Berlin = %v UTC, want 02:00", got.UTC())
	}
	every, err := ParseSchedule("@every 1m", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := every.Due(day(3, 0), day(3, 5).Add(30*time.Second)); !ok || !got.Equal(day(3, 5)) {
		t.Errorf("@every 1m Due = %v %v, want 03:05", got, ok)
	}

	for _, bad := range []struct{ spec, tz, want string }{
		{"61 * * * *", "", "cannot be read"},
		{"0 3 * * *", "Mars/Olympus", "IANA"},
	} {
		if _, err := ParseSchedule(bad.spec, bad.tz); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseSchedule(%q, %q) = %v, want an error with %q", bad.spec, bad.tz, err, bad.want)
		}
	}
	if n := Name("prod", day(3, 0)); n != "prod-20261123-0300" {
		t.Errorf("Name = %s", n)
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	rec := func(name string, hoursAgo int, p Phase) Record {
		at := now.Add(-time.Duration(hoursAgo) * time.Hour)
		r := Record{Name: name, Scheduled: true, Phase: p, Created: at}
		if p == Succeeded || p == Failed {
			r.Completed = at.Add(time.Minute)
		}
		return r
	}
	manual := rec("manual", 100, Succeeded)
	manual.Scheduled = false
	cases := []struct {
		name string
		rs   []Record
		r    Retention
		want []string
	}{
		{name: "within count", rs: []Record{rec("a", 3, Succeeded), rec("b", 2, Succeeded), rec("c", 1, Succeeded)},
			r: Retention{MaxCount: 3}},
		{name: "over count: oldest go", rs: []Record{rec("a", 4, Succeeded), rec("b", 3, Succeeded), rec("c", 2, Succeeded), rec("d", 1, Succeeded)},
			r: Retention{MaxCount: 2}, want: []string{"a", "b"}},
		{name: "by age, newest kept even when old", rs: []Record{rec("a", 50, Succeeded), rec("b", 30, Succeeded)},
			r: Retention{MaxCount: 10, MaxAge: 24 * time.Hour}, want: []string{"a"}},
		{name: "nothing deleted without a success", rs: []Record{rec("a", 50, Failed), rec("b", 30, Failed)},
			r: Retention{MaxCount: 1}},
		{name: "failed ones older than the newest success go", rs: []Record{rec("a", 5, Failed), rec("b", 3, Succeeded), rec("c", 1, Failed)},
			r: Retention{MaxCount: 3}, want: []string{"a"}},
		{name: "running and pending stay", rs: []Record{rec("a", 5, Running), rec("b", 4, Pending), rec("c", 3, Succeeded), rec("d", 1, Succeeded)},
			r: Retention{MaxCount: 1}, want: []string{"c"}},
		{name: "backups made by hand stay", rs: []Record{manual, rec("b", 1, Succeeded)}, r: Retention{MaxCount: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Expired(tc.rs, tc.r, now)
			if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("Expired = %v, want %v", got, tc.want)
			}
			for _, n := range got {
				if why := MayDelete(n, tc.rs); why != "" {
					t.Errorf("Expired chose %s but MayDelete refuses: %s", n, why)
				}
			}
		})
	}
	rs := []Record{rec("a", 5, Succeeded), rec("b", 3, Running), manual}
	for name, want := range map[string]string{"a": "no backup newer", "b": "running", "manual": "not created by the schedule"} {
		if why := MayDelete(name, rs); !strings.Contains(why, want) {
			t.Errorf("MayDelete(%s) = %q, want %q", name, why, want)
		}
	}
}

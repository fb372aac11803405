package plan

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

func TestDefragmentationRecordRoundTrip(t *testing.T) {
	d := Defragmentation{Member: "etc-1", ID: 0x8e9e05c52164694d, Since: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		AppliedIndex: 1000, RaftIndex: 1001, DBSize: 5 << 20}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"id":"8e9e05c52164694d"`) {
		t.Fatalf("the ID is not stored in hexadecimal: %s", b)
	}
	if got := ParseDefragmentation(string(b)); *got != d {
		t.Fatalf("read back %+v, want %+v", *got, d)
	}
	for _, raw := range []string{"", "{", `{"member":"etc-1","id":"zz"}`, `{"member":"etc-1"}`} {
		if got := ParseDefragmentation(raw); got == nil || got.Unreadable == "" {
			t.Errorf("ParseDefragmentation(%q) = %+v, want an unreadable record", raw, got)
		}
	}
}

func TestDefragmentationOver(t *testing.T) {
	rec := Defragmentation{Member: "etc-1", ID: gID(1), AppliedIndex: 1000, DBSize: 100 << 20}
	for _, c := range []struct {
		name string
		fix  *gFix
		over bool
		why  string
	}{
		{"frozen while the leader commits", gCluster(3).defragging(1), false, "stays at 1000 while the leader committed 1200"},
		{"frozen on an idle cluster", gCluster(3).defragging(1).status(0, func(st *etcd.MemberStatus) { st.RaftIndex = 1000 }), false, "committed nothing since"},
		{"silent", gCluster(3).defragging(1).down(1), false, "does not answer"},
		{"etcd unknown", gCluster(3).noMembers(), false, "did not answer with a member list"},
		{"applied past the record and served a read", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) { st.AppliedIndex = 1001 }).read(1, nil), true, "applied up to index 1001"},
		// An AuthStatus entry applies while the defragmentation holds the database.
		{"applied past the record, no read asked", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) { st.AppliedIndex = 1001 }), false, "not asked for a read"},
		{"applied past the record, the read times out", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) { st.AppliedIndex = 1001 }).read(1, context.DeadlineExceeded), false, "serves no read of its database yet"},
		{"the database shrank", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) { st.DBSize = 1 << 20 }), true, "shrank"},
		{"removed from the member list", gCluster(1), true, "no longer a member"},
	} {
		t.Run(c.name, func(t *testing.T) {
			over, why := DefragmentationOver(rec, c.fix.e.Etcd)
			if over != c.over || !strings.Contains(why, c.why) {
				t.Fatalf("got %v %q, want %v with %q", over, why, c.over, c.why)
			}
		})
	}
}

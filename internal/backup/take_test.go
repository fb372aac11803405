package backup_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
)

// TestTakeRefusesAnotherMemberOrOneBehind (issue 25, path 6): the snapshot comes from the
// member the source was chosen as, once it applied the leader's committed index read when the
// backup started; otherwise nothing is stored.
func TestTakeRefusesAnotherMemberOrOneBehind(t *testing.T) {
	const ep = "http://etcd-1.etcd.ns.svc:2379"
	for _, c := range []struct {
		name string
		want backup.Expect
		why  string
	}{
		{"the endpoint now serves another member", backup.Expect{MemberID: 0x99, AppliedIndex: 100}, "answered as 2, not as member 99"},
		{"the member has not applied the committed index", backup.Expect{MemberID: 2, AppliedIndex: 150}, "applied up to index 120, short of the leader's committed index 150"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &etcd.Fake{Statuses: map[string]etcd.MemberStatus{ep: {ID: 2, AppliedIndex: 120, Revision: 7}},
				Snapshots: map[string][]byte{ep: []byte("not read")}}
			dir := t.TempDir()
			_, failure, err := backup.Take(context.Background(), f, ep, c.want, objstore.NewDir(dir), "snap.db")
			if err == nil || failure != backup.FailedSnapshot || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("got %q %v, want SnapshotFailed with %q", failure, err, c.why)
			}
			if _, err := os.Stat(filepath.Join(dir, "snap.db")); !os.IsNotExist(err) {
				t.Fatalf("something was stored: %v", err)
			}
			if f.CallCount("SnapshotClose") != 1 {
				t.Fatal("the refused stream was not closed")
			}
		})
	}
}

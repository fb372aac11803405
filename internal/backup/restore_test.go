package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// fakeSnapshot builds an etcd-shaped snapshot: a bbolt database whose key bucket holds
// revisions 1..rev, followed by the SHA-256 trailer etcd appends.
func fakeSnapshot(t *testing.T, rev int64) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for r := int64(1); r <= rev; r++ {
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k, uint64(r))
			k[8] = '_'
			if err := b.Put(k, []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return append(body, sum[:]...)
}

func TestPrepareSetsDataAsideFetchesAndReadsTheRevision(t *testing.T) {
	snap := fakeSnapshot(t, 42)
	whole := sha256.Sum256(snap)
	want := hex.EncodeToString(whole[:])
	root := t.TempDir()
	// A survivor's data: it must be set aside, never deleted.
	if err := os.MkdirAll(filepath.Join(root, DataDirName, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DataDirName, "member", "old"), []byte("acknowledged"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Prepare(context.Background(), root, "r1", bytes.NewReader(snap), want)
	if err != nil {
		t.Fatal(err)
	}
	if p.Revision != 42 || p.SHA256 != want || p.Size != int64(len(snap)) || p.SetAside != SetAsideDir(root, "r1") {
		t.Fatalf("prepared %+v", p)
	}
	if b, err := os.ReadFile(filepath.Join(SetAsideDir(root, "r1"), "member", "old")); err != nil || string(b) != "acknowledged" {
		t.Fatalf("the earlier data was not set aside intact: %q %v", b, err)
	}

	// etcdutl's output of this restore, then the pod runs again (a retry): the output is
	// replaced, the set-aside data stays.
	if err := os.MkdirAll(filepath.Join(root, DataDirName, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DataDirName, "member", "snap", "db"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Prepare(context.Background(), root, "r1", bytes.NewReader(snap), want)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, DataDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the earlier attempt's output was kept: %v", err)
	}
	if p.SetAside != SetAsideDir(root, "r1") {
		t.Fatalf("a retry lost track of the set-aside data: %+v", p)
	}
	if b, err := os.ReadFile(filepath.Join(SetAsideDir(root, "r1"), "member", "old")); err != nil || string(b) != "acknowledged" {
		t.Fatalf("a retry touched the set-aside data: %q %v", b, err)
	}

	if err := Finish(root, "r1"); err == nil {
		t.Fatal("Finish accepted a volume without a restored database")
	}
	if err := os.MkdirAll(filepath.Join(root, DataDirName, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DataDirName, "member", "snap", "db"), []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Finish(root, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(StagingDir(root, "r1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staging folder stayed: %v", err)
	}
}

func TestPrepareRefusesAnObjectWithAnotherHash(t *testing.T) {
	snap := fakeSnapshot(t, 3)
	root := t.TempDir()
	_, err := Prepare(context.Background(), root, "r2", bytes.NewReader(snap), hex.EncodeToString(make([]byte, 32)))
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("Prepare = %v, want an integrity error", err)
	}
	if _, err := os.Stat(filepath.Join(StagingDir(root, "r2"), SnapshotFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a snapshot that failed its check stayed staged: %v", err)
	}
	snap[100] ^= 0xff // a corrupt object fails etcd's own trailer check
	if _, err := Prepare(context.Background(), root, "r2", bytes.NewReader(snap), ""); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("Prepare of a corrupt snapshot = %v, want an integrity error", err)
	}
}

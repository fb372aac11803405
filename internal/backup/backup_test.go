package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// dial returns an etcd.Client for ep, closed when the test ends.
func dial(t testing.TB, ep string) etcd.Client {
	t.Helper()
	c, err := etcd.Dial(context.Background(), []string{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realSnapshot starts an etcd, writes 300 keys and returns the member's snapshot stream, read
// whole (it is small), and the client URL.
func realSnapshot(t *testing.T, ip string) ([]byte, string) {
	t.Helper()
	ep := etcdproc.Start(t, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, ep)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 300 {
		if _, err := cli.Put(ctx, fmt.Sprintf("key-%03d", i), strings.Repeat(fmt.Sprint(i), 300)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := c.Snapshot(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	data, err := io.ReadAll(snap)
	if err != nil {
		t.Fatal(err)
	}
	return data, ep
}

// withTrailer appends the SHA-256 of body, as etcd does.
func withTrailer(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append(bytes.Clone(body), sum[:]...)
}

func flipped(data []byte, i int) []byte {
	out := bytes.Clone(data)
	out[i] ^= 0x01
	return out
}

// readAll reads r to its end with reads of at most buf bytes, and fails the test when a read
// both delivers bytes and returns an error (the Verifier keeps its verdict for the next read).
func readAll(t *testing.T, r io.Reader, buf int) ([]byte, error) {
	t.Helper()
	var out []byte
	p := make([]byte, buf)
	for {
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if n > 0 && err != nil {
			t.Fatalf("a read returned %d bytes and error %v", n, err)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func TestVerifier(t *testing.T) {
	snap, _ := realSnapshot(t, "127.0.41.10")
	db := len(snap) - sha256.Size
	t.Logf("snapshot of %d bytes", len(snap))
	if len(snap) < 4*4096 {
		t.Fatalf("snapshot of %d bytes: too small to be an etcd database", len(snap))
	}
	type tc struct {
		name string
		data []byte
		ok   bool
	}
	cases := []tc{
		{"a real snapshot", snap, true},
		{"first byte flipped", flipped(snap, 0), false},
		{"bbolt magic flipped", flipped(snap, 16), false},
		{"bbolt page size flipped", flipped(snap, 24), false},
		{"second page flipped", flipped(snap, 4096), false},
		{"middle byte flipped", flipped(snap, len(snap)/2), false},
		{"last database byte flipped", flipped(snap, db-1), false},
		{"first trailer byte flipped", flipped(snap, db), false},
		{"last byte flipped", flipped(snap, len(snap)-1), false},
		{"truncated by 1 byte", snap[:len(snap)-1], false},
		{"truncated by the trailer", snap[:db], false},
		{"one byte appended", append(bytes.Clone(snap), 0), false},
		{"empty", nil, false},
		{"31 bytes", snap[:31], false},
		{"only a trailer: an empty database with its hash", withTrailer(nil), false},
		{"a valid trailer over zeros, not bbolt", withTrailer(make([]byte, 4096)), false},
		{"a valid trailer over a database cut short of a page", withTrailer(snap[:4096+512]), false},
		{"a valid trailer over a size etcdutl would not restore", withTrailer(snap[:db-1]), false},
	}
	sources := map[string]func([]byte) io.Reader{
		"whole":            func(b []byte) io.Reader { return bytes.NewReader(b) },
		"1-byte reads":     func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half reads":       func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data with io.EOF": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
	}
	bufs := []int{1, 33, 32 << 10, len(snap) + 1<<20}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := sha256.Sum256(c.data)
			for name, source := range sources {
				for _, buf := range bufs {
					v := backup.NewVerifier(source(c.data))
					out, err := readAll(t, v, buf)
					if !bytes.Equal(out, c.data) {
						t.Fatalf("%s, %d-byte buffer: %d bytes out of %d in, or different bytes", name, buf, len(out), len(c.data))
					}
					if c.ok && err != nil || !c.ok && !errors.Is(err, backup.ErrIntegrity) {
						t.Fatalf("%s, %d-byte buffer: error %v, want ok=%v", name, buf, err, c.ok)
					}
					if v.Size() != int64(len(c.data)) || v.Sum() != hex.EncodeToString(want[:]) {
						t.Fatalf("%s, %d-byte buffer: size %d sum %s, want %d %x", name, buf, v.Size(), v.Sum(), len(c.data), want)
					}
					// The verdict stays.
					if _, again := v.Read(make([]byte, 8)); again != err && !(err == nil && again == io.EOF) {
						t.Fatalf("%s: a read after the end returned %v, then %v", name, err, again)
					}
				}
			}
			if _, err := io.Copy(io.Discard, backup.NewVerifier(bytes.NewReader(c.data))); err != nil {
				t.Log(err)
			}
		})
	}
}

// TestVerifierFailsOnAnyFlippedByte flips one bit at every 509th byte and at each of the first
// and last 64: the checksum covers the whole database, and the trailer is compared whole.
func TestVerifierFailsOnAnyFlippedByte(t *testing.T) {
	snap, _ := realSnapshot(t, "127.0.41.11")
	var at []int
	for i := range len(snap) {
		if i < 64 || i >= len(snap)-64 || i%509 == 0 {
			at = append(at, i)
		}
	}
	for _, i := range at {
		if _, err := io.Copy(io.Discard, backup.NewVerifier(bytes.NewReader(flipped(snap, i)))); !errors.Is(err, backup.ErrIntegrity) {
			t.Fatalf("byte %d of %d flipped: %v, want %v", i, len(snap), err, backup.ErrIntegrity)
		}
	}
}

func TestVerifierReturnsTheSourcesError(t *testing.T) {
	broken := errors.New("connection reset")
	v := backup.NewVerifier(io.MultiReader(bytes.NewReader(make([]byte, 1000)), iotest.ErrReader(broken)))
	n, err := io.Copy(io.Discard, v)
	if !errors.Is(err, broken) || errors.Is(err, backup.ErrIntegrity) || n != 1000 || v.Size() != 1000 || v.Sum() != "" {
		t.Fatalf("copied %d, error %v, size %d, sum %q; want the source's error after 1000 bytes and no sum", n, err, v.Size(), v.Sum())
	}
}

// TestCopiedSnapshotRestores: what Copy writes is what etcd streamed, trailer included, so
// etcdutl restores it (checking the trailer itself).
func TestCopiedSnapshotRestores(t *testing.T) {
	ep := etcdproc.Start(t, "127.0.41.12")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dial(t, ep)
	if err := c.AdvanceLog(ctx, 10); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "snapshot.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := backup.Copy(ctx, f, snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	stored, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(stored)
	if res.Size != int64(len(stored)) || res.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("result %+v; the file has %d bytes with SHA-256 %x", res, len(stored), sum)
	}
	out, err := exec.CommandContext(ctx, etcdproc.Binary(t, "etcdutl"), "snapshot", "restore", path,
		"--data-dir", filepath.Join(dir, "restored")).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	// etcdutl catches the corruption the Verifier catches.
	if err := os.WriteFile(path, flipped(stored, len(stored)/2), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, etcdproc.Binary(t, "etcdutl"), "snapshot", "restore", path,
		"--data-dir", filepath.Join(dir, "corrupt")).CombinedOutput()
	if err == nil {
		t.Fatalf("etcdutl restored a corrupt snapshot:\n%s", out)
	}
}

func TestCopyStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := backup.Copy(ctx, io.Discard, strings.NewReader("never read"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Copy with an ended context: %v", err)
	}
}

package backup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Layout of a member's volume during a restore, under the volume's root (the chart mounts it
// at /var/lib/etcd and runs etcd with --data-dir=<root>/data).
const (
	// DataDirName is etcd's data directory under the volume's root.
	DataDirName = "data"
	// SnapshotFileName is the fetched snapshot in a restore's staging folder.
	SnapshotFileName = "snapshot.db"
)

// StagingDir is the folder, under the volume's root, where restore id keeps its snapshot.
func StagingDir(root, id string) string { return filepath.Join(root, "restore-"+id) }

// SetAsideDir is where restore id keeps the data the volume held before it.
func SetAsideDir(root, id string) string {
	return filepath.Join(root, DataDirName+".before-restore-"+id)
}

// startedMarker records that restore id has dealt with the volume's earlier data: a data
// directory found after it was written is this restore's own partial output.
func startedMarker(root, id string) string { return filepath.Join(root, "restore-"+id+".started") }

// Prepared is what Prepare did.
type Prepared struct {
	// Snapshot is the path of the verified snapshot, for etcdutl snapshot restore.
	Snapshot string
	// Size and SHA256 describe the snapshot object.
	Size   int64
	SHA256 string
	// SetAside is the folder the volume's earlier data was moved to, empty when it held none.
	SetAside string `json:",omitempty"`
	// Revision is the snapshot's etcd revision, read from it (SnapshotRevision).
	Revision int64 `json:",omitempty"`
}

// Prepare readies the volume at root for restore id (etcdutl snapshot restore into
// root/data, which must not exist):
//
//   - data the volume held before the restore is moved to SetAsideDir, never deleted (after a
//     disaster a surviving member's data holds the writes made after the newest backup);
//   - a data directory left by an earlier attempt of the same restore is deleted;
//   - the snapshot is copied from src into the staging folder through a Verifier, checked
//     against wantSHA256 when given, and synced.
//
// It is idempotent: a crash at any point is repaired by running it again with the same id.
func Prepare(ctx context.Context, root, id string, src io.Reader, wantSHA256 string) (Prepared, error) {
	var p Prepared
	data := filepath.Join(root, DataDirName)
	_, err := os.Stat(data)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return p, fmt.Errorf("failed to inspect the data directory: %w", err)
	case exists(startedMarker(root, id)):
		// This restore's own output from an earlier attempt.
		if err := os.RemoveAll(data); err != nil {
			return p, fmt.Errorf("failed to delete the data of an earlier restore attempt: %w", err)
		}
	default:
		aside := SetAsideDir(root, id)
		if err := os.Rename(data, aside); err != nil {
			return p, fmt.Errorf("failed to set the volume's earlier data aside in %s: %w", aside, err)
		}
		p.SetAside = aside
	}
	if err := writeFileSync(startedMarker(root, id), nil); err != nil {
		return p, fmt.Errorf("failed to record the restore's start: %w", err)
	}
	// The rename and the marker must survive a node crash together.
	if err := syncDir(root); err != nil {
		return p, fmt.Errorf("failed to sync the volume's root: %w", err)
	}
	if p.SetAside == "" && exists(SetAsideDir(root, id)) {
		p.SetAside = SetAsideDir(root, id)
	}
	staging := StagingDir(root, id)
	if err := os.RemoveAll(staging); err != nil {
		return p, fmt.Errorf("failed to clear the staging folder: %w", err)
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return p, fmt.Errorf("failed to create the staging folder: %w", err)
	}
	p.Snapshot = filepath.Join(staging, SnapshotFileName)
	f, err := os.OpenFile(p.Snapshot, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return p, fmt.Errorf("failed to create the snapshot file: %w", err)
	}
	res, err := Copy(ctx, f, src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p.Snapshot)
		return p, err
	}
	p.Size, p.SHA256 = res.Size, res.SHA256
	if wantSHA256 != "" && res.SHA256 != wantSHA256 {
		os.Remove(p.Snapshot)
		return p, fmt.Errorf("%w: the object's sha256 is %s, the backup recorded %s", ErrIntegrity, res.SHA256, wantSHA256)
	}
	if p.Revision, err = SnapshotRevision(p.Snapshot); err != nil {
		os.Remove(p.Snapshot)
		return p, err
	}
	return p, nil
}

// Finish checks that etcdutl left a data directory for restore id and deletes the staging
// folder.
func Finish(root, id string) error {
	if !exists(filepath.Join(root, DataDirName, "member", "snap", "db")) {
		return fmt.Errorf("the restore left no database in %s", filepath.Join(root, DataDirName, "member", "snap"))
	}
	if err := os.RemoveAll(StagingDir(root, id)); err != nil {
		return fmt.Errorf("failed to delete the staging folder: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Environment of `etcd-pilot restore-prepare`: the S3 credentials (from the Secret the spec
// names, as secretKeyRef environment variables, so they never appear in arguments) and the CA
// bundle.
const (
	EnvS3AccessKeyID     = "ETCD_PILOT_S3_ACCESS_KEY_ID"
	EnvS3SecretAccessKey = "ETCD_PILOT_S3_SECRET_ACCESS_KEY"
	EnvS3SessionToken    = "ETCD_PILOT_S3_SESSION_TOKEN"
	EnvS3CABundle        = "ETCD_PILOT_S3_CA_BUNDLE"
)

// PrepareArgs are the arguments of `etcd-pilot restore-prepare`: the controller builds them,
// the command parses them.
type PrepareArgs struct {
	ID, SHA256, Volume, File              string
	S3Endpoint, S3Bucket, S3Key, S3Region string
	// Egress are the flags of the operator's outbound policy (egress.Policy.Args), which the
	// S3 endpoint is held to in the pod as in the operator.
	Egress []string
}

// Flags renders a as command-line flags.
func (a PrepareArgs) Flags() []string {
	out := []string{"--id=" + a.ID}
	add := func(name, v string) {
		if v != "" {
			out = append(out, "--"+name+"="+v)
		}
	}
	add("volume", a.Volume)
	add("sha256", a.SHA256)
	add("file", a.File)
	add("s3-endpoint", a.S3Endpoint)
	add("s3-bucket", a.S3Bucket)
	add("s3-key", a.S3Key)
	add("s3-region", a.S3Region)
	return append(out, a.Egress...)
}

// SnapshotRevision reads the etcd revision of the snapshot file at path: the highest revision
// in its key bucket (etcd keys that bucket by revision, main revision first, big-endian). It
// is exact, unlike the revision a member reported when the snapshot was requested (writes may
// commit in between). 0 when the snapshot holds no revision.
func SnapshotRevision(path string) (int64, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("failed to open the snapshot's database: %w", err)
	}
	defer db.Close()
	var rev int64
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return nil
		}
		k, _ := b.Cursor().Last()
		if len(k) >= 8 {
			rev = int64(binary.BigEndian.Uint64(k[:8]))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("failed to read the snapshot's revision: %w", err)
	}
	return rev, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

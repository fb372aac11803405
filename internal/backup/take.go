package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
)

// Taken is a snapshot stored and verified.
type Taken struct {
	Result
	// Revision, MemberID, Version and StorageVersion are what the member reported when the
	// snapshot began (see etcd.Snapshot).
	Revision       int64
	MemberID       uint64
	Version        string
	StorageVersion string
	// Location names the stored object.
	Location string
}

// deleteTimeout bounds the clean-up of a failed upload.
const deleteTimeout = 30 * time.Second

// Failure classifies why Take failed.
type Failure string

// Failures of Take.
const (
	FailedSnapshot  Failure = "SnapshotFailed"       // the member did not serve the snapshot
	FailedIntegrity Failure = "IntegrityCheckFailed" // the stream was not an intact snapshot
	FailedUpload    Failure = "UploadFailed"         // the store refused or lost the object
)

// Expect is what the member serving a snapshot must show before its stream is read: the
// member ID the source was chosen as (0: any), and the applied index it must have reached
// (the leader's committed index read when the backup started).
type Expect struct {
	MemberID     uint64
	AppliedIndex uint64
}

// Take streams the snapshot of the member serving endpoint through a Verifier into store under
// key. The snapshot is never held whole in memory or on local disk: Put streams it with memory
// bounded by the store's part size. When the stream fails the integrity check, Put sees a read
// error and stores nothing; Take deletes the key after any failure as well, so nothing
// unverified stays under it. A member that answers at endpoint as another member than want
// names (the pod's name now serves a member that replaced it), or has not applied
// want.AppliedIndex (it restarted and replays its log), fails the snapshot before anything is
// stored. It returns the failure's class with the error.
func Take(ctx context.Context, cl etcd.Client, endpoint string, want Expect, store objstore.Store, key string) (Taken, Failure, error) {
	snap, err := cl.Snapshot(ctx, endpoint)
	if err != nil {
		return Taken{}, FailedSnapshot, err
	}
	defer snap.Close()
	switch {
	case want.MemberID != 0 && snap.MemberID != want.MemberID:
		return Taken{}, FailedSnapshot, fmt.Errorf("the member at %s answered as %s, not as member %s the snapshot was to come from",
			endpoint, etcd.FormatID(snap.MemberID), etcd.FormatID(want.MemberID))
	case snap.AppliedIndex < want.AppliedIndex:
		return Taken{}, FailedSnapshot, fmt.Errorf("member %s at %s had applied up to index %d, short of the leader's committed index %d read when the backup started",
			etcd.FormatID(snap.MemberID), endpoint, snap.AppliedIndex, want.AppliedIndex)
	}
	src := &errReader{r: ctxReader{ctx: ctx, r: snap}}
	v := NewVerifier(src)
	n, err := store.Put(ctx, key, v)
	if err == nil && n != v.Size() {
		err = fmt.Errorf("the store kept %d bytes of a %d-byte snapshot", n, v.Size())
	}
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
		defer cancel()
		_ = store.Delete(dctx, key)
		switch {
		case errors.Is(err, ErrIntegrity):
			return Taken{}, FailedIntegrity, err
		case src.err != nil:
			return Taken{}, FailedSnapshot, err
		}
		return Taken{}, FailedUpload, err
	}
	return Taken{Result: Result{Size: n, SHA256: v.Sum()}, Revision: snap.Revision, MemberID: snap.MemberID,
		Version: snap.Version, StorageVersion: snap.StorageVersion, Location: store.Location(key)}, "", nil
}

// errReader remembers the first error its reader returned other than io.EOF: a failure of the
// member's stream rather than of the store.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// Report is a snapshot's outcome as a backup pod reports it in its termination message (JSON,
// well under the 4096 bytes the kubelet keeps), and as the operator records it.
type Report struct {
	Size           int64  `json:"size,omitempty"`
	SHA256         string `json:"sha256,omitempty"`
	Revision       int64  `json:"revision,omitempty"`
	Version        string `json:"version,omitempty"`
	StorageVersion string `json:"storageVersion,omitempty"`
	MemberID       string `json:"memberID,omitempty"`
	Member         string `json:"member,omitempty"`
	Location       string `json:"location,omitempty"`
	// Failure and Error are set when the snapshot failed.
	Failure Failure `json:"failure,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Report is t as a Report, naming the member the snapshot came from.
func (t Taken) Report(member string) Report {
	return Report{Size: t.Size, SHA256: t.SHA256, Revision: t.Revision, Version: t.Version,
		StorageVersion: t.StorageVersion, MemberID: etcd.FormatID(t.MemberID), Member: member, Location: t.Location}
}

// Package objstore is where backups are stored: an S3-compatible bucket (NewS3) or a folder on
// a mounted volume (NewDir), behind one small interface. It knows nothing of Kubernetes or etcd:
// callers decide the keys and what goes in them.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Store holds objects under keys. Keys are relative to the store's own prefix (an S3Config's
// Prefix, a Dir's root): slash-separated, non-empty segments, none "." or "..", no leading or
// trailing slash. Every method is safe for concurrent use.
type Store interface {
	// Put stores everything r yields under key, replacing any object there, and returns the
	// number of bytes stored. r's size need not be known in advance: Put streams it with memory
	// bounded by the store's part size, not by the object's. Put stores all or nothing: when r
	// returns an error or ctx ends first, Put returns an error and leaves key as it was (no new
	// or partial object, no multipart upload left behind).
	Put(ctx context.Context, key string, r io.Reader) (size int64, err error)
	// Open returns the object under key. The caller must close it. A missing key is an error
	// that matches fs.ErrNotExist (errors.Is).
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object whose key starts with prefix (a string prefix, not a folder:
	// "a/b" lists "a/b/c" and "a/bc"; "" lists all), sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes the object under key. A missing key is success.
	Delete(ctx context.Context, key string) error
	// Location names key for people and status messages (s3://bucket/prefix/key,
	// file:///root/key). It does not check that the object exists.
	Location(key string) string
}

// Object is one stored object as List reports it.
type Object struct {
	// Key is relative to the store's prefix, as Put was given it.
	Key          string
	Size         int64
	LastModified time.Time
}

var (
	// ErrBucketNotFound is matched (errors.Is) by the error of any S3 call made against a
	// bucket that does not exist: a configuration problem, not a transient one.
	ErrBucketNotFound = errors.New("bucket does not exist")
	// ErrAccessDenied is matched (errors.Is) by the error of any S3 call the server refused
	// because of the credentials (unknown access key, wrong secret, expired session token) or
	// their permissions: a configuration problem, not a transient one.
	ErrAccessDenied = errors.New("access denied")
)

// tmpPrefix starts the name of a Dir's files that are still being written. No key segment may
// start with it, so a partial file never shows under a key or in List.
const tmpPrefix = ".objstore-tmp-"

// validateKey checks key against the rules in Store's comment.
func validateKey(key string) error {
	if key == "" {
		return errors.New("invalid key: empty")
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("invalid key %q: empty segment (leading, trailing or doubled slash)", key)
		case seg == "." || seg == "..":
			return fmt.Errorf("invalid key %q: %q segment", key, seg)
		case strings.HasPrefix(seg, tmpPrefix):
			return fmt.Errorf("invalid key %q: segments starting with %q are reserved", key, tmpPrefix)
		case strings.ContainsRune(seg, 0):
			return fmt.Errorf("invalid key %q: NUL byte", key)
		}
	}
	return nil
}

// validatePrefix checks a List prefix: a key's beginning, so its folders (the part before the
// last slash) follow the key rules and it does not start with a slash.
func validatePrefix(prefix string) error {
	i := strings.LastIndex(prefix, "/")
	if i < 0 {
		return nil
	}
	if err := validateKey(prefix[:i]); err != nil {
		return fmt.Errorf("invalid prefix %q: %w", prefix, err)
	}
	return nil
}

// ctxReader fails its reads once ctx has ended, so an upload from a reader that never blocks
// stops at the next read instead of at the next network call.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

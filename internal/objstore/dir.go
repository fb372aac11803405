package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// dirStore is a Store over a folder: key "a/b" is the file <root>/a/b.
type dirStore struct {
	root string
}

// NewDir returns a Store over the folder root (a mounted volume claim, say). The folder must
// exist when the store is used; subfolders are created as keys need them. Only this store
// should write under root: List reports every regular file there.
func NewDir(root string) Store {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	return &dirStore{root: filepath.Clean(root)}
}

func (d *dirStore) path(key string) string {
	return filepath.Join(d.root, filepath.FromSlash(key))
}

// Location implements Store: file://<root>/<key>. A caller that knows the volume behind root
// names it itself.
func (d *dirStore) Location(key string) string {
	return "file://" + filepath.ToSlash(d.path(key))
}

// Put implements Store. It writes a hidden temporary file beside the key's, syncs it, renames
// it over the key's and syncs the folder, so the key shows either its old content or all of the
// new, even across a crash. (Should syncing the folder fail after the rename, Put reports the
// error with the new object already in place: its durability, not its content, is in doubt.)
func (d *dirStore) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := validateKey(key); err != nil {
		return 0, fmt.Errorf("failed to put %s: %w", d.Location(key), err)
	}
	size, err := d.put(ctx, key, r)
	if err != nil {
		return 0, fmt.Errorf("failed to put %s: %w", d.Location(key), err)
	}
	return size, nil
}

func (d *dirStore) put(ctx context.Context, key string, r io.Reader) (size int64, err error) {
	if _, err := os.Stat(d.root); err != nil {
		return 0, err // do not create a missing root: it should be the mounted volume
	}
	dst := d.path(key)
	dir := filepath.Dir(dst)
	created, err := d.mkdirs(dir)
	if err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if size, err = io.Copy(f, ctxReader{ctx, r}); err != nil {
		return 0, err
	}
	if err = f.Sync(); err != nil {
		return 0, err
	}
	if err = f.Close(); err != nil {
		return 0, err
	}
	if err = ctx.Err(); err != nil {
		return 0, err
	}
	if err = os.Rename(f.Name(), dst); err != nil {
		return 0, err
	}
	// The rename is durable once the folder is; a folder created for this key is durable once
	// its parent is.
	for _, p := range append([]string{dir}, created...) {
		if err := syncDir(p); err != nil {
			return size, err // the object is in place; only its durability is in doubt
		}
	}
	return size, nil
}

// mkdirs creates dir and its missing parents below root, and returns the parents of the
// folders it created (whose entries must be synced), deepest first.
func (d *dirStore) mkdirs(dir string) ([]string, error) {
	var missing []string
	for p := dir; p != d.root; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, p)
	}
	var parents []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		parents = append([]string{filepath.Dir(missing[i])}, parents...)
	}
	return parents, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Open implements Store.
func (d *dirStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", d.Location(key), err)
	}
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", d.Location(key), err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file: %w", fs.ErrNotExist)
		}
		return nil, fmt.Errorf("failed to open %s: %w", d.Location(key), err)
	}
	return f, nil
}

// List implements Store. It walks only the folder the prefix's slashes name, and skips files
// still being written.
func (d *dirStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("failed to list %s*: %w", d.Location(prefix), err)
	}
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = d.path(prefix[:i])
	}
	var out []Object
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) && start != d.root {
				return fs.SkipAll // nothing stored under that folder yet
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) || !e.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since the folder was read
		} else if err != nil {
			return err
		}
		out = append(out, Object{Key: key, Size: info.Size(), LastModified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to list %s*: %w", d.Location(prefix), err)
	}
	// WalkDir visits in lexical order per folder, which is not key order ("a/b" < "a-b" as
	// files, "a-b" < "a/b" as keys).
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store. It leaves the key's folders in place, even when empty: removing them
// could race with a Put creating a file there.
func (d *dirStore) Delete(_ context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("failed to delete %s: %w", d.Location(key), err)
	}
	p := d.path(key)
	if st, err := os.Lstat(p); err == nil && st.IsDir() {
		return fmt.Errorf("failed to delete %s: a folder, not an object", d.Location(key))
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to delete %s: %w", d.Location(key), err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to delete %s: %w", d.Location(key), err)
	}
	return nil
}

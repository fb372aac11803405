package objstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDir(t *testing.T) {
	testStore(t, func(t *testing.T) harness {
		root := t.TempDir()
		return harness{
			store: NewDir(root),
			leftovers: func(t *testing.T, _ string) []string {
				var found []string
				err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
					if err == nil && strings.HasPrefix(e.Name(), tmpPrefix) {
						found = append(found, p)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return found
			},
		}
	})
}

func TestDirLayoutAndLocation(t *testing.T) {
	root := t.TempDir()
	s := NewDir(root)
	if _, err := s.Put(t.Context(), "prod/etcd/snap-1.db", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "prod", "etcd", "snap-1.db")); err != nil || string(data) != "x" {
		t.Errorf("the key's file: %q, %v", data, err)
	}
	if got, want := s.Location("prod/etcd/snap-1.db"), "file://"+filepath.ToSlash(root)+"/prod/etcd/snap-1.db"; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}

	// A relative root is made absolute, so Location stays a usable URL.
	t.Chdir(root)
	if got, want := NewDir("sub").Location("k"), "file://"+filepath.ToSlash(root)+"/sub/k"; got != want {
		t.Errorf("Location with a relative root = %q, want %q", got, want)
	}
}

func TestDirListSkipsPartialFiles(t *testing.T) {
	root := t.TempDir()
	s := NewDir(root)
	if _, err := s.Put(t.Context(), "a/done", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	// What a crash in the middle of a Put leaves.
	if err := os.WriteFile(filepath.Join(root, "a", tmpPrefix+"123"), []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != "a/done" {
		t.Errorf("List = %+v, want only a/done", objs)
	}
}

func TestDirMissingRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "not-mounted")
	s := NewDir(root)
	if _, err := s.Put(t.Context(), "a/b", strings.NewReader("x")); err == nil {
		t.Error("Put into a missing root succeeded; it must not create the volume's mount point")
	} else if !strings.HasPrefix(err.Error(), "failed to put file://") {
		t.Errorf("Put's error = %q, want failed to put <location>: ...", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Put created the missing root: %v", err)
	}
	if _, err := s.List(t.Context(), ""); err == nil {
		t.Error("List of a missing root succeeded")
	}
}

func TestDirDeleteOfAFolder(t *testing.T) {
	s := NewDir(t.TempDir())
	if _, err := s.Put(t.Context(), "a/b", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "a"); err == nil {
		t.Error("Delete of a folder succeeded")
	}
	if _, err := s.Open(t.Context(), "a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a folder: %v, want fs.ErrNotExist", err)
	}
}

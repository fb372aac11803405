package testutil

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Module is this repository's module path.
const Module = "github.com/etcd-pilot/etcd-pilot"

// RepoRoot walks up from the working folder (the package under test) to this module's
// go.mod: the repository's root.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && modulePath(data) == Module {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("failed to find the repository root (the go.mod of %s) above %s", Module, dir)
		}
	}
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader at once (a process's output
// copied by exec's goroutines while a test reads it).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

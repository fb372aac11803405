package node

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomicSwitchesEveryFileAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeAtomic(dir, map[string]file{"tls.crt": {data: []byte("c1"), mode: 0o440}, "tls.key": {data: []byte("k1"), mode: 0o440}, "old": {data: []byte("x"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	// A reader holding the folder (a bind mount) sees the new content through the same path.
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, map[string]file{"tls.crt": {data: []byte("c2"), mode: 0o440}, "tls.key": {data: []byte("k2"), mode: 0o440}}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(dir)
	if !os.SameFile(before, after) {
		t.Fatal("the folder was replaced: a bind mount of it would keep the old content")
	}
	for name, want := range map[string]string{"tls.crt": "c2", "tls.key": "k2"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q %v, want %q", name, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "old")); !os.IsNotExist(err) {
		t.Fatalf("a key that is gone still has a file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	gens := 0
	for _, e := range entries {
		if e.IsDir() {
			gens++
		}
	}
	if gens != 1 {
		t.Fatalf("%d generations kept, want 1: %v", gens, entries)
	}
	if hashFiles(map[string]file{"a": {data: []byte("1")}}) == hashFiles(map[string]file{"a": {data: []byte("2")}}) {
		t.Fatal("hash ignores content")
	}
}

package repo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "module "+ModulePath+"\n\ngo 1.26\n")
	// A nested tools module must not be taken for the root.
	tools := filepath.Join(root, "hack", "tools", "kube")
	write(filepath.Join(tools, "go.mod"), "module "+ModulePath+"/hack/tools/kube\n")

	for _, start := range []string{root, tools, filepath.Join(root, "internal")} {
		got, err := FindRoot("", start)
		if err != nil || got != root {
			t.Errorf("FindRoot(%s) = %q, %v; want %q", start, got, err, root)
		}
	}
	_, err := FindRoot(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "run etcd-pilot from a clone") {
		t.Fatalf("outside a clone: %v", err)
	}
}

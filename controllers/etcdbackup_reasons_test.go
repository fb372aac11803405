package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
)

// TestFailureReason: each class of backup.Failure (every constant of that type in
// internal/backup, read from its source so a new class cannot be missed) has a reason of the
// API's with the same name, and a class that no pod of this version reports falls back to
// SnapshotFailed.
func TestFailureReason(t *testing.T) {
	want := map[backup.Failure]string{
		backup.FailedSnapshot:  v1alpha1.ReasonSnapshotFailed,
		backup.FailedIntegrity: v1alpha1.ReasonIntegrityCheckFailed,
		backup.FailedUpload:    v1alpha1.ReasonUploadFailed,
		"":                     v1alpha1.ReasonSnapshotFailed,
		"DiskFull":             v1alpha1.ReasonSnapshotFailed,
	}
	for f, reason := range want {
		if got := failureReason(f); got != reason {
			t.Errorf("failureReason(%q) = %q, want %q", f, got, reason)
		}
	}

	classes := failureClasses(t)
	if len(classes) < 3 {
		t.Fatalf("found only %d backup.Failure constants in internal/backup: %v", len(classes), classes)
	}
	for name, value := range classes {
		if got := failureReason(backup.Failure(value)); got != value {
			t.Errorf("backup.%s (%q) maps to the reason %q: give it a v1alpha1.Reason* of the same name and map it in failureReason", name, value, got)
		}
	}
}

// failureClasses returns the constants of type Failure declared in internal/backup, by name.
func failureClasses(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join("..", "internal", "backup", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != len(vs.Values) {
				return true
			}
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Failure" {
				return true
			}
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
			return true
		})
	}
	return out
}

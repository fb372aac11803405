package main

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestThePackageGraphIsTheHouse holds the package graph to STYLE.md's house: the planners are
// pure (no etcd client, no Kubernetes client, no Helm, through any import), nothing below the
// controllers imports them, and only the charts package imports Helm.
func TestThePackageGraphIsTheHouse(t *testing.T) {
	const module = "github.com/etcd-pilot/etcd-pilot"
	deps := goList(t, "-deps", "-f", "{{.ImportPath}}", module+"/internal/plan/...")
	for _, p := range deps {
		for _, banned := range []string{"go.etcd.io/etcd/client/v3", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "helm.sh/helm"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("the planners (internal/plan/...) link %s: a planner takes a projection of the observation, never a client", p)
			}
		}
	}
	// The command layer builds the manager from the controllers; everything else in internal/
	// is below them.
	commandLayer := map[string]bool{module + "/internal/cli": true, module + "/internal/manager": true}
	for _, line := range goList(t, "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", "./...") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Split(imports, ",") {
			switch {
			case imp == module+"/controllers" && strings.HasPrefix(pkg, module+"/internal/") && !commandLayer[pkg]:
				t.Errorf("%s imports controllers: the arrows run from the controllers down, never back up", pkg)
			case strings.HasPrefix(imp, "helm.sh/") && pkg != module+"/charts":
				t.Errorf("%s imports %s: only the charts package imports Helm", pkg, imp)
			case imp == "go.etcd.io/etcd/client/v3" && pkg == module+"/controllers":
				t.Errorf("controllers imports clientv3: etcd is reached through internal/etcd")
			}
		}
	}
}

// goList runs go list with args from the module root and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the packages: %v", err)
	}
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

// TestOnlyTheExecutorWrites: in controllers/, only the reconcile skeleton writes (the
// finalizer, the status, the apply and prune of the rendered objects, the deletion of a
// deleted cluster's objects); every step's write (pods, claims, restore and backup pods,
// certificates, the intent, the records, every etcd call that changes something) goes through
// internal/execute. A call of a writing method anywhere else in controllers/ fails here.
func TestOnlyTheExecutorWrites(t *testing.T) {
	writes := map[string]bool{
		// Kubernetes
		"Create": true, "Update": true, "Patch": true, "Delete": true, "DeleteAllOf": true, "Apply": true, "Prune": true,
		// etcd (internal/etcd.Client)
		"AddLearner": true, "UpdatePeerURLs": true, "Promote": true, "Remove": true, "MoveLeader": true, "AdvanceLog": true,
		"Defragment": true, "DisarmAlarm": true, "Compact": true, "EnsureRootUser": true, "SetAuth": true,
	}
	allowed := map[string]map[string]bool{
		"EtcdClusterReconciler.Reconcile":       {"Patch": true},                                      // the finalizer
		"EtcdClusterReconciler.patchStatus":     {"Patch": true},                                      // the status
		"EtcdClusterReconciler.applyAndPrune":   {"Patch": true, "Apply": true, "Prune": true},        // the render's objects, and the prune record in status
		"EtcdClusterReconciler.reconcileDelete": {"Delete": true, "DeleteAllOf": true, "Patch": true}, // a deleted cluster's objects, then the finalizer
		"EtcdBackupReconciler.Reconcile":        {"Patch": true},                                      // the status
		"EtcdBackupReconciler.take":             {"Patch": true},                                      // the status, before the snapshot
	}
	fset, files := parseSources(t, "controllers/*.go")
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			where := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				typ := fn.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					where = id.Name + "." + where
				}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !writes[sel.Sel.Name] {
					return true
				}
				// A call on the executor is the executor's.
				if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "exec" {
					return true
				}
				if !allowed[where][sel.Sel.Name] {
					t.Errorf("%s: %s calls %s outside the executor (internal/execute)", fset.Position(call.Pos()), where, sel.Sel.Name)
				}
				return true
			})
		}
	}
}

// TestTheValuesReadNoStatus holds the spec-to-values path to STYLE.md's memory row: the
// values computation takes what earlier passes recorded (internal/memory) as a parameter and
// never reads an object's status, so a render depends on the spec and on one memory loaded
// once per pass, nothing else.
func TestTheValuesReadNoStatus(t *testing.T) {
	fset, files := parseSources(t, "internal/values/*.go")
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Status" {
				t.Errorf("%s: internal/values reads a status; take it from memory.Memory instead", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}

// TestPlannersTakeNoCallbacks: a planner's input holds values, not functions that the
// planner calls back into (a callback can hide I/O inside a pure decision, as the certificates
// planner's handshake once did). The allowed ones are pure: a pod's peer URL from the
// rendered template, and the gate's own invariant table.
func TestPlannersTakeNoCallbacks(t *testing.T) {
	allowed := map[string]bool{"PeerURL": true, "Check": true}
	fset, files := parseSources(t, "internal/plan/*.go", "internal/plan/*/*.go")
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fld := range st.Fields.List {
				if _, isFunc := fld.Type.(*ast.FuncType); !isFunc {
					continue
				}
				for _, id := range fld.Names {
					if id.IsExported() && !allowed[id.Name] {
						t.Errorf("%s: field %s of a planner's input is a function: pass what it would compute as a value the observer reads", fset.Position(id.Pos()), id.Name)
					}
				}
			}
			return true
		})
	}
}

// parseSources parses the non-test Go files the glob patterns match.
func parseSources(t *testing.T, patterns ...string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var out []*ast.File
	for _, pattern := range patterns {
		names, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no Go file matches %v", patterns)
	}
	return fset, out
}

package plan_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestEveryPlannerReasonDeclaresItsEffect: each reason a planner or the gate gives (any
// v1alpha1.Reason* named in internal/plan) says once, in v1alpha1.ReasonEffects, whether it
// waits, progresses or degrades.
func TestEveryPlannerReasonDeclaresItsEffect(t *testing.T) {
	values := map[string]string{}
	fset := token.NewFileSet()
	apiFiles, err := filepath.Glob(filepath.Join("..", "..", "api", "v1alpha1", "*_types.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(apiFiles, filepath.Join("..", "..", "api", "v1alpha1", "conditions.go")) {
		api, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(api, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && len(vs.Values) == 1 {
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					values[vs.Names[0].Name], _ = strconv.Unquote(lit.Value)
				}
			}
			return true
		})
	}
	used := map[string]bool{}
	err = filepath.Walk(".", func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if se, ok := n.(*ast.SelectorExpr); ok && strings.HasPrefix(se.Sel.Name, "Reason") {
				if x, ok := se.X.(*ast.Ident); ok && x.Name == "v1alpha1" {
					used[se.Sel.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 20 {
		t.Fatalf("found only %d reasons in the planners: %v", len(used), used)
	}
	for name := range used {
		if name == "ReasonReconciled" {
			continue // None: nothing to do
		}
		switch v1alpha1.ReasonEffects[values[name]] {
		case v1alpha1.EffectWaits, v1alpha1.EffectProgresses, v1alpha1.EffectDegrades:
		default:
			t.Errorf("v1alpha1.%s (%q) declares no effect in ReasonEffects", name, values[name])
		}
	}
}

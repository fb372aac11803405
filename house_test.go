package main

import (
	"errors"
	"os/exec"
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

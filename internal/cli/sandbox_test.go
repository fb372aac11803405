package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// This test binary, started as `render-sandbox`, is the operator's binary: Run dispatches.
func init() {
	if len(os.Args) > 1 && os.Args[1] == charts.SandboxArg {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// TestRenderSandboxIsASubcommand: the operator renders a tenant's chart by starting its own
// binary as `render-sandbox`, which Run serves (without listing it in the usage).
func TestRenderSandboxIsASubcommand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sb := charts.NewSandbox(charts.Budget{Command: []string{exe, charts.SandboxArg}})
	r, err := sb.FromArchive(testutil.PackageChart(t, filepath.Join("..", "..", "charts", charts.ChartDir), "etcd-cluster", nil))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Render(charts.Release{Name: "etcd", Namespace: "ns"}, map[string]any{})
	if err != nil || len(objs) == 0 {
		t.Fatalf("rendered %d objects: %v", len(objs), err)
	}
	if out, _, _ := run(t, "", "help"); strings.Contains(out, charts.SandboxArg) {
		t.Fatalf("the usage lists %s:\n%s", charts.SandboxArg, out)
	}
}

package charts_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/sandboxcmd"
)

// The templates a hostile tenant's chart adds: a string of 400 MB, loops of 10^9 steps, and
// a ConfigMap of 2 MiB.
const (
	repeatTemplate = `{{ repeat 400000000 "a" }}`
	untilTemplate  = testutil.EndlessLoopTemplate
	bulkyTemplate  = `apiVersion: v1
kind: ConfigMap
metadata:
  name: bulky
data:
  a: {{ repeat 2097152 "a" | quote }}
`
)

// testSandbox is a Sandbox with b's limits (of this test binary unless b names a command),
// recording its runs.
func testSandbox(t testing.TB, b charts.Budget) (*charts.Sandbox, func() []charts.SandboxRun) {
	t.Helper()
	var mu sync.Mutex
	var runs []charts.SandboxRun
	if b.Command == nil {
		b.Command = sandboxcmd.MustCommand(t)
	}
	b.Observe = func(r charts.SandboxRun) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
	return charts.NewSandbox(b), func() []charts.SandboxRun {
		mu.Lock()
		defer mu.Unlock()
		return append([]charts.SandboxRun(nil), runs...)
	}
}

// packaged is the embedded chart's folder packed, with extra templates.
func packaged(t testing.TB, extra map[string]string) []byte {
	files := map[string][]byte{}
	for k, v := range extra {
		files[k] = []byte(v)
	}
	return testutil.PackageChart(t, charts.ChartDir, "etcd-cluster", files)
}

func budgetLimit(err error) string {
	var be *charts.BudgetError
	if errors.As(err, &be) {
		return be.Limit
	}
	return ""
}

// TestSandboxRendersWhatTheProcessRenders: a well-behaved chart from outside the binary
// renders in the sandbox exactly what it renders in process, with the same capabilities, and
// a second render of the same values is served from the cache without a sandbox.
func TestSandboxRendersWhatTheProcessRenders(t *testing.T) {
	archive := packaged(t, nil)
	sb, runs := testSandbox(t, charts.Budget{})
	caps := charts.Capabilities{KubeVersion: "v1.31.2", APIVersions: []string{"apps/v1", "apps/v1/StatefulSet"}}
	boxed, err := sb.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if boxed, err = boxed.WithCapabilities(caps); err != nil {
		t.Fatal(err)
	}
	local, err := charts.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if local, err = local.WithCapabilities(caps); err != nil {
		t.Fatal(err)
	}
	if n, v := boxed.Chart(); n != "etcd-cluster" || v == "" {
		t.Fatalf("sandboxed chart is %q %q", n, v)
	}
	vals := local.DefaultValues()
	rel := charts.Release{Name: "etcd", Namespace: "ns"}
	got, err := boxed.Render(rel, vals)
	if err != nil {
		t.Fatal(err)
	}
	want, err := local.Render(rel, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("the sandbox rendered %d objects unlike the %d rendered in process", len(got), len(want))
	}
	if _, err := boxed.Render(rel, vals); err != nil {
		t.Fatal(err)
	}
	if r := runs(); len(r) != 2 || r[0].Op != "load" || r[1].Op != "render" || r[1].Exceeded != "" {
		t.Fatalf("sandbox runs %+v, want a load and one render (the second render is cached)", r)
	}
	// What the chart refuses is said as in process.
	_, err = boxed.Render(rel, map[string]any{"replicas": "three"})
	_, lerr := local.Render(rel, map[string]any{"replicas": "three"})
	if err == nil || lerr == nil || err.Error() != lerr.Error() {
		t.Fatalf("invalid values: sandbox %v, in process %v", err, lerr)
	}
	if _, err := sb.FromArchive([]byte("not a chart")); err == nil || !strings.Contains(err.Error(), "failed to load the chart archive") {
		t.Fatalf("an archive that is not a chart: %v", err)
	}
}

// maxRSS is this process's peak resident memory, in bytes.
func maxRSS(t testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss << 10
}

// TestSandboxRefusesARenderThatTakesMemory: `repeat 400000000` (446 MB when it rendered in
// the operator, above its 256 MiB limit) runs out of the sandbox's memory; the sandbox dies,
// not this process, whose peak memory does not grow by the render; a second try of the same
// values does not start a sandbox.
func TestSandboxRefusesARenderThatTakesMemory(t *testing.T) {
	sb, runs := testSandbox(t, charts.Budget{})
	r, err := sb.FromArchive(packaged(t, map[string]string{"templates/hostile.yaml": repeatTemplate}))
	if err != nil {
		t.Fatal(err)
	}
	before := maxRSS(t)
	rel := charts.Release{Name: "etcd", Namespace: "ns"}
	_, err = r.Render(rel, map[string]any{})
	if budgetLimit(err) != charts.LimitMemory || !strings.Contains(err.Error(), "--chart-render-memory") {
		t.Fatalf("got %v, want the memory limit exceeded", err)
	}
	after := maxRSS(t)
	t.Logf("this process's peak RSS %d MiB before, %d MiB after; the sandbox's %d MiB", before>>20, after>>20, runs()[1].MaxRSS>>20)
	// Growth, not a level: earlier tests of this binary (with the race detector's shadow
	// memory) can have taken its peak anywhere already.
	if grew := after - before; grew > 32<<20 {
		t.Fatalf("this process's peak RSS grew by %d MiB: the render ran here", grew>>20)
	}
	// Linux starts a child's peak RSS at its parent's when it forks (exec keeps it), so the
	// sandbox's reads at least this process's peak at the fork: bounded by the budget, or by
	// that, whichever is higher. The render alone would take 400 MB.
	if child := runs()[1].MaxRSS; child == 0 || child > max(before, 200<<20) {
		t.Fatalf("the sandbox's peak RSS is %d MiB (this process's %d MiB), want it bounded by the budget", child>>20, before>>20)
	}
	if _, err := r.Render(rel, map[string]any{}); budgetLimit(err) != charts.LimitMemory || len(runs()) != 2 {
		t.Fatalf("second try: %v after %d sandbox runs, want the kept error and no new run", err, len(runs()))
	}
}

// TestSandboxStopsAnEndlessLoop: nested `until` loops are stopped at the time limit.
func TestSandboxStopsAnEndlessLoop(t *testing.T) {
	sb, _ := testSandbox(t, charts.Budget{Time: 2 * time.Second})
	r, err := sb.FromArchive(packaged(t, map[string]string{"templates/hostile.yaml": untilTemplate}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = r.Render(charts.Release{Name: "etcd", Namespace: "ns"}, map[string]any{})
	if took := time.Since(start); budgetLimit(err) != charts.LimitTime || took > 5*time.Second {
		t.Fatalf("got %v after %s, want the time limit exceeded within 2s", err, took)
	}
}

// TestSandboxRefusesALargeRender: rendered objects above the output limit are refused; the
// operator reads no more of them than the limit.
func TestSandboxRefusesALargeRender(t *testing.T) {
	// Memory enough to render it: the output's limit is what it exceeds.
	sb, _ := testSandbox(t, charts.Budget{Output: 1 << 20, Memory: 192 << 20})
	r, err := sb.FromArchive(packaged(t, map[string]string{"templates/bulky.yaml": bulkyTemplate}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Render(charts.Release{Name: "etcd", Namespace: "ns"}, map[string]any{})
	if budgetLimit(err) != charts.LimitOutput {
		t.Fatalf("got %v, want the output limit exceeded", err)
	}
}

// tarGz packs files (path -> size of zeros) as a gzipped tar, with declared sizes that may lie.
func tarGz(t testing.TB, files []tarFile) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: f.size}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, f.size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type tarFile struct {
	name string
	size int64
}

func TestCheckArchive(t *testing.T) {
	many := make([]tarFile, 0, 1001)
	for i := range 1001 {
		many = append(many, tarFile{fmt.Sprintf("c/templates/%d.yaml", i), 1})
	}
	bomb := tarGz(t, []tarFile{{"c/Chart.yaml", 10}, {"c/templates/zeros.yaml", 64 << 20}})
	for _, tc := range []struct {
		name    string
		archive []byte
		budget  charts.Budget
		limit   string
	}{
		{"the embedded chart", packaged(t, nil), charts.Budget{}, ""},
		{"not gzip: the loader says so", []byte("not a chart"), charts.Budget{}, ""},
		{"larger than the archive limit", packaged(t, nil), charts.Budget{Archive: 1 << 10}, charts.LimitArchive},
		{"64 MiB of zeros in 64 KiB", bomb, charts.Budget{}, charts.LimitUnpacked},
		{"the same under a larger limit", bomb, charts.Budget{Unpacked: 65 << 20}, ""},
		{"1001 files", tarGz(t, many), charts.Budget{}, charts.LimitFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := charts.CheckArchive(tc.archive, tc.budget)
			if budgetLimit(err) != tc.limit || (tc.limit == "" && err != nil) {
				t.Fatalf("got %v, want limit %q", err, tc.limit)
			}
		})
	}
	// The loader in the operator's process is held to the same sizes.
	if _, err := charts.FromArchive(bomb); budgetLimit(err) != charts.LimitUnpacked {
		t.Fatalf("FromArchive of a bomb: %v", err)
	}
}

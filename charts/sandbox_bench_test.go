package charts_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

// BenchmarkRenderCustomChart renders a chart from outside the binary (the embedded chart,
// packed) on a cache miss, in this process (what the operator did before the budget) and in
// a sandbox (a child process with the budget's limits: a process start, the chart loaded and
// rendered there, the objects decoded here). It reports the sandbox's peak resident memory.
// ETCD_PILOT_BINARY names an etcd-pilot binary to run as the sandbox instead of this test
// binary (go build -o bin/etcd-pilot .).
func BenchmarkRenderCustomChart(b *testing.B) {
	archive := packaged(b, nil)
	local, err := charts.FromArchive(archive)
	if err != nil {
		b.Fatal(err)
	}
	vals := local.DefaultValues()
	b.Run("in-process", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := local.Render(coldRelease(), vals); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		budget := charts.Budget{}
		if exe := os.Getenv("ETCD_PILOT_BINARY"); exe != "" {
			budget.Command = []string{exe, charts.SandboxArg}
		}
		sb, runs := testSandbox(b, budget)
		r, err := sb.FromArchive(archive)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Render(coldRelease(), vals); err != nil {
				b.Fatal(err)
			}
		}
		var peak int64
		for _, r := range runs() {
			peak = max(peak, r.MaxRSS)
		}
		b.ReportMetric(float64(peak)/(1<<20), "sandbox-peak-MiB")
	})
}

var releases atomic.Int64

// coldRelease is a release no render has seen: a miss of every cache.
func coldRelease() charts.Release {
	return charts.Release{Name: fmt.Sprintf("cold-%d", releases.Add(1)), Namespace: "ns"}
}

package promrules

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// repo is the repository's root, from this package's directory.
const repo = "../.."

// knownExternal are the metrics of others that the rules and dashboards may name: etcd's
// (3.5 to 3.7, served on the members' metrics port) and controller-runtime's (v0.25, served
// on the operator's metrics endpoint next to etcd-pilot's). A histogram is named by its
// series (_bucket, _sum, _count).
var knownExternal = map[string]bool{
	"etcd_server_has_leader":                           true,
	"etcd_server_leader_changes_seen_total":            true,
	"etcd_disk_wal_fsync_duration_seconds_bucket":      true,
	"etcd_disk_backend_commit_duration_seconds_bucket": true,
	"controller_runtime_reconcile_time_seconds_bucket": true,
	"controller_runtime_reconcile_total":               true,
	"controller_runtime_reconcile_errors_total":        true,
}

var operatorMetric = regexp.MustCompile(`"(etcdpilot_[a-z0-9_]+)"`)

// operatorMetrics reads the metric names the operator registers from internal/metrics/metrics.go,
// whose names are string literals by its own rule (a name built at run time would be missed:
// the queries naming it would fail here, which is the safe side).
func operatorMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(repo + "/internal/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range operatorMetric.FindAllSubmatch(src, -1) {
		out[string(m[1])] = true
	}
	if len(out) < 10 {
		t.Fatalf("found only %d etcdpilot_ metric names in internal/metrics/metrics.go: %v", len(out), out)
	}
	return out
}

// metricNames are the metric names expr selects.
func metricNames(expr parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			seen[name] = true
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// checkNames fails for every metric expr names that neither the operator nor knownExternal
// has.
func checkNames(t *testing.T, where string, expr parser.Expr, ours map[string]bool) {
	t.Helper()
	for _, n := range metricNames(expr) {
		if !ours[n] && !knownExternal[n] {
			t.Errorf("%s: metric %q is neither registered in internal/metrics/metrics.go nor a known etcd or controller-runtime metric", where, n)
		}
	}
}

// newParser is the PromQL parser of a Prometheus server with default flags.
func newParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// TestMetricNames: the names of plain and __name__ selectors are found, and an unknown one is
// neither the operator's nor a known external metric.
func TestMetricNames(t *testing.T) {
	expr, err := newParser().ParseExpr(`sum(rate(etcdpilot_steps_total[5m])) / on () group_left {__name__="etcd_server_has_leader"} + nope_total`)
	if err != nil {
		t.Fatal(err)
	}
	got := metricNames(expr)
	if want := []string{"etcd_server_has_leader", "etcdpilot_steps_total", "nope_total"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("names %v, want %v", got, want)
	}
	ours := operatorMetrics(t)
	if !ours["etcdpilot_steps_total"] || !ours["etcdpilot_cluster_condition"] || ours["nope_total"] || knownExternal["nope_total"] {
		t.Fatalf("operator metrics %v", ours)
	}
}

package manager

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// DefaultStuckPassAfter is how long a pass of the EtcdCluster controller may run before the
// operator's liveness fails. A pass waits for at most a few etcd calls (--etcd-timeout each),
// a chart render (--chart-render-timeout, after the renders queued before it) and a chart
// pull (a minute per request to the registry): minutes at worst, never a quarter of an hour.
const DefaultStuckPassAfter = 15 * time.Minute

// longestRunningProcessor is the workqueue gauge controller-runtime keeps for every
// controller: the seconds the oldest item taken from its queue and not done yet has been
// processed, that is how long its oldest pass in flight has run (updated every half second).
const longestRunningProcessor = "workqueue_longest_running_processor_seconds"

// stuckPasses is a liveness check that fails while a controller has had a pass in flight for
// longer than its bound (bounds by controller name; a controller not named there is not
// watched). A worker that never returns (a wedged call, a loop that does not end) holds a
// slot of MaxConcurrentReconciles for good, and with all of them the operator stops while
// its /healthz stays green; failing it lets the kubelet restart the operator.
func stuckPasses(g prometheus.Gatherer, bounds map[string]time.Duration) healthz.Checker {
	return func(*http.Request) error {
		// A gatherer that fails says nothing about the workers: partial families are read,
		// and none read is no evidence of a stuck pass.
		fams, _ := g.Gather()
		return stuck(longestPasses(fams), bounds)
	}
}

// longestPasses reads each controller's longest pass in flight from the workqueue gauges.
func longestPasses(fams []*dto.MetricFamily) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, f := range fams {
		if f.GetName() != longestRunningProcessor {
			continue
		}
		for _, m := range f.GetMetric() {
			name := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" {
					name = l.GetValue()
				}
			}
			if name == "" || m.GetGauge() == nil {
				continue
			}
			d := time.Duration(m.GetGauge().GetValue() * float64(time.Second))
			if d > out[name] {
				out[name] = d
			}
		}
	}
	return out
}

// stuck is an error naming every controller whose longest pass in flight ran past its bound.
func stuck(longest, bounds map[string]time.Duration) error {
	var over []string
	for name, d := range longest {
		if b, ok := bounds[name]; ok && b > 0 && d > b {
			over = append(over, fmt.Sprintf("the %s controller has had a pass running for %s (bound %s)", name, d.Round(time.Second), b))
		}
	}
	if len(over) == 0 {
		return nil
	}
	sort.Strings(over)
	return fmt.Errorf("%s: a worker is stuck; restarting the operator frees it", strings.Join(over, "; "))
}

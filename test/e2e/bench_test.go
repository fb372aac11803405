package e2e

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTimeToAvailable measures, on the local cluster, the time from creating an
// EtcdCluster to its Available condition, for 3, 5 and 7 members, and reports the local
// cluster's own start time. Run it with `make bench-e2e` (one iteration per size: each
// iteration is a whole cluster).
func BenchmarkTimeToAvailable(b *testing.B) {
	for _, n := range []int32{3, 5, 7} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				ns := namespace(b)
				_, took := createCluster(b, ns, n)
				total += took
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-to-available")
			b.ReportMetric(upStart.Seconds(), "s-local-up")
		})
	}
}

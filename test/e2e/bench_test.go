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

// BenchmarkMembershipStep measures one scale-out step (3 to 4 members: learner added, pod
// started, caught up, promoted) and one replacement of a member whose volume was deleted, on
// the local cluster. Run it with `make bench-e2e`.
func BenchmarkMembershipStep(b *testing.B) {
	b.Run("scale-out-one-member", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			ns := namespace(b)
			createCluster(b, ns, 3)
			scaleTo(b, ns, 3)
			total += scaleTo(b, ns, 4)
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-per-step")
	})
	b.Run("replace-member", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			ns := namespace(b)
			createCluster(b, ns, 3)
			scaleTo(b, ns, 3)
			total += replaceByDeletingVolume(b, ns, "etcd-1")
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-per-replacement")
	})
}

package metrics

import (
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// BenchmarkMetricsMemory reports the heap the metrics of one cluster keep (KiB-per-cluster):
// a thousand clusters of three members with the conditions a formed cluster has and two kinds
// of step counted, as the operator records them on every pass.
func BenchmarkMetricsMemory(b *testing.B) {
	const n = 1000
	conds := []metav1.Condition{}
	for _, t := range []string{v1alpha1.ConditionAvailable, v1alpha1.ConditionDegraded, v1alpha1.ConditionReady, "Progressing", "Stalled", "BackupReady"} {
		conds = append(conds, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "AsExpected"})
	}
	clusters := make([]*v1alpha1.EtcdCluster, n)
	for i := range clusters {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "bench-metrics", Name: fmt.Sprintf("etcd-%04d", i)}}
		for m := 0; m < 3; m++ {
			c.Status.Members = append(c.Status.Members, v1alpha1.MemberStatus{Name: fmt.Sprintf("%s-%d", c.Name, m), Healthy: true, Leader: m == 0, DBSizeBytes: 20480})
		}
		c.Status.Conditions = conds
		clusters[i] = c
	}
	var perCluster float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, c := range clusters {
			Record(c)
			CountStep(c, plan.AddLearner, nil)
			CountStep(c, plan.PromoteLearner, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perCluster = float64(after.HeapAlloc-before.HeapAlloc) / n / 1024
		b.StopTimer()
		for _, c := range clusters {
			Forget(c)
		}
		b.StartTimer()
	}
	b.ReportMetric(perCluster, "KiB-per-cluster")
}

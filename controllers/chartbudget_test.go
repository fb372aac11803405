package controllers_test

import (
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestAChartTooExpensiveDegradesOnlyItsCluster: a tenant's chart with `repeat 400000000` (446
// MB when it rendered in the operator, whose limit is 256 MiB) leaves its cluster Degraded
// and Stalled with ChartTooExpensive, naming the limit and the flag; the operator (this
// process) does not take the render's memory, and another namespace's cluster is reconciled
// meanwhile.
func TestAChartTooExpensiveDegradesOnlyItsCluster(t *testing.T) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	before := ru.Maxrss << 10
	hostile, other := env.Namespace(t), env.Namespace(t)
	putChart(t, hostile, packageChart(t, map[string][]byte{"templates/hostile.yaml": []byte(`{{ repeat 400000000 "a" }}`)}))
	newCluster(t, hostile, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
	})
	newCluster(t, other, nil)
	waitStatefulSet(t, other)
	c := waitCondition(t, hostile, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonChartTooExpensive)
	if got := condition(c, v1alpha1.ConditionStalled); got != "True/"+v1alpha1.ReasonChartTooExpensive {
		t.Fatalf("Stalled is %s, want True/%s", got, v1alpha1.ReasonChartTooExpensive)
	}
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message; !strings.Contains(msg, "memory limit") || !strings.Contains(msg, "--chart-render-memory") {
		t.Fatalf("Degraded says %q; want the limit and the flag that sets it", msg)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	if grew := ru.Maxrss<<10 - before; grew > 64<<20 {
		t.Fatalf("the operator's peak RSS grew by %d MiB while it rendered the chart", grew>>20)
	}
	t.Logf("the operator's peak RSS: %d MiB before, %d MiB after", before>>20, ru.Maxrss>>10)
}

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// TestHostileChartCostsOtherTenantsNothing: one tenant's chart (a ConfigMap) renders
// `{{ repeat 400000000 "a" }}`, 400 MB, more than the operator's whole memory limit. The
// render runs in the operator's sandbox, which its memory budget stops: the tenant's cluster
// reports Degraded/ChartTooExpensive, the operator's pods keep running (same pods, no
// restart), and meanwhile another namespace's cluster scales out from 1 to 3 members.
func TestHostileChartCostsOtherTenantsNothing(t *testing.T) {
	type podState struct {
		uid      types.UID
		restarts int32
	}
	before := map[string]podState{}
	for _, p := range operatorPods(t) {
		before[p.Name] = podState{p.UID, restarts(p)}
	}
	other := namespace(t)
	createCluster(t, other, 1)

	tenant := namespace(t)
	archive := testutil.PackageChart(t, filepath.Join(root, "charts", "etcd-cluster"), "etcd-cluster",
		map[string][]byte{"templates/hostile.yaml": []byte(`{{ repeat 400000000 "a" }}`)})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chart", Namespace: tenant}, BinaryData: map[string][]byte{"chart.tgz": archive}}
	if err := k8s.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	hostile := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: tenant},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Chart: v1alpha1.ChartSpec{Source: &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "chart"}}}}}
	if err := k8s.Create(context.Background(), hostile); err != nil {
		t.Fatal(err)
	}
	took := scaleTo(t, other, 3)
	t.Logf("figures: the other tenant's cluster scaled from 1 to 3 members in %s while the hostile chart was refused", took.Round(100*time.Millisecond))
	eventually(t, time.Minute, "the hostile cluster Degraded/ChartTooExpensive", func() error {
		c := &v1alpha1.EtcdCluster{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: tenant, Name: "etcd"}, c); err != nil {
			return err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != v1alpha1.ReasonChartTooExpensive {
			return fmt.Errorf("Degraded %+v", d)
		}
		return nil
	})
	for _, p := range operatorPods(t) {
		b, ok := before[p.Name]
		if !ok || b.uid != p.UID {
			t.Errorf("operator pod %s is new: the operator was replaced while the chart rendered (before: %v)", p.Name, before)
			continue
		}
		if r := restarts(p); r != b.restarts {
			t.Errorf("operator pod %s restarted (%d, then %d)", p.Name, b.restarts, r)
		}
	}
}

func restarts(p corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

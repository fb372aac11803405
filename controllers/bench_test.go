package controllers_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/controllers"
)

// BenchmarkSteadyStateReconcile times one pass over an unchanged, healthy 3-member cluster
// through the manager's cached client, and reports the write calls per pass (want 0).
func BenchmarkSteadyStateReconcile(b *testing.B) {
	ns := env.Namespace(b)
	healthyEtcd(ns, 3)
	newCluster(b, ns, nil)
	waitStatefulSet(b, ns)
	markReady(b, ns)
	waitCondition(b, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)

	renderer, err := charts.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	r := &controllers.EtcdClusterReconciler{
		Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Renderer: renderer,
		Recorder: mgr.GetEventRecorder("benchmark"), DialEtcd: fakes.dial, EtcdTimeout: time.Second,
	}
	benchPasses(b, r, ns)
}

// benchPasses times r's passes over the cluster etcd in ns after one that warms the caches,
// and reports the write calls per pass.
func benchPasses(b *testing.B, r *controllers.EtcdClusterReconciler, ns string) {
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "etcd"}}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, req); err != nil { // warm the render cache
		b.Fatal(err)
	}
	before := writes.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(writes.Load()-before)/float64(b.N), "writes/op")
}

// BenchmarkSteadyStateReconcileCustomChart is BenchmarkSteadyStateReconcile for a cluster
// rendered from a chart in a ConfigMap that renders an extra kind, with two patches: the
// ConfigMap and the extra object are read past the cache every pass (two GETs); writes/op
// must stay 0.
func BenchmarkSteadyStateReconcileCustomChart(b *testing.B) {
	ns := env.Namespace(b)
	healthyEtcd(ns, 3)
	putChart(b, ns, packageChart(b, map[string][]byte{"templates/platform.yaml": []byte(extraTemplate)}))
	newCluster(b, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
		c.Spec.Chart.Patches = []v1alpha1.ChartPatch{
			{Target: v1alpha1.PatchTarget{Kind: "Service", Name: "etcd-client"}, StrategicMerge: &runtime.RawExtension{Raw: []byte(`{"metadata":{"annotations":{"lb":"internal"}}}`)}},
			{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/spec/template/metadata/annotations", Value: &runtime.RawExtension{Raw: []byte(`{"mesh":"off"}`)}}}},
		}
	})
	waitStatefulSet(b, ns)
	markReady(b, ns)
	waitCondition(b, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)

	renderer, err := charts.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	// The same capabilities as the manager's reconciler, or the two would render the extra
	// ConfigMap (it prints the Kubernetes version) differently and take turns writing it.
	disco, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	r := &controllers.EtcdClusterReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Renderer: renderer,
		Discovery: disco, Recorder: mgr.GetEventRecorder("benchmark"), DialEtcd: fakes.dial, EtcdTimeout: time.Second,
	}
	benchPasses(b, r, ns)
}

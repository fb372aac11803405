package render

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/sandboxcmd"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// configMaps serves ConfigMaps (whole or their metadata) and counts the whole reads: the
// chart's bytes come from the API server, and what matters here is how often they are read.
type configMaps struct {
	client.Reader
	items      map[string]*corev1.ConfigMap
	wholeReads int
}

func (r *configMaps) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	cm, ok := r.items[key.String()]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		o.ObjectMeta = *cm.ObjectMeta.DeepCopy()
	case *corev1.ConfigMap:
		r.wholeReads++
		cm.DeepCopyInto(o)
	}
	return nil
}

func chartCluster(ns string) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns, UID: ktypes.UID("uid-" + ns)},
		Spec: v1alpha1.EtcdClusterSpec{Chart: v1alpha1.ChartSpec{Source: &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "chart"}}}}}
}

func chartConfigMapOf(ns string, archive []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chart", Namespace: ns, UID: ktypes.UID("cm-" + ns), ResourceVersion: "1"},
		BinaryData: map[string][]byte{"chart.tgz": archive}}
}

// budgetSources are Sources whose charts render in sandboxes of this test binary.
func budgetSources(t *testing.T, b charts.Budget, cms ...*corev1.ConfigMap) (*Sources, *configMaps) {
	t.Helper()
	b.Command = sandboxcmd.MustCommand(t)
	reader := &configMaps{items: map[string]*corev1.ConfigMap{}}
	for _, cm := range cms {
		reader.items[cm.Namespace+"/"+cm.Name] = cm
	}
	return &Sources{Reader: reader, Sandbox: charts.NewSandbox(b)}, reader
}

func packChart(t *testing.T, extra map[string][]byte) []byte {
	return testutil.PackageChart(t, filepath.Join("..", "..", "charts", charts.ChartDir), "etcd-cluster", extra)
}

// TestAChartArchiveAboveTheLimitIsRefusedOnce: a ConfigMap whose chart is larger than the
// archive limit is refused as ChartTooExpensive before it is unpacked, and not read whole
// again while its resourceVersion stays.
func TestAChartArchiveAboveTheLimitIsRefusedOnce(t *testing.T) {
	noise := make([]byte, 1200<<10) // does not compress
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	c := chartCluster("big")
	s, reader := budgetSources(t, charts.Budget{}, chartConfigMapOf(c.Namespace, packChart(t, map[string][]byte{"files/noise": noise})))
	for range 3 {
		_, err := s.For(context.Background(), c)
		if !IsChartTooExpensive(err) || !IsChartSourceError(err) || !strings.Contains(err.Error(), "--chart-archive-size") {
			t.Fatalf("got %v, want ChartTooExpensive naming --chart-archive-size", err)
		}
	}
	if reader.wholeReads != 1 {
		t.Fatalf("the ConfigMap was read whole %d times, want once", reader.wholeReads)
	}
}

func peakRSS(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss << 10
}

// TestARenderAboveTheBudgetIsChartTooExpensive: a ConfigMap's chart with `repeat 400000000`
// or loops without end is refused as ChartTooExpensive (which the controller looks at again
// after a while), within the time limit and without this process's memory growing.
func TestARenderAboveTheBudgetIsChartTooExpensive(t *testing.T) {
	for _, tc := range []struct{ name, template, limit string }{
		{"repeat", `{{ repeat 400000000 "a" }}`, charts.LimitMemory},
		{"nested until", testutil.EndlessLoopTemplate, charts.LimitTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chartCluster(strings.ReplaceAll(tc.name, " ", "-"))
			s, _ := budgetSources(t, charts.Budget{Time: 2 * time.Second}, chartConfigMapOf(c.Namespace, packChart(t, map[string][]byte{"templates/hostile.yaml": []byte(tc.template)})))
			before := peakRSS(t)
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				r, err := s.For(context.Background(), c)
				if err == nil {
					_, err = Desired(r, c, values.DefaultOperator(), memory.Of(c))
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !IsChartTooExpensive(err) || !IsChartSourceError(err) || !strings.Contains(err.Error(), tc.limit+" limit") {
					t.Fatalf("got %v, want ChartTooExpensive for the %s limit", err, tc.limit)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the render has not ended 10s after it started, with a time limit of 2s")
			}
			if grew := peakRSS(t) - before; grew > 32<<20 {
				t.Fatalf("this process's peak RSS grew by %d MiB: the render ran here", grew>>20)
			}
			t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestEqualCapabilitiesReadAgainKeepTheChart: the capabilities are read again every ten
// minutes; equal ones keep the chart's Renderer (a chart in a sandbox costs a process to load
// and one per render missing the cache), other ones (a CRD installed since) build anew.
func TestEqualCapabilitiesReadAgainKeepTheChart(t *testing.T) {
	s := &Sources{}
	builds := 0
	build := func(*charts.Capabilities) (*charts.Renderer, error) { builds++; return &charts.Renderer{}, nil }
	name := ktypes.NamespacedName{Namespace: "ns", Name: "chart"}
	for i, caps := range []*charts.Capabilities{
		{KubeVersion: "v1.31.0", APIVersions: []string{"apps/v1"}},
		{KubeVersion: "v1.31.0", APIVersions: []string{"apps/v1"}},
		{KubeVersion: "v1.31.0", APIVersions: []string{"apps/v1", "example.com/v1"}},
	} {
		if _, err := s.get(name, "cm@1", func() (*charts.Capabilities, error) { return caps, nil }, build); err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 1, 2}[i]; builds != want {
			t.Fatalf("after read %d of the capabilities: %d builds, want %d", i+1, builds, want)
		}
	}
}

package render_test

import (
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/ociregistry"
)

// TestOCISourceIsHeldToTheOperatorsPolicy: spec.chart.source.oci on a registry the policy
// refuses (loopback, plain HTTP: the default's) is a chart source error that says so, and no
// request reaches the registry; with the administrator's explicit allow the chart is pulled.
func TestOCISourceIsHeldToTheOperatorsPolicy(t *testing.T) {
	reg := ociregistry.New("", "")
	defer reg.Close()
	reg.Push("charts/etcd-cluster", "etcd-cluster", "1.0.0", testutil.PackageChart(t, filepath.Join("..", "..", "charts", "etcd-cluster"), "etcd-cluster", nil))
	embedded, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd", UID: "u"}}
	c.Spec.Chart.Source = &v1alpha1.ChartSource{OCI: &v1alpha1.OCIChartSource{Repository: "oci://" + reg.Host() + "/charts/etcd-cluster", Version: "1.0.0", PlainHTTP: true}}

	_, err = (&render.Sources{Embedded: embedded}).For(t.Context(), c)
	if !render.IsChartSourceError(err) || !strings.Contains(err.Error(), "spec.chart.source.oci") || !strings.Contains(err.Error(), "refused by the operator's outbound policy") {
		t.Fatalf("default policy: %v, want a chart source error saying the policy refuses it", err)
	}
	if n := reg.Pulls(); n != 0 {
		t.Fatalf("%d pulls reached the registry", n)
	}
	local, err := egress.New(egress.Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&render.Sources{Embedded: embedded, Egress: local}).For(t.Context(), c); err != nil || reg.Pulls() != 1 {
		t.Fatalf("loopback and plain HTTP allowed: %v after %d pulls", err, reg.Pulls())
	}
}

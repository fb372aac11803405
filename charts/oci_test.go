package charts_test

import (
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/ociregistry"
)

// localRegistry is the outbound policy of tests with a registry of their own: it listens on
// 127.0.0.1 over plain HTTP, both of which the default policy refuses, so the tests allow
// them explicitly, as an administrator would with --allowed-endpoints=127.0.0.0/8
// --allow-insecure-endpoints.
func localRegistry(t *testing.T) *egress.Policy {
	t.Helper()
	p, err := egress.New(egress.Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPullOCIRendersLikeTheSameChartEmbedded: a chart pulled from a registry with Helm's
// registry client (behind basic auth, over plain HTTP) renders what the same chart renders
// from the binary; wrong credentials and a missing version are errors that say so.
func TestPullOCIRendersLikeTheSameChartEmbedded(t *testing.T) {
	local := localRegistry(t)
	reg := ociregistry.New("team", "s3cret")
	defer reg.Close()
	want := reg.Push("platform/etcd-cluster", "etcd-cluster", "0.1.0", testutil.PackageChart(t, charts.ChartDir, "etcd-cluster", nil))

	archive, digest, err := charts.PullOCI("oci://"+reg.Host()+"/platform/etcd-cluster", "0.1.0", charts.OCIOptions{PlainHTTP: true, Username: "team", Password: "s3cret", Egress: local})
	if err != nil {
		t.Fatal(err)
	}
	r, err := charts.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if digest != want {
		t.Fatalf("digest %s, want %s", digest, want)
	}
	embedded, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel := charts.Release{Name: "etcd", Namespace: "ns"}
	got, err := r.Render(rel, embedded.DefaultValues())
	if err != nil {
		t.Fatal(err)
	}
	exp, err := embedded.Render(rel, embedded.DefaultValues())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exp) || len(got) == 0 {
		t.Fatalf("pulled chart rendered %d objects, embedded %d", len(got), len(exp))
	}

	_, _, err = charts.PullOCI("oci://"+reg.Host()+"/platform/etcd-cluster", "0.1.0", charts.OCIOptions{PlainHTTP: true, Username: "team", Password: "wrong", Egress: local})
	if err == nil || !strings.Contains(err.Error(), "failed to pull chart") || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("wrong password: %v", err)
	}
	_, _, err = charts.PullOCI("oci://"+reg.Host()+"/platform/etcd-cluster", "9.9.9", charts.OCIOptions{PlainHTTP: true, Username: "team", Password: "s3cret", Egress: local})
	if err == nil || !strings.Contains(err.Error(), "9.9.9") {
		t.Fatalf("missing version: %v", err)
	}
}

package charts_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/ociregistry"
)

// TestPullOCIIsHeldToTheOutboundPolicy: by default a registry on loopback, one over plain
// HTTP, or on the metadata address is refused before any request reaches it; the
// administrator's explicit allow opens it.
func TestPullOCIIsHeldToTheOutboundPolicy(t *testing.T) {
	var requests atomic.Int32
	reg := ociregistry.New("", "")
	defer reg.Close()
	inner := reg.Config.Handler
	reg.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		inner.ServeHTTP(w, r)
	})
	reg.Push("platform/etcd-cluster", "etcd-cluster", "0.1.0", testutil.PackageChart(t, charts.ChartDir, "etcd-cluster", nil))
	repo := "oci://" + reg.Host() + "/platform/etcd-cluster"
	onlyHTTPS, _ := egress.New(egress.Config{Allowed: []string{"127.0.0.0/8"}})
	for _, tc := range []struct {
		name, repo string
		o          charts.OCIOptions
		want       string
	}{
		{"loopback, default policy", repo, charts.OCIOptions{PlainHTTP: true}, "a loopback address"},
		{"loopback over https, default policy", repo, charts.OCIOptions{}, "a loopback address"},
		{"plain HTTP not allowed", repo, charts.OCIOptions{PlainHTTP: true, Egress: onlyHTTPS}, "plain HTTP is not allowed"},
		{"metadata address", "oci://169.254.169.254/charts/x", charts.OCIOptions{}, "link-local"},
		{"metadata name", "oci://metadata.google.internal/charts/x", charts.OCIOptions{}, "cloud metadata service"},
		{"a user in the host", "oci://u:p@registry.example/charts/x", charts.OCIOptions{}, "names a user"},
	} {
		_, _, err := charts.PullOCI(tc.repo, "0.1.0", tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "failed to pull chart ") {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the registry", n)
	}
	if _, _, err := charts.PullOCI(repo, "0.1.0", charts.OCIOptions{PlainHTTP: true, Egress: localRegistry(t)}); err != nil {
		t.Fatalf("with loopback and plain HTTP allowed: %v", err)
	}
}

// TestPullOCIEchoesNothingTheRegistrySent: whatever answers at the registry's address, the
// error names its HTTP status or the connection's class, not its body.
func TestPullOCIEchoesNothingTheRegistrySent(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusNotFound, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"internal-secret-banner"}]}`, "HTTP 404: no such repository or version"},
		{http.StatusForbidden, `<html>internal-secret-banner</html>`, "HTTP 403: check the login"},
		{http.StatusTeapot, `internal-secret-banner`, "HTTP 418"},
		{http.StatusOK, `internal-secret-banner`, "failed to pull chart"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		_, _, err := charts.PullOCI("oci://"+strings.TrimPrefix(srv.URL, "http://")+"/charts/x", "1.0.0", charts.OCIOptions{PlainHTTP: true, Egress: localRegistry(t)})
		srv.Close()
		if err == nil || strings.Contains(err.Error(), "secret-banner") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("HTTP %d %s: %v, want %q and nothing the server sent", tc.status, tc.body, err, tc.want)
		}
	}
}

// TestSchemaReferencesAreHeldToTheOutboundPolicy: a chart's values schema that refers to
// the metadata service, to a server on loopback (unless allowed) or to a file of the
// operator's is refused when values are checked against it.
func TestSchemaReferencesAreHeldToTheOutboundPolicy(t *testing.T) {
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetched.Add(1)
		fmt.Fprint(w, `{"type": "object"}`)
	}))
	defer srv.Close()
	rel := charts.Release{Name: "etcd", Namespace: "ns"}
	withSchema := func(ref string) *charts.Renderer {
		schema := `{"type": "object", "properties": {"extra": {"$ref": "` + ref + `"}}}`
		r, err := charts.FromArchive(testutil.PackageChart(t, charts.ChartDir, "etcd-cluster", map[string][]byte{"values.schema.json": []byte(schema)}))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct{ ref, want string }{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"https://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"},
		{srv.URL + "/schema.json", "loopback"},
		{"file:///etc/hostname", "may not refer to files"},
	} {
		r := withSchema(tc.ref)
		_, err := r.Render(rel, r.DefaultValues())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("$ref %s: %v, want an error containing %q", tc.ref, err, tc.want)
		}
	}
	if n := fetched.Load(); n != 0 {
		t.Fatalf("the schema server was asked %d times", n)
	}
	r := withSchema(srv.URL + "/schema.json").WithEgress(localRegistry(t))
	if _, err := r.Render(rel, r.DefaultValues()); err != nil || fetched.Load() == 0 {
		t.Fatalf("with loopback allowed: %v (fetched %d times)", err, fetched.Load())
	}
}

// TestASandboxedSchemaIsHeldToTheOperatorsPolicy: a tenant's chart renders in a sandbox,
// which reads the chart's values schema: the URLs it refers to are fetched under the policy
// the operator gave the renderer, not under whatever the child would assume.
func TestASandboxedSchemaIsHeldToTheOperatorsPolicy(t *testing.T) {
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetched.Add(1)
		fmt.Fprint(w, `{"type": "object"}`)
	}))
	defer srv.Close()
	schema := `{"type": "object", "properties": {"extra": {"$ref": "` + srv.URL + `/schema.json"}}}`
	archive := testutil.PackageChart(t, charts.ChartDir, "etcd-cluster", map[string][]byte{"values.schema.json": []byte(schema)})
	sb, _ := testSandbox(t, charts.Budget{})
	emb, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	vals := emb.DefaultValues()
	rel := charts.Release{Name: "etcd", Namespace: "ns"}

	r, err := sb.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WithEgress(nil).Render(rel, vals); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a sandboxed schema referring to loopback under the default policy: %v", err)
	}
	if n := fetched.Load(); n != 0 {
		t.Fatalf("the schema server was asked %d times", n)
	}
	r, err = sb.FromArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WithEgress(localRegistry(t)).Render(rel, vals); err != nil || fetched.Load() == 0 {
		t.Fatalf("with loopback allowed: %v (fetched %d times)", err, fetched.Load())
	}
}

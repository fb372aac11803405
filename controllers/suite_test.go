package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/cli"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/sandboxcmd"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

var (
	env *testenv.Env
	mgr ctrl.Manager
	// writes counts the manager's write requests to the API server.
	writes atomic.Int64
	// fakes hands each test namespace its own fake etcd.
	fakes = &fakeEtcds{byNamespace: map[string]*etcd.Fake{}}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Errors of the controller show up in the test output; set ETCD_PILOT_TEST_LOG=debug for all.
	lvl := zapcore.ErrorLevel
	if os.Getenv("ETCD_PILOT_TEST_LOG") == "debug" {
		lvl = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(lvl)))
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()

	// Tenants' charts render in sandboxes of this binary, or of the operator's built as the
	// image builds it (no race detector, no cgo) when this one is not (see sandboxcmd).
	sandbox, err := sandboxcmd.Command()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cli.SandboxCommand = sandbox
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countWrites{rt} }
	mgr, err = manager.New(cfg, manager.Options{MetricsAddr: "0", ProbeAddr: "0", DialEtcd: fakes.dial, EtcdTimeout: time.Second,
		Operator: values.DefaultOperator(), Egress: suiteEgress, ChartBudget: charts.Budget{Command: sandbox}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// countWrites counts every request that is not a read, and per namespace the reads (GETs
// that are not watches).
type countWrites struct{ rt http.RoundTripper }

func (c countWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodGet:
		if ns := namespaceOf(r.URL.Path); ns != "" && r.URL.Query().Get("watch") != "true" {
			n, _ := readsByNamespace.LoadOrStore(ns, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	case http.MethodHead, http.MethodOptions:
	default:
		writes.Add(1)
		if ns := namespaceOf(r.URL.Path); ns != "" {
			n, _ := writesByNamespace.LoadOrStore(ns, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	}
	return c.rt.RoundTrip(r)
}

// writesByNamespace counts the manager's write requests per namespace (*atomic.Int64): a
// test that counts its own cluster's writes is not disturbed by the passes over the clusters
// of earlier tests, whose namespaces are still being deleted.
var writesByNamespace sync.Map

// writesIn is the number of the manager's write requests to objects in namespace ns.
func writesIn(ns string) int64 {
	n, ok := writesByNamespace.Load(ns)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// readsByNamespace counts the manager's reads (GETs other than watches) per namespace
// (*atomic.Int64): those its client serves past the informer cache.
var readsByNamespace sync.Map

// readsIn is the number of the manager's reads of objects in namespace ns.
func readsIn(ns string) int64 {
	n, ok := readsByNamespace.Load(ns)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// namespaceOf is the namespace in an API path (/api/v1/namespaces/NS/... or
// /apis/GROUP/VERSION/namespaces/NS/...), "" for cluster-scoped paths.
func namespaceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "namespaces" && (i == 2 || i == 3) {
			return parts[i+1]
		}
	}
	return ""
}

// suiteEgress is the manager's outbound policy. The tests' OCI registries listen on
// 127.0.0.1 over plain HTTP, both of which the default policy refuses: the suite allows them
// explicitly, as an administrator would with --allowed-endpoints=127.0.0.0/8
// --allow-insecure-endpoints. Everything else is the default's (link-local and the metadata
// addresses refused), with one name of the tests' own DNS (suiteResolver).
var suiteEgress = func() *egress.Policy {
	p, err := egress.New(egress.Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true, Resolver: suiteResolver{}})
	if err != nil {
		panic(err)
	}
	return p
}()

// metadataAlias is a name suiteResolver resolves to the cloud metadata address, as a tenant's
// own DNS name pointing there would.
const metadataAlias = "backups.metadata-alias.test"

// suiteResolver resolves metadataAlias to 169.254.169.254 and every other name as the
// system does.
type suiteResolver struct{}

func (suiteResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == metadataAlias {
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

type fakeEtcds struct {
	mu          sync.Mutex
	byNamespace map[string]*etcd.Fake
}

func (f *fakeEtcds) set(ns string, fake *etcd.Fake) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byNamespace[ns] = fake
}

// dial finds the namespace in the first endpoint (http://<pod>.<svc>.<ns>.svc:port) and hands
// out its fake as a client dialing with cfg sees it.
func (f *fakeEtcds) dial(_ context.Context, endpoints []string, cfg *tls.Config) (etcd.Client, error) {
	host := strings.TrimPrefix(endpoints[0], "http://")
	parts := strings.Split(host, ".")
	if len(parts) < 3 {
		return nil, fmt.Errorf("unexpected endpoint %s", endpoints[0])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fake, ok := f.byNamespace[parts[2]]
	if !ok {
		return nil, fmt.Errorf("failed to dial etcd at %v: no etcd in this test", endpoints)
	}
	// Without a client certificate the operator is no user: under auth, etcd refuses it.
	return fake.As(cfg), nil
}

// reconciles returns how many passes the EtcdCluster controller has finished.
func reconciles(t testing.TB) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("failed to gather metrics: %v", err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "controller") == controllers.ControllerName {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// eventually polls cond until it returns nil or the timeout passes.
var eventually = testutil.Eventually

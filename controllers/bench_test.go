package controllers_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
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
// and reports per pass: the write calls; the reads through r.Client and r.APIReader (reads/op,
// gets/op, lists/op; cachereads/op served from the informer cache, apireads/op sent to the
// API server by APIReader or by Client past its cache); the etcd dials and calls
// (etcddials/op, etcdcalls/op). It logs the reads by source, kind and verb and the etcd calls
// by method, so a read or call repeated within a pass shows.
func benchPasses(b *testing.B, r *controllers.EtcdClusterReconciler, ns string) {
	reads := &readCounter{scheme: r.Scheme, n: map[readKey]int{}}
	r.Client = &countingClient{Client: r.Client, reads: reads}
	if r.APIReader != nil { // nil: the reconciler reads through Client instead
		r.APIReader = &countingReader{Reader: r.APIReader, reads: reads}
	}
	calls := &etcdCounter{n: map[string]int{}}
	r.DialEtcd = calls.dialer(r.DialEtcd)

	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "etcd"}}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, req); err != nil { // warm the render cache
		b.Fatal(err)
	}
	reads.reset()
	calls.reset()
	before := writes.Load()
	serverBefore := readsIn(ns)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perPass := func(n int64) float64 { return float64(n) / float64(b.N) }
	b.ReportMetric(perPass(writes.Load()-before), "writes/op")

	total, bySource, byVerb, breakdown := reads.summary()
	b.ReportMetric(perPass(int64(total)), "reads/op")
	b.ReportMetric(perPass(int64(byVerb["get"])), "gets/op")
	b.ReportMetric(perPass(int64(byVerb["list"])), "lists/op")
	b.ReportMetric(perPass(int64(bySource[fromCache])), "cachereads/op")
	b.ReportMetric(perPass(int64(bySource[fromUncached]+bySource[fromAPIReader])), "apireads/op")
	// The same reads as the API server saw them in ns (the manager's transport; watches
	// left out): apireads/op plus any pass the manager's own reconciler ran meanwhile.
	b.ReportMetric(perPass(readsIn(ns)-serverBefore), "serverreads/op")

	dials, etcdCalls, byMethod := calls.summary()
	b.ReportMetric(perPass(int64(dials)), "etcddials/op")
	b.ReportMetric(perPass(int64(etcdCalls)), "etcdcalls/op")

	b.Logf("reads per pass (N=%d): %s", b.N, perPassList(breakdown, b.N))
	b.Logf("etcd per pass (N=%d): %s", b.N, perPassList(byMethod, b.N))
}

// Where a read goes: through Client to the informer cache, through Client past the cache to
// the API server (unstructured objects), through APIReader to the API server.
const (
	fromCache     = "cache"
	fromUncached  = "uncached"
	fromAPIReader = "apireader"
)

type readKey struct{ source, kind, verb string }

// readCounter counts reads by source, kind and verb. Safe for concurrent use.
type readCounter struct {
	scheme *runtime.Scheme
	mu     sync.Mutex
	n      map[readKey]int
}

func (c *readCounter) note(source, verb string, obj runtime.Object) {
	kind := "?"
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		kind = gvk.Kind
		if verb == "list" {
			kind = strings.TrimSuffix(kind, "List")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[readKey{source, kind, verb}]++
}

func (c *readCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.n)
}

// summary returns the reads in all, by source, by verb, and as "[source] Kind verb" counts.
func (c *readCounter) summary() (total int, bySource, byVerb, breakdown map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bySource, byVerb, breakdown = map[string]int{}, map[string]int{}, map[string]int{}
	for k, n := range c.n {
		total += n
		bySource[k.source] += n
		byVerb[k.verb] += n
		breakdown[fmt.Sprintf("[%s] %s %s", k.source, k.kind, k.verb)] += n
	}
	return total, bySource, byVerb, breakdown
}

// servedBy is where the manager's client serves a read of obj from: unstructured objects
// from the API server (the manager does not cache unstructured objects), the rest from the
// informer cache.
func servedBy(obj runtime.Object) string {
	switch obj.(type) {
	case *unstructured.Unstructured, *unstructured.UnstructuredList:
		return fromUncached
	}
	return fromCache
}

// countingClient counts the reads of a client.Client; writes pass through.
type countingClient struct {
	client.Client
	reads *readCounter
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads.note(servedBy(obj), "get", obj)
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *countingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.reads.note(servedBy(list), "list", list)
	return c.Client.List(ctx, list, opts...)
}

// countingReader counts the reads of a client.Reader that reads past the cache.
type countingReader struct {
	client.Reader
	reads *readCounter
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads.note(fromAPIReader, "get", obj)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.reads.note(fromAPIReader, "list", list)
	return c.Reader.List(ctx, list, opts...)
}

// etcdCounter counts dials ("Dial") and the calls on the dialed clients by method. Safe for
// concurrent use.
type etcdCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *etcdCounter) note(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[method]++
}

func (c *etcdCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.n)
}

// summary returns the dials, the calls to etcd (every method but Close) and the counts by
// method (with Dial and Close).
func (c *etcdCounter) summary() (dials, calls int, byMethod map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byMethod = maps.Clone(c.n)
	for m, n := range c.n {
		switch m {
		case "Dial":
			dials += n
		case "Close":
		default:
			calls += n
		}
	}
	return dials, calls, byMethod
}

// dialer wraps dial: every dial, and every call on the clients it returns, is counted.
func (c *etcdCounter) dialer(dial etcd.Dialer) etcd.Dialer {
	return func(ctx context.Context, endpoints []string, cfg *tls.Config) (etcd.Client, error) {
		c.note("Dial")
		cl, err := dial(ctx, endpoints, cfg)
		if err != nil {
			return nil, err
		}
		return &countingEtcd{cl: cl, c: c}, nil
	}
}

// countingEtcd counts the calls on an etcd.Client. It implements every method itself (no
// embedding), so a method added to etcd.Client fails to compile here instead of going uncounted.
type countingEtcd struct {
	cl etcd.Client
	c  *etcdCounter
}

var _ etcd.Client = (*countingEtcd)(nil)

func (e *countingEtcd) MemberList(ctx context.Context) (etcd.Cluster, error) {
	e.c.note("MemberList")
	return e.cl.MemberList(ctx)
}

func (e *countingEtcd) Ready(ctx context.Context, endpoint string) error {
	e.c.note("Ready")
	return e.cl.Ready(ctx, endpoint)
}

func (e *countingEtcd) ServesReads(ctx context.Context, endpoint string) error {
	e.c.note("ServesReads")
	return e.cl.ServesReads(ctx, endpoint)
}

func (e *countingEtcd) Status(ctx context.Context, endpoint string) (etcd.MemberStatus, error) {
	e.c.note("Status")
	return e.cl.Status(ctx, endpoint)
}

func (e *countingEtcd) AddLearner(ctx context.Context, peerURLs []string) (etcd.Member, error) {
	e.c.note("AddLearner")
	return e.cl.AddLearner(ctx, peerURLs)
}

func (e *countingEtcd) Promote(ctx context.Context, id uint64) error {
	e.c.note("Promote")
	return e.cl.Promote(ctx, id)
}

func (e *countingEtcd) UpdatePeerURLs(ctx context.Context, id uint64, peerURLs []string) error {
	e.c.note("UpdatePeerURLs")
	return e.cl.UpdatePeerURLs(ctx, id, peerURLs)
}

func (e *countingEtcd) Remove(ctx context.Context, id uint64) error {
	e.c.note("Remove")
	return e.cl.Remove(ctx, id)
}

func (e *countingEtcd) MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error {
	e.c.note("MoveLeader")
	return e.cl.MoveLeader(ctx, leaderEndpoint, transferee)
}

func (e *countingEtcd) AdvanceLog(ctx context.Context, n int) error {
	e.c.note("AdvanceLog")
	return e.cl.AdvanceLog(ctx, n)
}

func (e *countingEtcd) Snapshot(ctx context.Context, endpoint string) (*etcd.Snapshot, error) {
	e.c.note("Snapshot")
	return e.cl.Snapshot(ctx, endpoint)
}

func (e *countingEtcd) Defragment(ctx context.Context, endpoint string) error {
	e.c.note("Defragment")
	return e.cl.Defragment(ctx, endpoint)
}

func (e *countingEtcd) Alarms(ctx context.Context) ([]etcd.Alarm, error) {
	e.c.note("Alarms")
	return e.cl.Alarms(ctx)
}

func (e *countingEtcd) DisarmAlarm(ctx context.Context, a etcd.Alarm) error {
	e.c.note("DisarmAlarm")
	return e.cl.DisarmAlarm(ctx, a)
}

func (e *countingEtcd) Compact(ctx context.Context, revision int64) error {
	e.c.note("Compact")
	return e.cl.Compact(ctx, revision)
}

func (e *countingEtcd) Auth(ctx context.Context, users []string) (etcd.AuthState, error) {
	e.c.note("Auth")
	return e.cl.Auth(ctx, users)
}

func (e *countingEtcd) EnsureRootUser(ctx context.Context, name, password string) error {
	e.c.note("EnsureRootUser")
	return e.cl.EnsureRootUser(ctx, name, password)
}

func (e *countingEtcd) RemoveUser(ctx context.Context, name string) error {
	e.c.note("RemoveUser")
	return e.cl.RemoveUser(ctx, name)
}

func (e *countingEtcd) SetAuth(ctx context.Context, on bool) error {
	e.c.note("SetAuth")
	return e.cl.SetAuth(ctx, on)
}

func (e *countingEtcd) Close() error {
	e.c.note("Close")
	return e.cl.Close()
}

// perPassList formats counts divided by n, most first: "StatefulSet get 1, Pod list 0.5".
func perPassList(counts map[string]int, n int) string {
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %g", k, float64(counts[k])/float64(n)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// BenchmarkSteadyStateReconcileCustomChart is BenchmarkSteadyStateReconcile for a cluster
// rendered from a chart in a ConfigMap that renders an extra kind, with two patches: the
// chart's ConfigMap and the extra object are read past the cache every pass (two GETs, and
// the prune's LIST of the extra kind: apireads/op 3); writes/op must stay 0.
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

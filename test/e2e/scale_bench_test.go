package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
)

// scaleLabel marks the namespaces and clusters BenchmarkThousandClusters creates.
const scaleLabel = "etcdpilot.io/scale-bench"

// scaleWindow is how long the steady state is watched: longer than RequeueSettled, so every
// cluster's periodic pass falls in it.
const scaleWindow = 70 * time.Second

// BenchmarkThousandClusters creates 1000 EtcdClusters (ETCD_PILOT_SCALE_N overrides the
// count) whose pods no node can take (a nodeSelector no node matches): every cluster is
// rendered, applied and observed while no etcd runs. Once in one namespace and once across
// 50. It reports the operator's resident memory (from /proc: before, peak, settled), the time
// until every cluster has status for its generation and its StatefulSet, and, over a steady
// window of scaleWindow, the requests per cluster: reads the operator made (its own
// rest_client_requests_total, which also counts its leader election's lease reads and
// writes) and writes the API server served to the kinds a cluster owns
// (apiserver_request_total; must be 0). Run it with `make bench-scale`.
func BenchmarkThousandClusters(b *testing.B) {
	n := 1000
	if s := os.Getenv("ETCD_PILOT_SCALE_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("ETCD_PILOT_SCALE_N=%q is not a positive number", s)
		}
		n = v
	}
	for _, spaces := range []int{1, 50} {
		b.Run(fmt.Sprintf("clusters=%d/namespaces=%d", n, spaces), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runScale(b, n, spaces)
			}
		})
	}
}

func runScale(b *testing.B, n, spaces int) {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	// The suite's client is rate limited like any client-go default; creating a thousand
	// objects must not be what the benchmark measures.
	cfg.QPS, cfg.Burst = 500, 1000
	kc, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	scrape, err := operatorScraper(ctx, b, kc)
	if err != nil {
		b.Fatal(err)
	}
	rss := startRSSSampler()
	defer rss.stop()
	before := rss.now()

	var namespaces []string
	for i := 0; i < spaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-", Labels: map[string]string{scaleLabel: "true"}}}
		if err := kc.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		namespaces = append(namespaces, ns.Name)
	}
	defer deleteScaleNamespaces(b, kc, namespaces)

	start := time.Now()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := &v1alpha1.EtcdCluster{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("etcd-%04d", i), Namespace: namespaces[i%spaces], Labels: map[string]string{scaleLabel: "true"}},
					Spec: v1alpha1.EtcdClusterSpec{
						Insecure: true, // the operator's cost per cluster, measured as before
						Replicas: ptr.To[int32](3),
						// No node carries this label: the pods stay Pending, no etcd runs.
						NodeSelector: map[string]string{scaleLabel: "no-such-node"},
					},
				}
				if err := kc.Create(ctx, c); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("failed to create an EtcdCluster: %v", err)
	}
	created := time.Since(start)

	// Every cluster applied (its StatefulSet exists) and with status for its generation.
	eventually(b, 30*time.Minute, fmt.Sprintf("%d clusters applied and with status", n), func() error {
		list := &v1alpha1.EtcdClusterList{}
		if err := kc.List(ctx, list, client.MatchingLabels{scaleLabel: "true"}); err != nil {
			return err
		}
		done := 0
		for _, c := range list.Items {
			if c.Status.ObservedGeneration == c.Generation && len(c.Status.Conditions) > 0 {
				done++
			}
		}
		if done < n {
			return fmt.Errorf("%d of %d clusters have status for their generation", done, n)
		}
		sts, err := cs.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedByValue})
		if err != nil {
			return err
		}
		mine := 0
		for _, s := range sts.Items {
			if strings.HasPrefix(s.Namespace, "scale-") {
				mine++
			}
		}
		if mine < n {
			return fmt.Errorf("%d of %d StatefulSets applied", mine, n)
		}
		return nil
	})
	applied := time.Since(start)
	peakApplying := rss.peak()

	// Settled: every member pod created (Pending) and a quiet spell without writes.
	eventually(b, 15*time.Minute, "the clusters to settle", func() error {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedByValue})
		if err != nil {
			return err
		}
		mine := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Namespace, "scale-") {
				mine++
			}
		}
		if mine < 3*n {
			return fmt.Errorf("%d of %d member pods created", mine, 3*n)
		}
		w0, err := apiserverWrites(ctx, cs)
		if err != nil {
			return err
		}
		time.Sleep(15 * time.Second) // the quiet spell looked at
		w1, err := apiserverWrites(ctx, cs)
		if err != nil {
			return err
		}
		if d := diffWrites(w0, w1); len(d) > 0 {
			return fmt.Errorf("writes in the last 15 s: %v", d)
		}
		return nil
	})
	settling := time.Since(start)

	// The steady state: what the operator reads and what is written, over a window.
	op0, err := scrape()
	if err != nil {
		b.Fatal(err)
	}
	api0, err := apiserverWrites(ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	windowStart := time.Now()
	time.Sleep(scaleWindow) // a measurement window, not a wait for a condition
	op1, err := scrape()
	if err != nil {
		b.Fatal(err)
	}
	api1, err := apiserverWrites(ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	window := time.Since(windowStart)
	settled := rss.now()

	byMethod := map[string]float64{}
	for m, v := range op1 {
		byMethod[m] = v - op0[m]
	}
	writes := diffWrites(api0, api1)
	var totalWrites float64
	for _, v := range writes {
		totalWrites += v
	}
	scaleLogf(b, "%d clusters in %d namespaces: created in %s, all applied with status after %s, settled (every pod created, 15 s without writes) after %s",
		n, spaces, created.Round(time.Millisecond), applied.Round(time.Millisecond), settling.Round(time.Millisecond))
	scaleLogf(b, "operator RSS: before %.1f MiB, peak %.1f MiB (while applying %.1f MiB), settled %.1f MiB", inMiB(before), inMiB(rss.peak()), inMiB(peakApplying), inMiB(settled))
	scaleLogf(b, "operator requests over %s by method: %v", window.Round(time.Second), byMethod)
	scaleLogf(b, "writes to the kinds a cluster owns over the window (API server): %v", writes)
	if totalWrites > 0 {
		b.Errorf("%v writes in steady state, want 0: %v", totalWrites, writes)
	}
	perMin := float64(time.Minute) / float64(window)
	b.ReportMetric(applied.Seconds(), "s-all-applied")
	b.ReportMetric(settling.Seconds(), "s-settled")
	b.ReportMetric(inMiB(rss.peak()), "MiB-peak-rss")
	b.ReportMetric(inMiB(settled), "MiB-settled-rss")
	b.ReportMetric(inMiB(before), "MiB-rss-before")
	b.ReportMetric((settled-before)/float64(n)/1024, "KiB-rss-per-cluster")
	b.ReportMetric((byMethod["GET"]+byMethod["LIST"])*perMin/float64(n), "reads/cluster/min")
	b.ReportMetric(totalWrites, "writes-in-window")
	b.ReportMetric(0, "ns/op") // one iteration is the whole scenario, not a figure of its own
}

// scaleLogf logs to the benchmark and at once to stderr: the figures are read while the
// cleanup that follows them runs (deleting a thousand clusters takes minutes).
func scaleLogf(b *testing.B, format string, args ...any) {
	b.Helper()
	b.Logf(format, args...)
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
}

// diffWrites is b - a for the counters that grew.
func diffWrites(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func inMiB(bytes float64) float64 { return bytes / (1 << 20) }

// deleteScaleNamespaces deletes the benchmark's namespaces and waits until they are gone (the
// operator releases every cluster's finalizer).
func deleteScaleNamespaces(b *testing.B, kc client.Client, names []string) {
	ctx := context.Background()
	for _, name := range names {
		if err := kc.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsNotFound(err) {
			b.Errorf("failed to delete namespace %s: %v", name, err)
		}
	}
	eventually(b, 20*time.Minute, "the benchmark's namespaces to be gone", func() error {
		list := &corev1.NamespaceList{}
		if err := kc.List(ctx, list, client.MatchingLabels{scaleLabel: "true"}); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d namespaces left", len(list.Items))
		}
		return nil
	})
}

// rssSampler samples the resident memory of the operator's processes (the largest of its
// replicas: the leader's) every 100 ms.
type rssSampler struct {
	mu   sync.Mutex
	max  float64
	last float64
	done chan struct{}
	wg   sync.WaitGroup
}

func startRSSSampler() *rssSampler {
	s := &rssSampler{done: make(chan struct{})}
	s.sample()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	v := float64(operatorRSS())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = v
	s.max = max(s.max, v)
}

func (s *rssSampler) now() float64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *rssSampler) peak() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

func (s *rssSampler) stop() {
	close(s.done)
	s.wg.Wait()
}

// operatorRSS is the largest resident set (bytes) among the operator's processes on the local
// cluster (operatorPIDs).
func operatorRSS() int64 {
	var best int64
	for _, pid := range operatorPIDs() {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					best = max(best, kb*1024)
				}
			}
		}
	}
	return best
}

// sample is one line of a Prometheus text exposition: its labels and value.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([0-9.eE+-]+|NaN)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricSamples calls f with the labels and value of every sample of metric name in r.
func metricSamples(r io.Reader, name string, f func(labels map[string]string, v float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != name {
			continue
		}
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			labels[p[1]] = p[2]
		}
		f(labels, v)
	}
	return sc.Err()
}

// scaleOwnedResources are the resources a cluster owns (and itself): in a steady state with
// no etcd running, nothing should write them. The status of the built-in ones is
// kube-controller-manager's (the StatefulSet and disruption controllers), not counted.
var scaleOwnedResources = map[string]bool{
	"etcdclusters": true, "statefulsets": true, "services": true, "serviceaccounts": true,
	"poddisruptionbudgets": true, "networkpolicies": true, "configmaps": true, "secrets": true,
}

// apiserverWrites reads kube-apiserver's apiserver_request_total and returns the writes it
// served to scaleOwnedResources, by resource/subresource and verb.
func apiserverWrites(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to read the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	err = metricSamples(bytes.NewReader(raw), "apiserver_request_total", func(l map[string]string, v float64) {
		switch l["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT":
			return
		}
		if !scaleOwnedResources[l["resource"]] || (l["subresource"] != "" && l["resource"] != "etcdclusters") {
			return
		}
		k := l["resource"]
		if l["subresource"] != "" {
			k += "/" + l["subresource"]
		}
		out[k+" "+l["verb"]] += v
	})
	return out, err
}

// operatorScraper returns a function that reads rest_client_requests_total from every
// operator pod's metrics endpoint (HTTPS, authorized for a ServiceAccount bound to the
// metrics-reader role, as a Prometheus would be) and sums it by method.
func operatorScraper(ctx context.Context, b *testing.B, kc client.Client) (func() (map[string]float64, error), error) {
	const name = "scale-bench-metrics"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name}}
	if err := kc.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "etcd-pilot-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: name}},
	}
	if err := kc.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	b.Cleanup(func() {
		_ = kc.Delete(context.Background(), crb)
		_ = kc.Delete(context.Background(), sa)
	})
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := kc.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("failed to request a token: %w", err)
	}
	token := tr.Status.Token
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The operator's certificate is self-signed; the bearer token is what is checked.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a benchmark reading metrics
	}}
	return func() (map[string]float64, error) {
		pods := &corev1.PodList{}
		if err := kc.List(ctx, pods, client.InNamespace(operatorNamespace), operatorLabels); err != nil {
			return nil, err
		}
		out := map[string]float64{}
		read := 0
		for _, p := range pods.Items {
			if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				continue
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(p.Status.PodIP, "8443")+"/metrics", nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hc.Do(req)
			if err != nil {
				return nil, fmt.Errorf("failed to read the metrics of %s: %w", p.Name, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("metrics of %s: %s: %s", p.Name, resp.Status, body)
			}
			read++
			if err := metricSamples(bytes.NewReader(body), "rest_client_requests_total", func(l map[string]string, v float64) {
				out[l["method"]] += v
			}); err != nil {
				return nil, err
			}
		}
		if read == 0 {
			return nil, fmt.Errorf("no operator pod to read metrics from")
		}
		return out, nil
	}, nil
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

const (
	// tenClusters is the number of 3-member clusters BenchmarkTenClusters runs at once.
	tenClusters = 10
	// tenFrom and tenTo are the versions of its upgrade (the supported next minor), and
	// tenClusterVersion the cluster version etcd reports once every member runs tenTo.
	tenFrom, tenTo, tenClusterVersion = "3.5.35", "3.6.16", "3.6.0"
	// tenPoll is how often each cluster is asked whether it reached what is waited for.
	tenPoll = 200 * time.Millisecond
	// tenWriteEvery paces each cluster's writer: ten writers back to back would be a load
	// test of their own on two cores.
	tenWriteEvery = 200 * time.Millisecond
	// tenIdleWindow is how long the operator's CPU and memory are watched once every
	// cluster is upgraded and the operator says so: longer than a settled cluster's requeue.
	tenIdleWindow = 30 * time.Second
)

// tenCluster is what BenchmarkTenClusters measured of one of its clusters.
type tenCluster struct {
	ns        string
	created   time.Time
	available time.Duration // creation to 3 healthy voters agreeing on a leader (etcd)
	termAvail uint64        // the raft term when it was Available: 2 is one election
	upgraded  time.Duration // spec change to every member on tenTo and the cluster version raised (etcd)
	// memberOn is, per ordinal, when etcd's Status of that member first reported tenTo, and
	// versionAt when a member first reported the cluster version tenClusterVersion (from the
	// spec change; zero while not seen).
	memberOn  [3]time.Duration
	versionAt time.Duration
	writer    *writer
	sampler   *sampler
}

// BenchmarkTenClusters runs tenClusters real 3-member EtcdClusters on the local cluster at
// once. It creates them all at tenFrom and times each from its creation until etcd itself
// reports it formed (every member a started, healthy voter following one leader, one cluster
// ID), and all of them; then it starts a paced writer (a put every tenWriteEvery) and a
// safety sampler on every cluster, sets tenTo on all at once and times each from the change
// until etcd reports every member serving tenTo and the cluster version tenClusterVersion.
// The samplers fail the benchmark if a cluster ever had fewer healthy voters than quorum (two
// samples in a row) or more than one learner; the writers if an acknowledged write is lost.
// The operator's CPU (utime+stime from /proc, in cores) and resident memory (peak, and
// settled at the end of an idle window) are read while forming, while upgrading and idle,
// with the machine's CPU use beside them. Raft terms say whether elections stormed: a formed
// cluster is at term 2 after one election, and the upgrade should cost one hand-over each.
// Run it with `make bench-ten` (one iteration: the whole scenario).
func BenchmarkTenClusters(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runTen(b)
	}
}

func runTen(b *testing.B) {
	ctx := context.Background()
	clusters := make([]*tenCluster, tenClusters)
	for i := range clusters {
		clusters[i] = &tenCluster{ns: namespace(b)}
	}
	// Registered after the namespaces' own cleanups, so it runs first: delete every
	// namespace at once, then wait until no pod of any is left.
	b.Cleanup(func() { deleteTenNamespaces(b, clusters) })

	rss := startRSSSampler()
	defer rss.stop()
	rssBefore := rss.now()
	cpu := startCPUWindow()

	// Create all, as close together as the API server answers.
	start := time.Now()
	for _, c := range clusters {
		obj := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "etcd"},
			Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptrInt32(3), Version: tenFrom}}
		c.created = time.Now()
		if err := k8s.Create(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, clusters, 10*time.Minute, "formed in etcd", func(c *tenCluster) error {
		v, err := readEtcd(b, c.ns, 3)
		if err != nil {
			return err
		}
		if v.voters != 3 || v.healthy != 3 || v.learners != 0 || len(v.clusterIDs) != 1 || len(v.ids) != 3 {
			return fmt.Errorf("%d voters, %d healthy, %d learners, cluster IDs %v, started %v", v.voters, v.healthy, v.learners, v.clusterIDs, v.ids)
		}
		c.available = time.Since(c.created)
		c.termAvail = raftTerm(b, c.ns)
		return nil
	})
	allAvailable := time.Since(start)
	forming := cpu.end()
	rssForming := rss.peak()

	// Writers and samplers on every cluster; the change starts once every writer is
	// acknowledged (writes flow before it).
	for _, c := range clusters {
		c.writer = startPacedWriter(b, c.ns, 3, tenWriteEvery)
		c.sampler = startSampler(b, c.ns)
	}
	for _, c := range clusters {
		c.writer.waitAcked(b, 5)
	}

	cpu = startCPUWindow()
	upStart := time.Now()
	for _, c := range clusters {
		if err := setVersion(b, c.ns, tenTo); err != nil {
			b.Fatal(err)
		}
	}
	hc := &http.Client{Timeout: sampleTimeout, Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return dialName(ctx, addr)
	}}}
	defer hc.CloseIdleConnections()
	waitAll(b, clusters, 20*time.Minute, "upgraded in etcd", func(c *tenCluster) error {
		c.observeUpgrade(ctx, b, hc, upStart)
		// soakCluster.settled: 3 healthy voters, no learner, one cluster ID, each on tenTo.
		if err := (&soakCluster{ns: c.ns, version: tenTo}).settled(b, 3); err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if v := etcdClusterVersion(ctx, hc, c.ns, i); v != tenClusterVersion {
				return fmt.Errorf("etcd-%d reports cluster version %q", i, v)
			}
		}
		c.upgraded = time.Since(upStart)
		if c.versionAt == 0 { // raised between observeUpgrade and the checks above
			c.versionAt = c.upgraded
		}
		return nil
	})
	allUpgraded := time.Since(upStart)
	for _, c := range clusters {
		c.writer.waitAcked(b, 5) // writes flow after it
	}
	upgrading := cpu.end()
	rssUpgrading := rss.peak()

	// Idle: the operator has recorded every upgrade (its status is read only to know it is
	// done, not as evidence), then a window without changes.
	for _, c := range clusters {
		waitVersion(b, c.ns, tenTo, 5*time.Minute, nil)
	}
	cpu = startCPUWindow()
	time.Sleep(tenIdleWindow) // a measurement window, not a wait for a condition
	idle := cpu.end()
	rssSettled := rss.now()

	// The table, before the checks that may end the benchmark.
	var avail, upg []float64
	var worstGap time.Duration
	terms, stormed := 0, 0
	b.Logf("%d clusters of 3 members: all formed %s after the first creation, all upgraded %s to %s after the change",
		tenClusters, allAvailable.Round(10*time.Millisecond), tenTo, allUpgraded.Round(10*time.Millisecond))
	b.Logf("%-28s %9s %5s %10s %17s %6s %7s %7s %7s %10s %10s", "namespace", "formed-s", "term", "upgrade-s", "members-on-new-s", "cv-s", "writes", "failed", "gap-ms", "elections", "min-voters")
	for _, c := range clusters {
		avail = append(avail, c.available.Seconds())
		upg = append(upg, c.upgraded.Seconds())
		gap, changes := c.writer.longestGap(), c.writer.termChanges()
		worstGap = max(worstGap, gap)
		terms += changes
		if c.termAvail > 2 || changes > 1 {
			stormed++
		}
		c.writer.mu.Lock()
		acked, failed := len(c.writer.acked), c.writer.failed
		c.writer.mu.Unlock()
		c.sampler.mu.Lock()
		fewest, of := c.sampler.fewest, c.sampler.fewestOf
		c.sampler.mu.Unlock()
		on := slices.Sorted(slices.Values(c.memberOn[:]))
		b.Logf("%-28s %9.2f %5d %10.2f %5.1f/%4.1f/%4.1f %6.1f %7d %7d %7d %10d %7d/%d", c.ns, c.available.Seconds(), c.termAvail, c.upgraded.Seconds(),
			on[0].Seconds(), on[1].Seconds(), on[2].Seconds(), c.versionAt.Seconds(), acked, failed, gap.Milliseconds(), changes, fewest, of)
	}
	b.Logf("formed: term is etcd's raft term then (2 = one election); members-on-new: when each member first served %s (etcd's Status), in order; cv: when etcd first reported cluster version %s; elections: raft term changes the writer saw during the upgrade (1 = the hand-over); min-voters: the fewest healthy voters a sampler saw", tenTo, tenClusterVersion)
	b.Logf("operator CPU (cores, utime+stime over the window): forming %.3f over %s, upgrading %.3f over %s, idle %.3f over %s",
		forming.operatorCores(), forming.wall.Round(time.Second), upgrading.operatorCores(), upgrading.wall.Round(time.Second), idle.operatorCores(), idle.wall.Round(time.Second))
	b.Logf("machine CPU busy (of %d cores): forming %.0f %%, upgrading %.0f %%, idle %.0f %%", forming.cores, 100*forming.machineBusy(), 100*upgrading.machineBusy(), 100*idle.machineBusy())
	b.Logf("operator RSS: before %.1f MiB, peak while forming %.1f MiB, peak while upgrading %.1f MiB, settled %.1f MiB",
		inMiB(rssBefore), inMiB(rssForming), inMiB(rssUpgrading), inMiB(rssSettled))
	if stormed > 0 {
		b.Logf("ELECTIONS: %d of %d clusters had more than one election while forming or more than the hand-over while upgrading", stormed, tenClusters)
	}

	b.ReportMetric(allAvailable.Seconds(), "all-available-s")
	b.ReportMetric(slices.Max(avail), "max-available-s")
	b.ReportMetric(median(avail), "median-available-s")
	b.ReportMetric(allUpgraded.Seconds(), "all-upgraded-s")
	b.ReportMetric(slices.Max(upg), "max-upgrade-s")
	b.ReportMetric(median(upg), "median-upgrade-s")
	b.ReportMetric(float64(worstGap.Milliseconds()), "ms-longest-write-gap")
	b.ReportMetric(float64(terms)/tenClusters, "elections-per-upgrade")
	b.ReportMetric(forming.operatorCores(), "op-cores-forming")
	b.ReportMetric(upgrading.operatorCores(), "op-cores-upgrading")
	b.ReportMetric(idle.operatorCores(), "op-cores-idle")
	b.ReportMetric(inMiB(max(rssForming, rssUpgrading)), "op-MiB-peak-rss")
	b.ReportMetric(inMiB(rssSettled), "op-MiB-settled-rss")
	b.ReportMetric(0, "ns/op") // one iteration is the whole scenario, not a figure of its own

	// The checks: no quorum lost, no second learner, one cluster ID (read from etcd by the
	// samplers), and every acknowledged write readable.
	for _, c := range clusters {
		c.sampler.finish(b)
		c.writer.finish(b, c.ns, 3)
	}
}

// observeUpgrade records, from etcd, when each member of c first served tenTo and when the
// cluster version first reached tenClusterVersion, as offsets from since.
func (c *tenCluster) observeUpgrade(ctx context.Context, t testing.TB, hc *http.Client, since time.Time) {
	cli := etcdClient(t, c.ns, 3)
	defer cli.Close()
	for i := range c.memberOn {
		if c.memberOn[i] == 0 {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			st, err := cli.Status(sctx, endpoint(c.ns, i))
			cancel()
			if err == nil && st.Version == tenTo {
				c.memberOn[i] = time.Since(since)
			}
		}
		if c.versionAt == 0 && etcdClusterVersion(ctx, hc, c.ns, i) == tenClusterVersion {
			c.versionAt = time.Since(since)
		}
	}
}

// waitAll polls every cluster every tenPoll, each in its own goroutine, until done returns nil
// for it (done records what it measured then) or timeout passes; then it fails the benchmark
// naming every cluster that did not get there and why.
func waitAll(b *testing.B, clusters []*tenCluster, timeout time.Duration, what string, done func(*tenCluster) error) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Go(func() {
			for {
				if errs[i] = done(c); errs[i] == nil {
					return
				}
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(tenPoll) // the poll interval; the loop ends at its deadline
			}
		})
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", clusters[i].ns, err))
		}
	}
	if len(failed) > 0 {
		b.Fatalf("after %s, %d of %d clusters not %s:\n%s", timeout, len(failed), len(clusters), what, strings.Join(failed, "\n"))
	}
}

// raftTerm is the highest raft term the members of the cluster in ns report (0 when none
// answers).
func raftTerm(t testing.TB, ns string) uint64 {
	cli := etcdClient(t, ns, 3)
	defer cli.Close()
	var term uint64
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, endpoint(ns, i))
		cancel()
		if err == nil {
			term = max(term, st.RaftTerm)
		}
	}
	return term
}

// etcdClusterVersion is the cluster version the member at ordinal in ns reports on /version
// ("" when it does not answer).
func etcdClusterVersion(ctx context.Context, hc *http.Client, ns string, ordinal int) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(ns, ordinal)+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Cluster
}

// median is the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// deleteTenNamespaces deletes the benchmark's namespaces at once and waits until none of them
// has a pod left.
func deleteTenNamespaces(b *testing.B, clusters []*tenCluster) {
	ctx := context.Background()
	for _, c := range clusters {
		if err := k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}); err != nil && !apierrors.IsNotFound(err) {
			b.Errorf("failed to delete namespace %s: %v", c.ns, err)
		}
	}
	eventually(b, 5*time.Minute, "the pods of the benchmark's namespaces to be gone", func() error {
		left := 0
		for _, c := range clusters {
			pods := &corev1.PodList{}
			if err := k8s.List(ctx, pods, client.InNamespace(c.ns)); err != nil {
				return err
			}
			left += len(pods.Items)
		}
		if left > 0 {
			return fmt.Errorf("%d pods left", left)
		}
		return nil
	})
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat and of /proc/stat:
// 100 on every Linux architecture.
const clockTicks = 100

// cpuWindow is the CPU time the operator's processes and the whole machine used between its
// start and its end.
type cpuWindow struct {
	began      time.Time
	opTicks    map[int]uint64 // per operator process at the start
	busy, all  uint64         // the machine's busy and total ticks at the start (/proc/stat)
	wall       time.Duration
	opUsed     uint64 // operator ticks over the window (processes that started in it count whole)
	busyUsed   uint64
	allUsed    uint64
	cores      int
	operatorOK bool // an operator process was found at the end
}

func startCPUWindow() *cpuWindow {
	w := &cpuWindow{began: time.Now(), opTicks: map[int]uint64{}, cores: numCPU()}
	for _, pid := range operatorPIDs() {
		if t, ok := processTicks(pid); ok {
			w.opTicks[pid] = t
		}
	}
	w.busy, w.all = machineTicks()
	return w
}

// end closes the window. A process that ended within the window loses what it used since
// the start (the benchmark injects no faults: the operator is not expected to restart).
func (w *cpuWindow) end() *cpuWindow {
	w.wall = time.Since(w.began)
	for _, pid := range operatorPIDs() {
		t, ok := processTicks(pid)
		if !ok {
			continue
		}
		w.operatorOK = true
		w.opUsed += t - min(t, w.opTicks[pid])
	}
	busy, all := machineTicks()
	w.busyUsed, w.allUsed = busy-w.busy, all-w.all
	return w
}

// operatorCores is the operator's CPU time over the window as a share of one core.
func (w *cpuWindow) operatorCores() float64 {
	if !w.operatorOK || w.wall <= 0 {
		return 0
	}
	return float64(w.opUsed) / clockTicks / w.wall.Seconds()
}

// machineBusy is the share of all the machine's CPU time that was not idle over the window.
func (w *cpuWindow) machineBusy() float64 {
	if w.allUsed == 0 {
		return 0
	}
	return float64(w.busyUsed) / float64(w.allUsed)
}

// operatorPIDs lists the operator's processes on the local cluster:
// `etcd-pilot manager --leader-elect ...` run by a process node under dir.
func operatorPIDs() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 2 || args[1] != "manager" || !bytes.Contains(cmd, []byte("--leader-elect")) {
			continue
		}
		mounts, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if !bytes.Contains(cmd, []byte(dir)) && !bytes.Contains(mounts, []byte(dir)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// processTicks is utime+stime of pid, from /proc/<pid>/stat (fields 14 and 15; the command
// name in field 2 may hold spaces, so fields are counted after its closing parenthesis).
func processTicks(pid int) (uint64, bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	// After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + s, true
}

// machineTicks is the machine's busy and total CPU ticks so far (the first line of
// /proc/stat; idle and iowait are not busy).
func machineTicks() (busy, all uint64) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || i >= 8 { // guest and guest_nice are already in user and nice
			continue
		}
		all += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, all
}

// numCPU is the number of CPUs /proc/stat lists.
func numCPU() int {
	raw, _ := os.ReadFile("/proc/stat")
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/history"
	"github.com/etcd-pilot/etcd-pilot/internal/history/etcdkv"
)

var (
	soakDuration = flag.Duration("soak.duration", 3*time.Minute, "how long the chaos soak injects faults (make soak: SOAK_DURATION)")
	soakSeed     = flag.Int64("soak.seed", 0, "the chaos soak's seed (0: from the clock; printed, and the same seed replays the same fault sequence)")
	soakClusters = flag.Int("soak.clusters", 3, "EtcdClusters the chaos soak runs at once (3 members each)")
	soakClients  = flag.Int("soak.clients", 3, "clients per cluster in the chaos soak (one op in flight each)")
	soakReport   = flag.String("soak.report", "", "folder for a failed soak's report (default bin/soak under the repository)")
)

const (
	soakMembers      = 3
	soakKeys         = 10                    // keys per cluster: the checker stays fast
	soakOpTime       = 2 * time.Second       // per-op deadline; a timed-out op is unknown
	soakOpGap        = 20 * time.Millisecond // pause between a client's ops: leaves CPU to etcd and the operator
	soakSettle       = 4 * time.Minute       // deadline for a cluster to settle after a fault
	soakPrefix       = "soak/"
	soakLongSoak     = 20 * time.Minute // from this duration on, the soak upgrades 3.5 -> 3.6 -> 3.7
	soakReplaceAfter = 30 * time.Second
)

// soakVersions are the versions a long soak walks through, one upgrade fault at a time.
var soakVersions = []string{"3.5.35", "3.6.16", "3.7.3"}

// TestChaosSoak runs several 3-member EtcdClusters at once, each with concurrent clients
// (puts, linearizable gets, transactions, deletes) and a watch, all recorded with
// internal/history, while a fault injector driven by a seed takes things down one fault at a
// time: member process kills, node stops, operator kills (also between membership steps), an
// operator leader hand-over, a wiped data directory, scale up and down, a paused cluster, a
// stalled member process (SIGSTOP: a disk that stops answering), and on long soaks upgrades.
// Safety is read from etcd throughout (a sampler per cluster: quorum unless the injector took
// the members, at most one learner, one cluster ID); after each fault every cluster must
// settle as etcd reports it before the next. At the end every member's HashKV agrees, every
// history is linearizable and every watch saw every acknowledged write in order.
func TestChaosSoak(t *testing.T) {
	seed := *soakSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("chaos soak: seed %d (replay with -soak.seed=%d), duration %s, %d clusters", seed, seed, *soakDuration, *soakClusters)
	s := &soak{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), start: time.Now(), faults: map[string]int{}}

	version := ""
	if *soakDuration >= soakLongSoak {
		version = soakVersions[0]
	}
	for i := 0; i < *soakClusters; i++ {
		s.clusters = append(s.clusters, &soakCluster{id: i, ns: namespace(t), version: version, rec: history.NewRecorder()})
	}
	// Registered after the namespaces' cleanups, so it runs before they are deleted; a fault
	// cut short leaves no node stopped and no operator crashing on purpose.
	t.Cleanup(s.reportOnFailure)
	t.Cleanup(s.undo)
	// Create all, then wait for all: they form in parallel.
	for _, c := range s.clusters {
		// A member lost for 30 s is replaced (the default is 5 minutes, longer than a fault
		// may take to settle): a wiped member, which cannot start again, is replaced within the
		// soak's settle deadline, while a stall or a node stop (at most 8 s) stays below it.
		spec := v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptrInt32(soakMembers), Version: c.version,
			Membership: v1alpha1.MembershipSpec{ReplaceAfter: &metav1.Duration{Duration: soakReplaceAfter}}}
		if err := k8s.Create(context.Background(), &v1alpha1.EtcdCluster{ObjectMeta: objectMeta(c.ns), Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range s.clusters {
		if err := s.settle(c, soakMembers); err != nil {
			t.Fatalf("cluster %s never formed: %v", c.ns, err)
		}
		c.sampler = startSampler(t, c.ns)
		c.startClients(t, seed)
	}
	s.note(-1, "start", "every cluster formed; clients and watches running")

	deadline := s.start.Add(*soakDuration)
	for time.Now().Before(deadline) {
		s.inject()
		for _, c := range s.clusters {
			if err := s.settle(c, soakMembers); err != nil {
				s.fail(c, "cluster did not settle after the fault: %v", err)
			}
			if p := c.sampler.firstProblem(); p != "" {
				s.fail(c, "invariant broken (read from etcd): %s", p)
			}
		}
		// Spacing from the seed: the clients run on a settled cluster for a moment.
		gap := time.Duration(500+s.rng.Intn(1500)) * time.Millisecond
		time.Sleep(gap) // the seeded spacing between faults, part of the replayed sequence
	}
	s.note(-1, "end", "faults stopped")
	s.finish()
}

func objectMeta(ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: "etcd"}
}

// soak is one run of the chaos soak.
type soak struct {
	t        *testing.T
	seed     int64
	rng      *rand.Rand // draws the faults and their targets, and nothing else
	start    time.Time
	clusters []*soakCluster

	stoppedNode   string // a node the injector stopped and has not started again
	operatorFault bool   // the operator runs with ETCD_PILOT_FAULT_AFTER

	mu       sync.Mutex
	timeline []string
	faults   map[string]int
	first    string // the first violated invariant
}

// soakCluster is one EtcdCluster of the soak with its clients.
type soakCluster struct {
	id      int
	ns      string
	version string
	rec     *history.Recorder
	sampler *sampler
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*clientv3.Client
	watch   *etcdkv.Watcher
	wcli    *clientv3.Client
	checked history.Result
	watches []history.WatchRecord
	ops     []history.Op
}

// note adds a line to the fault timeline (cluster -1: every cluster).
func (s *soak) note(cluster int, kind, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	who := "all"
	if cluster >= 0 {
		who = s.clusters[cluster].ns
	}
	line := fmt.Sprintf("%8.1fs %-28s %-16s %s", time.Since(s.start).Seconds(), who, kind, what)
	s.timeline = append(s.timeline, line)
	s.t.Log("soak: " + line)
}

// fail records the first violated invariant and ends the test (the report is written by the
// cleanup).
func (s *soak) fail(c *soakCluster, format string, args ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if c != nil {
		msg = c.ns + ": " + msg
	}
	s.mu.Lock()
	if s.first == "" {
		s.first = fmt.Sprintf("%.1fs %s", time.Since(s.start).Seconds(), msg)
	}
	s.mu.Unlock()
	s.t.Fatal(msg)
}

// settle waits until etcd reports n healthy voters, no learner, one cluster ID, every voter
// on the cluster's version (when set), within soakSettle.
func (s *soak) settle(c *soakCluster, n int) error {
	end := time.Now().Add(soakSettle)
	var last error
	for time.Now().Before(end) {
		if last = c.settled(s.t, n); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // poll interval; the loop ends at its deadline
	}
	return last
}

func (c *soakCluster) settled(t testing.TB, n int) error {
	v, err := readEtcd(t, c.ns, n)
	if err != nil {
		return err
	}
	if v.voters != n || v.healthy != n || v.learners != 0 || len(v.clusterIDs) != 1 || len(v.ids) != n {
		return fmt.Errorf("%d voters, %d healthy, %d learners, cluster IDs %v, started %v", v.voters, v.healthy, v.learners, v.clusterIDs, v.ids)
	}
	if c.version == "" {
		return nil
	}
	cli := etcdClient(t, c.ns, n)
	defer cli.Close()
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, endpoint(c.ns, i))
		cancel()
		if err != nil {
			return err
		}
		if st.Version != c.version {
			return fmt.Errorf("etcd-%d runs %s, not %s", i, st.Version, c.version)
		}
	}
	return nil
}

// startClients starts the cluster's clients and its watch.
func (c *soakCluster) startClients(t *testing.T, seed int64) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wcli = etcdClient(t, c.ns, soakMembers)
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := c.wcli.Get(gctx, soakPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	gcancel()
	if err != nil {
		t.Fatalf("%s: failed to read the revision to watch from: %v", c.ns, err)
	}
	// The watch outlives the clients: stopClients waits until it has delivered their last
	// writes, and its Stop ends it.
	c.watch = etcdkv.Watch(context.Background(), c.wcli.Watcher, c.id, soakPrefix, resp.Header.Revision)
	for i := 0; i < *soakClients; i++ {
		cli := etcdClient(t, c.ns, soakMembers)
		c.clients = append(c.clients, cli)
		rng := rand.New(rand.NewSource(seed*1000 + int64(c.id*100+i)))
		c.wg.Go(func() {
			etcdkv.RunMixed(ctx, cli, c.rec, i, rng, etcdkv.Mix{Prefix: soakPrefix, Keys: soakKeys, OpTime: soakOpTime, Gap: soakOpGap, ErrorGap: 100 * time.Millisecond})
		})
	}
}

// stopClients stops the clients, waits until the watch has delivered everything up to the
// cluster's current revision, and keeps the histories.
func (c *soakCluster) stopClients(t *testing.T) error {
	c.cancel()
	c.wg.Wait()
	for _, cli := range c.clients {
		cli.Close()
	}
	defer c.wcli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.wcli.Get(ctx, soakPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	c.ops = c.rec.Ops()
	if err != nil {
		c.watches = []history.WatchRecord{c.watch.Stop()}
		return fmt.Errorf("failed to read the final revision: %w", err)
	}
	werr := c.watch.WaitFor(ctx, resp.Header.Revision)
	c.watches = []history.WatchRecord{c.watch.Stop()}
	return werr
}

// finish settles every cluster, stops the clients, checks HashKV, the histories and the
// watches.
func (s *soak) finish() {
	t := s.t
	for _, c := range s.clusters {
		if err := s.settle(c, soakMembers); err != nil {
			s.fail(c, "cluster did not settle after the faults stopped: %v", err)
		}
	}
	for _, c := range s.clusters {
		if err := c.stopClients(t); err != nil {
			s.fail(c, "watch: %v", err)
		}
		r := c.sampler.finish(t)
		if p := c.sampler.firstProblem(); p != "" {
			s.fail(c, "invariant broken (read from etcd): %s", p)
		}
		cli := etcdClient(t, c.ns, soakMembers)
		if err := hashesEqual(cli, c.ns, soakMembers); err != nil {
			cli.Close()
			s.fail(c, "%v", err)
		}
		cli.Close()
		t.Logf("%s: %d sampler checks of etcd, fewest healthy voters %d of %d, %d single-sample dips", c.ns, r.Samples, r.FewestHealthyVoters, r.VotersThen, r.Dips)
	}
	total, checkTime := 0, time.Duration(0)
	for _, c := range s.clusters {
		start := time.Now()
		c.checked = history.Check(c.ops, 5*time.Minute)
		took := time.Since(start)
		checkTime += took
		total += c.checked.Ops
		t.Logf("%s: %d ops on %d keys checked in %s (%d unknown: %d seen to take effect, %d unseen), linearizable %v, timed out %v",
			c.ns, c.checked.Ops, c.checked.Keys, took.Round(time.Millisecond), c.checked.Unknown, c.checked.Resolved, c.checked.Unseen, c.checked.Linearizable, c.checked.TimedOut)
		if !c.checked.Linearizable {
			s.fail(c, "history not linearizable (timed out %v): %s", c.checked.TimedOut, c.checked.Detail)
		}
		if err := history.CheckWatches(c.watches, c.ops); err != nil {
			s.fail(c, "watch history: %v", err)
		}
		events := 0
		for _, w := range c.watches {
			events += len(w.Events)
		}
		t.Logf("%s: watch delivered %d events, checked against the acknowledged writes", c.ns, events)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kinds := make([]string, 0, len(s.faults))
	n := 0
	for k, v := range s.faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
		n += v
	}
	sort.Strings(kinds)
	t.Logf("chaos soak seed %d: %d faults in %s (%s); %d ops checked linearizable in %s; every member's HashKV equal",
		s.seed, n, time.Since(s.start).Round(time.Second), strings.Join(kinds, " "), total, checkTime.Round(time.Millisecond))
}

// hashesEqual reads the current revision and every member's HashKV at it.
func hashesEqual(cli *clientv3.Client, ns string, n int) error {
	var last error
	for try := 0; try < 20; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Get(ctx, soakPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			cancel()
			last = err
			time.Sleep(500 * time.Millisecond) // retry interval; the loop ends at its deadline
			continue
		}
		rev := resp.Header.Revision
		hashes := map[uint32][]string{}
		for i := 0; i < n && err == nil; i++ {
			var h *clientv3.HashKVResponse
			if h, err = cli.HashKV(ctx, endpoint(ns, i), rev); err == nil {
				hashes[h.Hash] = append(hashes[h.Hash], fmt.Sprintf("etcd-%d", i))
			}
		}
		cancel()
		if err != nil {
			last = fmt.Errorf("HashKV at revision %d: %w", rev, err)
			time.Sleep(500 * time.Millisecond) // retry interval; the loop ends at its deadline
			continue
		}
		if len(hashes) != 1 {
			return fmt.Errorf("members' HashKV differ at revision %d: %v", rev, hashes)
		}
		return nil
	}
	return last
}

// undo starts a node the injector left stopped and restarts an operator it left with a
// fault point, when the soak ended in the middle of a fault.
func (s *soak) undo() {
	if s.stoppedNode != "" {
		_, _ = local(s.t, "node", "start", s.stoppedNode)
	}
	if s.operatorFault {
		restartOperator(s.t, "")
	}
}

// reportOnFailure writes the report of a failed soak: the seed, the fault timeline, the first
// violated invariant, the histories, the events and the operator's logs.
func (s *soak) reportOnFailure() {
	if !s.t.Failed() {
		return
	}
	folder := *soakReport
	if folder == "" {
		folder = filepath.Join(root, "bin", "soak")
	}
	folder = filepath.Join(folder, fmt.Sprintf("seed-%d-%s", s.seed, s.start.UTC().Format("20060102T150405")))
	if err := os.MkdirAll(folder, 0o755); err != nil {
		s.t.Logf("failed to create the soak report folder: %v", err)
		return
	}
	var b strings.Builder
	s.mu.Lock()
	fmt.Fprintf(&b, "chaos soak failed\nseed: %d (replay: go test ./test/e2e -run TestChaosSoak -soak.seed=%d -soak.duration=%s)\nstarted: %s\nfirst violated invariant: %s\n\nfault timeline:\n%s\n",
		s.seed, s.seed, *soakDuration, s.start.UTC().Format(time.RFC3339), s.first, strings.Join(s.timeline, "\n"))
	s.mu.Unlock()
	for _, c := range s.clusters {
		if p := c.sampler; p != nil {
			fmt.Fprintf(&b, "\n%s sampler's first problem: %s\n", c.ns, p.firstProblem())
		}
		ops := c.ops
		if ops == nil {
			ops = c.rec.Ops()
		}
		path := filepath.Join(folder, c.ns+"-history.json")
		if err := history.Save(path, ops, c.watches); err == nil {
			fmt.Fprintf(&b, "%s history (%d ops): %s\n", c.ns, len(ops), path)
		}
	}
	b.WriteString("\nevents:\n")
	namespaces := []string{operatorNamespace}
	for _, c := range s.clusters {
		namespaces = append(namespaces, c.ns)
	}
	for _, ns := range namespaces {
		evs := &corev1.EventList{}
		if err := k8s.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", ns, err)
			continue
		}
		at := func(e corev1.Event) time.Time {
			if e.LastTimestamp.IsZero() {
				return e.EventTime.Time // events.k8s.io writers set only this
			}
			return e.LastTimestamp.Time
		}
		sort.SliceStable(evs.Items, func(i, j int) bool { return at(evs.Items[i]).Before(at(evs.Items[j])) })
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "%s %s %s/%s %s %s: %s\n", at(e).UTC().Format("15:04:05"), ns, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
	logs := operatorLogs()
	if len(logs) > 200_000 {
		logs = logs[len(logs)-200_000:]
	}
	fmt.Fprintf(&b, "\nthe operator's logs (tail):\n%s\n", logs)
	path := filepath.Join(folder, "report.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		s.t.Logf("failed to write the soak report: %v", err)
		return
	}
	s.t.Logf("chaos soak report: %s", path)
}

// operatorLeader is the operator pod that holds the leader election Lease: the one whose log
// last says it acquired the Lease (the Lease's holder names the host, which every process
// pod of the local cluster shares, so it cannot tell the pods apart). A container restarted
// since logs an attempt to acquire after it. It also counts the acquisitions the logs of the
// current pods record (a pod's log survives its container's restarts).
func operatorLeader() (string, int, error) {
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(operatorNamespace), operatorLabels); err != nil {
		return "", 0, err
	}
	var leaders []string
	acquisitions := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "nodes", p.Spec.NodeName, "logs", operatorNamespace+"_"+p.Name+"_manager.log"))
		if err != nil {
			continue
		}
		acquisitions += strings.Count(string(b), "Successfully acquired lease")
		acquired := strings.LastIndex(string(b), "Successfully acquired lease")
		if acquired >= 0 && acquired > strings.LastIndex(string(b), "Attempting to acquire leader lease") {
			leaders = append(leaders, p.Name)
		}
	}
	if len(leaders) != 1 {
		return "", acquisitions, fmt.Errorf("the operator's logs name %d leaders: %v", len(leaders), leaders)
	}
	return leaders[0], acquisitions, nil
}

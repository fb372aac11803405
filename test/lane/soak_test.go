package lane

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-pilot/etcd-pilot/internal/history"
	"github.com/etcd-pilot/etcd-pilot/internal/history/etcdkv"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

var (
	laneSoakDuration = flag.Duration("lane.soak.duration", 2*time.Minute, "how long TestNetworkChaosSoak injects faults")
	laneSoakSeed     = flag.Int64("lane.soak.seed", 0, "TestNetworkChaosSoak's seed (0: from the clock; printed, and the same seed replays the same fault sequence)")
)

const (
	laneSoakPrefix  = "/lane/soak/"
	laneSoakKeys    = 10
	laneSoakClients = 3
	laneSoakOpTime  = 2 * time.Second // per-op deadline; a timed-out op is unknown
	laneSoakSettle  = 3 * time.Minute // deadline for the cluster to settle after a fault
)

// TestNetworkChaosSoak is the chaos soak of the process nodes with the faults only real nodes
// can make, drawn from a seed: a node partitioned from the others and the API server, a node
// dropping what it receives, a node's traffic delayed (where the kernel has netem), and a node
// stopped and started again (its kubelet, containerd and containers killed at once), each held
// a few seconds, on the leader's node half of the time. Concurrent clients (puts, linearizable
// gets, transactions, deletes) and a watch are recorded with internal/history. Read from etcd
// throughout: one cluster ID, the same three members (none is lost: nothing may be replaced),
// never a learner; after each fault every member answers again before the next. At the end
// every member's HashKV agrees, the history is linearizable and the watch saw every
// acknowledged write in order.
func TestNetworkChaosSoak(t *testing.T) {
	seed := *laneSoakSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	t.Logf("lane chaos soak: seed %d (replay with -lane.soak.seed=%d), duration %s", seed, seed, *laneSoakDuration)
	rng := rand.New(rand.NewSource(seed))
	const ns, name = "soak", "etcd"
	// A member behind a fault is not lost: nothing may be replaced during the soak.
	createLaneCluster(t, ns, name, 3, 30*time.Minute, nil)
	eps := memberEndpoints(ns, name, 3)
	cli := etcdClient(t, ns, name, name+"-client-app", eps, false)
	clusterID, ids := membersOf(t, cli)

	// Clients and the watch.
	rec := history.NewRecorder()
	wcli := etcdClient(t, ns, name, name+"-client-app", eps, false)
	resp, err := wcli.Get(tctx(t), laneSoakPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	watch := etcdkv.Watch(context.Background(), wcli.Watcher, 0, laneSoakPrefix, resp.Header.Revision)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range laneSoakClients {
		ccli := etcdClient(t, ns, name, name+"-client-app", eps, false)
		crng := rand.New(rand.NewSource(seed*1000 + int64(i)))
		wg.Go(func() {
			etcdkv.RunMixed(ctx, ccli, rec, i, crng, etcdkv.Mix{Prefix: laneSoakPrefix, Keys: laneSoakKeys, OpTime: laneSoakOpTime, Gap: 20 * time.Millisecond, ErrorGap: 100 * time.Millisecond})
		})
	}
	stopClients := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stopClients)

	// The safety sampler, read from etcd.
	smp := &soakSampler{cli: cli, eps: eps, clusterID: clusterID, ids: ids}
	stopSampler := smp.start()
	t.Cleanup(stopSampler)

	// The faults the kernel can make.
	kinds := []string{realnode.FaultPartition, realnode.FaultInbound, "node-stop"}
	_, probe := nodeOfMember(t, ns, name, leaderOf(t, cli, eps))
	err = netFault(t, realnode.FaultLatency, probe, "--delay", "20ms")
	_ = netFault(t, realnode.FaultHeal, probe)
	switch {
	case err == nil:
		kinds = append(kinds, realnode.FaultLatency)
	case strings.Contains(err.Error(), "no netem"):
		t.Logf("latency is not drawn: %v", err)
	default:
		t.Fatal(err)
	}

	start := time.Now()
	var timeline []string
	note := func(format string, args ...any) {
		line := fmt.Sprintf("%7.1fs %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		timeline = append(timeline, line)
		t.Log("soak: " + line)
	}
	counts := map[string]int{}
	for time.Since(start) < *laneSoakDuration {
		kind := kinds[rng.Intn(len(kinds))]
		// The draws do not depend on what etcd answers, so a seed replays the same sequence.
		anyMember, other := rng.Intn(2) == 1, sortedIDs(ids)[rng.Intn(len(ids))]
		target := leaderOf(t, cli, eps)
		if anyMember || target == 0 {
			target = other
		}
		member, node := nodeOfMember(t, ns, name, target)
		hold := time.Duration(3000+rng.Intn(7000)) * time.Millisecond
		note("%s on %s (member %s) for %s", kind, node, member, hold)
		counts[kind]++
		switch kind {
		case "node-stop":
			if out, err := exec.Command(localBin, "node", "stop", node, "--dir", laneDir).CombinedOutput(); err != nil {
				t.Fatalf("node stop %s: %v: %s", node, err, out)
			}
			time.Sleep(hold) // the fault is held for its drawn time
			if out, err := exec.Command(localBin, "node", "start", node, "--dir", laneDir).CombinedOutput(); err != nil {
				t.Fatalf("node start %s: %v: %s", node, err, out)
			}
		default:
			var extra []string
			if kind == realnode.FaultLatency {
				extra = []string{"--delay", fmt.Sprintf("%dms", 20+rng.Intn(80))}
			}
			if err := netFault(t, kind, node, extra...); err != nil {
				t.Fatal(err)
			}
			time.Sleep(hold) // the fault is held for its drawn time
			if err := netFault(t, realnode.FaultHeal, node); err != nil {
				t.Fatal(err)
			}
		}
		settleStart := time.Now()
		if err := soakSettled(cli, eps, clusterID, ids, laneSoakSettle); err != nil {
			t.Fatalf("the cluster did not settle within %s after %s on %s (seed %d): %v\n%s", laneSoakSettle, kind, node, seed, err, strings.Join(timeline, "\n"))
		}
		note("settled in %.1fs", time.Since(settleStart).Seconds())
		if p := smp.problem(); p != "" {
			t.Fatalf("invariant broken (read from etcd, seed %d): %s\n%s", seed, p, strings.Join(timeline, "\n"))
		}
		// The seeded spacing between faults: the clients run on a settled cluster a moment.
		time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
	}

	stopClients()
	stopSampler()
	if p := smp.problem(); p != "" {
		t.Fatalf("invariant broken (read from etcd, seed %d): %s", seed, p)
	}
	resp, err = wcli.Get(tctx(t), laneSoakPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	werr := watch.WaitFor(tctx(t), resp.Header.Revision)
	watched := watch.Stop()
	if werr != nil {
		t.Fatalf("watch: %v", werr)
	}
	if err := soakHashesEqual(cli, eps, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	ops := rec.Ops()
	checkStart := time.Now()
	res := history.Check(ops, 5*time.Minute)
	if !res.Linearizable {
		t.Fatalf("history not linearizable (timed out %v, seed %d): %s", res.TimedOut, seed, res.Detail)
	}
	if err := history.CheckWatches([]history.WatchRecord{watched}, ops); err != nil {
		t.Fatalf("watch history (seed %d): %v", seed, err)
	}
	var kindsRun []string
	for k, n := range counts {
		kindsRun = append(kindsRun, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kindsRun)
	t.Logf("lane chaos soak seed %d: %s of faults (%s); %d ops on %d keys linearizable (%d unknown), checked in %s; %d watch events; %d samples of etcd, none unsafe; every member's HashKV equal at revision %d",
		seed, time.Since(start).Round(time.Second), strings.Join(kindsRun, " "), res.Ops, res.Keys, res.Unknown,
		time.Since(checkStart).Round(time.Millisecond), len(watched.Events), smp.samples(), resp.Header.Revision)
}

func sortedIDs(ids map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// soakSampler reads etcd every 500 ms: every member that answers belongs to the cluster and is
// one of its members, and the member list (when a quorum serves it) holds exactly those
// members, none a learner.
type soakSampler struct {
	cli       *clientv3.Client
	eps       []string
	clusterID uint64
	ids       map[uint64]bool

	mu    sync.Mutex
	n     int
	first string
}

func (s *soakSampler) start() func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			s.sample()
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond): // the sampling interval
			}
		}
	}()
	return sync.OnceFunc(func() { close(stop); <-done })
}

func (s *soakSampler) sample() {
	var problems []string
	for _, ep := range s.eps {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := s.cli.Status(ctx, ep)
		cancel()
		if err == nil && (st.Header.ClusterId != s.clusterID || !s.ids[st.Header.MemberId]) {
			problems = append(problems, fmt.Sprintf("%s answers as member %x of cluster %x", ep, st.Header.MemberId, st.Header.ClusterId))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	ml, err := s.cli.MemberList(ctx)
	cancel()
	if err == nil {
		if len(ml.Members) != len(s.ids) {
			problems = append(problems, fmt.Sprintf("etcd lists %d members, want the %d it started with", len(ml.Members), len(s.ids)))
		}
		for _, m := range ml.Members {
			if !s.ids[m.ID] || m.IsLearner {
				problems = append(problems, fmt.Sprintf("member %x (learner %v) is new", m.ID, m.IsLearner))
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if len(problems) > 0 && s.first == "" {
		s.first = fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), strings.Join(problems, "; "))
	}
}

func (s *soakSampler) problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

func (s *soakSampler) samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// soakSettled waits until every member answers from its own store with the cluster's ID, a
// leader and raft indexes within 100 of each other, and the member list is the one the
// cluster started with; it returns the last reason otherwise.
func soakSettled(cli *clientv3.Client, eps []string, clusterID uint64, ids map[uint64]bool, within time.Duration) error {
	end := time.Now().Add(within)
	var last error
	for time.Now().Before(end) {
		if last = settledOnce(cli, eps, clusterID, ids); last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // poll interval; the loop ends at its deadline
	}
	return last
}

func settledOnce(cli *clientv3.Client, eps []string, clusterID uint64, ids map[uint64]bool) error {
	var lo, hi uint64
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %v", ep, err)
		}
		if st.Header.ClusterId != clusterID || !ids[st.Header.MemberId] || st.Leader == 0 {
			return fmt.Errorf("%s: member %x of cluster %x, leader %x", ep, st.Header.MemberId, st.Header.ClusterId, st.Leader)
		}
		if i == 0 || st.RaftIndex < lo {
			lo = st.RaftIndex
		}
		hi = max(hi, st.RaftIndex)
	}
	if hi-lo > 100 {
		return fmt.Errorf("raft indexes %d..%d", lo, hi)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	ml, err := cli.MemberList(ctx)
	cancel()
	if err != nil {
		return err
	}
	if len(ml.Members) != len(ids) {
		return fmt.Errorf("%d members", len(ml.Members))
	}
	for _, m := range ml.Members {
		if !ids[m.ID] || m.IsLearner {
			return fmt.Errorf("member %x (learner %v) is new", m.ID, m.IsLearner)
		}
	}
	return nil
}

// soakHashesEqual reads every member's HashKV at rev.
func soakHashesEqual(cli *clientv3.Client, eps []string, rev int64) error {
	hashes := map[uint32][]string{}
	for _, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := cli.HashKV(ctx, ep, rev)
		cancel()
		if err != nil {
			return fmt.Errorf("HashKV of %s at revision %d: %w", ep, rev, err)
		}
		hashes[h.Hash] = append(hashes[h.Hash], ep)
	}
	if len(hashes) != 1 {
		return fmt.Errorf("members' HashKV differ at revision %d: %v", rev, hashes)
	}
	return nil
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// timelineEvery is the timeline's sampling period: each sample lists the pods, reads the
// EtcdCluster, and asks each member's pod for etcd's Status (over a connection kept while
// it answers), the leader for the member list and its /version.
const timelineEvery = 100 * time.Millisecond

// timeline records, with offsets from its start, when what a benchmark waits for happened:
// pods created, scheduled, started, ready; each member serving (etcd's own Status, with its
// version), catching up with the leader; the leader and its term; members added, started,
// promoted and removed (etcd's member list); the cluster version (etcd's /version); the
// StatefulSet's creation and the EtcdCluster's conditions. It samples every timelineEvery,
// so an offset is late by up to that much plus the sample's own time. Only plaintext
// clusters are sampled (the benchmarks that print timelines use no TLS).
type timeline struct {
	ns     string
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu     sync.Mutex
	origin time.Time // offsets are from it: the start, or what setOrigin set
	events []timelineEvent
	first  map[string]time.Time

	// sampler state, touched by the sampling goroutine only
	conns   map[string]*grpc.ClientConn
	pods    map[string]podSeen
	serving map[string]string // pod name -> version it serves, "" when not answering
	caught  map[string]bool
	members map[uint64]memberSeen
	leader  uint64
	term    uint64
	version string
	conds   map[string]string
	// opMembers is status.members as last seen (the operator's view, to tell when a pass
	// saw what etcd already showed)
	opMembers string
	sts       bool
	allServe  bool
	voters    int
	http      *http.Client
}

type timelineEvent struct {
	at   time.Time
	what string
}

type podSeen struct {
	uid                      types.UID
	scheduled, started, read bool
	probed                   bool // the container's started flag (its startup probe passed)
	terminating              bool
}

type memberSeen struct {
	name    string
	learner bool
}

// startTimeline starts a timeline of the cluster "etcd" in ns, with offsets from now.
func startTimeline(t testing.TB, ns string) *timeline {
	ctx, cancel := context.WithCancel(context.Background())
	tl := &timeline{ns: ns, start: time.Now(), cancel: cancel, done: make(chan struct{}), first: map[string]time.Time{},
		conns: map[string]*grpc.ClientConn{}, pods: map[string]podSeen{}, serving: map[string]string{}, caught: map[string]bool{},
		members: map[uint64]memberSeen{}, conds: map[string]string{},
		http: &http.Client{Timeout: sampleTimeout, Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialName(ctx, addr)
		}}}}
	tl.origin = tl.start
	go func() {
		defer close(tl.done)
		tick := time.NewTicker(timelineEvery)
		defer tick.Stop()
		for {
			tl.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(tl.stop)
	return tl
}

func (tl *timeline) stop() {
	tl.once.Do(func() {
		tl.cancel()
		<-tl.done
		for _, c := range tl.conns {
			c.Close()
		}
		tl.http.CloseIdleConnections()
	})
}

// mark records what at the time it is called (the benchmark's own steps).
func (tl *timeline) mark(what string) {
	tl.record(time.Now(), what)
}

// setOrigin makes offsets count from t (when the benchmark's timer started).
func (tl *timeline) setOrigin(t time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.origin = t
}

func (tl *timeline) record(at time.Time, what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, timelineEvent{at, what})
	if _, ok := tl.first[what]; !ok {
		tl.first[what] = at
	}
}

// at returns the offset of the first event named what, and whether there was one.
func (tl *timeline) at(what string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	t, ok := tl.first[what]
	return t.Sub(tl.origin), ok
}

// firstWithPrefix returns the offset of the first event after the origin whose name starts
// with prefix.
func (tl *timeline) firstWithPrefix(prefix string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if strings.HasPrefix(e.what, prefix) && !e.at.Before(tl.origin) {
			return e.at.Sub(tl.origin), true
		}
	}
	return 0, false
}

// waitTimelineSettled waits until the timeline has seen n started voters, each member pod
// serving: what happens next is a change from there.
func waitTimelineSettled(t testing.TB, tl *timeline, n int) {
	t.Helper()
	eventually(t, time.Minute, "the timeline to see the cluster settled", func() error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if len(tl.events) == 0 {
			return fmt.Errorf("no events yet")
		}
		last := tl.events[len(tl.events)-1].what
		if _, ok := tl.first[fmt.Sprintf("all %d member pods serving", n)]; !ok {
			return fmt.Errorf("last event %q", last)
		}
		if _, ok := tl.first[fmt.Sprintf("%d started voters", n)]; !ok {
			return fmt.Errorf("last event %q", last)
		}
		return nil
	})
}

// lastWithPrefix returns the offset of the last event whose name starts with prefix.
func (tl *timeline) lastWithPrefix(prefix string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var d time.Duration
	ok := false
	for _, e := range tl.events {
		if strings.HasPrefix(e.what, prefix) {
			d, ok = e.at.Sub(tl.origin), true
		}
	}
	return d, ok
}

// finish stops sampling and logs the timeline, one line per event.
func (tl *timeline) finish(t testing.TB, title string) {
	t.Helper()
	tl.stop()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	sort.SliceStable(tl.events, func(i, j int) bool { return tl.events[i].at.Before(tl.events[j].at) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "timeline of %s (sampled every %s):", title, timelineEvery)
	for _, e := range tl.events {
		fmt.Fprintf(&sb, "\n  %6.2fs  %s", e.at.Sub(tl.origin).Seconds(), e.what)
	}
	t.Log(sb.String())
	if lines := tl.operatorLines(); lines != "" {
		t.Logf("the operator's log lines about %s (whole seconds):%s", tl.ns, lines)
	}
}

// operatorLines returns the operator's log lines that name the timeline's namespace, from
// the second it started on, with offsets from the origin.
func (tl *timeline) operatorLines() string {
	var sb strings.Builder
	for _, l := range strings.Split(operatorLogs(), "\n") {
		if !strings.Contains(l, `"`+tl.ns+`"`) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		ts, _ := rec["ts"].(string)
		at, err := time.Parse(time.RFC3339, ts)
		if err != nil || at.Before(tl.start.Truncate(time.Second)) {
			continue
		}
		text, _ := rec["msg"].(string)
		for _, k := range []string{"step", "reason", "member", "error"} {
			if v, ok := rec[k]; ok {
				text += fmt.Sprintf(" %s=%v", k, v)
			}
		}
		fmt.Fprintf(&sb, "\n  %6.0fs  %.200s", at.Sub(tl.origin).Seconds(), text)
	}
	return sb.String()
}

// phases adds, for each unit, the offset of the first event named by phases[unit] to
// sums[unit]; a phase that did not happen is reported missing.
func (tl *timeline) phases(t testing.TB, sums map[string]float64, phases map[string]string) {
	t.Helper()
	for unit, what := range phases {
		d, ok := tl.firstWithPrefix(what)
		if !ok {
			t.Errorf("the timeline has no %q", what)
			continue
		}
		sums[unit] += d.Seconds()
	}
}

// reportPhases reports sums divided by n as benchmark metrics.
func reportPhases(b *testing.B, sums map[string]float64) {
	for unit, s := range sums {
		b.ReportMetric(s/float64(b.N), unit)
	}
}

func (tl *timeline) sample(ctx context.Context) {
	now := time.Now
	if !tl.sts {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: tl.ns, Name: "etcd"}, &appsv1.StatefulSet{}); err == nil {
			tl.sts = true
			tl.record(now(), "StatefulSet created")
		}
	}
	c := &v1alpha1.EtcdCluster{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: tl.ns, Name: "etcd"}, c); err == nil {
		at := now()
		var ms []string
		for _, m := range c.Status.Members {
			ms = append(ms, fmt.Sprintf("%s healthy=%v learner=%v %s", m.Name, m.Healthy, m.Learner, m.Version))
		}
		if v := strings.Join(ms, ", "); v != tl.opMembers {
			tl.opMembers = v
			tl.record(at, "status.members: "+v)
		}
		for _, cond := range c.Status.Conditions {
			v := string(cond.Status) + " (" + cond.Reason + ")"
			if cond.Type == v1alpha1.ConditionProgressing || cond.Type == v1alpha1.ConditionAvailable {
				v += ": " + cond.Message
			}
			if tl.conds[cond.Type] != v {
				tl.conds[cond.Type] = v
				tl.record(at, cond.Type+"="+v)
			}
		}
	}

	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(tl.ns)); err == nil {
		at := now()
		seen := map[string]bool{}
		for _, p := range pods.Items {
			if !memberPod.MatchString(p.Name) {
				continue
			}
			seen[p.Name] = true
			old, had := tl.pods[p.Name]
			cur := podSeen{uid: p.UID, scheduled: p.Spec.NodeName != "", terminating: p.DeletionTimestamp != nil}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == "etcd" && cs.State.Running != nil {
					cur.started = true
					cur.probed = cs.Started != nil && *cs.Started
				}
			}
			for _, pc := range p.Status.Conditions {
				if pc.Type == corev1.PodReady && pc.Status == corev1.ConditionTrue {
					cur.read = true
				}
			}
			if !had || old.uid != cur.uid {
				old = podSeen{}
				tl.record(at, "pod "+p.Name+" created")
			}
			if cur.terminating && !old.terminating {
				tl.record(at, "pod "+p.Name+" terminating")
			}
			if cur.scheduled && !old.scheduled {
				tl.record(at, "pod "+p.Name+" scheduled")
			}
			if cur.started != old.started {
				tl.record(at, "pod "+p.Name+" "+map[bool]string{true: "container started", false: "container stopped"}[cur.started])
			}
			if cur.probed != old.probed {
				tl.record(at, "pod "+p.Name+" "+map[bool]string{true: "started (startup probe)", false: "not started"}[cur.probed])
			}
			if cur.read != old.read {
				tl.record(at, "pod "+p.Name+" "+map[bool]string{true: "ready", false: "not ready"}[cur.read])
			}
			tl.pods[p.Name] = cur
		}
		for name := range tl.pods {
			if !seen[name] {
				delete(tl.pods, name)
				tl.record(at, "pod "+name+" gone")
			}
		}
	}

	// etcd's Status from every member pod, in parallel.
	names := make([]string, 0, len(tl.pods))
	for name := range tl.pods {
		names = append(names, name)
	}
	sort.Strings(names)
	answers := make([]*pb.StatusResponse, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		conn := tl.conns[name]
		if conn == nil {
			addr := strings.TrimPrefix(endpoint(tl.ns, podOrdinal(name)), "http://")
			var err error
			if conn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialName)); err != nil {
				continue
			}
			tl.conns[name] = conn
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			defer cancel()
			if resp, err := pb.NewMaintenanceClient(conn).Status(sctx, &pb.StatusRequest{}); err == nil {
				answers[i] = resp
			}
		})
	}
	wg.Wait()
	at := now()
	byLeader := map[uint64]int{}
	var leaderResp *pb.StatusResponse
	var leaderPod string
	for i, name := range names {
		r := answers[i]
		if r == nil {
			// A connection that failed is dialed anew next time: gRPC's own reconnection
			// backs off for seconds, which would delay what the timeline sees.
			if c := tl.conns[name]; c != nil {
				c.Close()
				delete(tl.conns, name)
			}
			if tl.serving[name] != "" {
				tl.record(at, "etcd "+name+" stopped answering")
			}
			tl.serving[name], tl.caught[name] = "", false
			continue
		}
		if tl.serving[name] != r.Version {
			tl.record(at, fmt.Sprintf("etcd %s serving v%s", name, r.Version))
			tl.serving[name] = r.Version
		}
		if r.Leader != 0 {
			byLeader[r.Leader]++
		}
		if r.Header != nil && r.Leader == r.Header.MemberId {
			leaderResp, leaderPod = r, name
		}
	}
	for name := range tl.serving {
		if _, ok := tl.pods[name]; !ok && tl.serving[name] != "" {
			tl.serving[name] = ""
			tl.record(at, "etcd "+name+" stopped answering")
		}
	}
	if leaderResp != nil && (leaderResp.Header.MemberId != tl.leader || leaderResp.RaftTerm != tl.term) {
		tl.leader, tl.term = leaderResp.Header.MemberId, leaderResp.RaftTerm
		tl.record(at, fmt.Sprintf("leader %s (term %d)", leaderPod, leaderResp.RaftTerm))
		tl.record(at, "leader elected")
	}
	if leaderResp != nil {
		for i, name := range names {
			r := answers[i]
			if r == nil || tl.caught[name] || name == leaderPod {
				continue
			}
			if r.RaftAppliedIndex+5 >= leaderResp.RaftIndex && r.Leader == tl.leader {
				tl.caught[name] = true
				tl.record(at, "etcd "+name+" caught up with the leader")
			}
		}
	}
	all := len(names) > 0
	for _, name := range names {
		all = all && tl.serving[name] != ""
	}
	if all != tl.allServe {
		tl.allServe = all
		if all {
			tl.record(at, fmt.Sprintf("all %d member pods serving", len(names)))
		}
	}

	if leaderResp == nil {
		return
	}
	conn := tl.conns[leaderPod]
	mctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	list, err := pb.NewClusterClient(conn).MemberList(mctx, &pb.MemberListRequest{})
	cancel()
	if err == nil {
		at := now()
		seen := map[uint64]bool{}
		voters := 0
		for _, m := range list.Members {
			seen[m.ID] = true
			cur := memberSeen{name: m.Name, learner: m.IsLearner}
			old, had := tl.members[m.ID]
			label := m.Name
			if label == "" {
				label = fmt.Sprintf("%x", m.ID)
			}
			switch {
			case !had && m.IsLearner:
				tl.record(at, fmt.Sprintf("member %x added as a learner", m.ID))
				tl.record(at, "learner added")
			case !had:
				tl.record(at, fmt.Sprintf("member %x added as a voter", m.ID))
			case old.learner && !m.IsLearner:
				tl.record(at, "member "+label+" promoted")
				tl.record(at, "learner promoted")
			}
			if had && old.name == "" && m.Name != "" {
				tl.record(at, "member "+label+" started")
			}
			if !m.IsLearner && m.Name != "" {
				voters++
			}
			tl.members[m.ID] = cur
		}
		for id, m := range tl.members {
			if !seen[id] {
				delete(tl.members, id)
				tl.record(at, fmt.Sprintf("member %s (%x) removed", m.name, id))
			}
		}
		if voters != tl.voters {
			tl.voters = voters
			tl.record(at, fmt.Sprintf("%d started voters", voters))
		}
	}
	if v := tl.clusterVersion(ctx, leaderPod); v != "" && v != tl.version {
		tl.version = v
		tl.record(now(), "cluster version "+v)
	}
}

// clusterVersion reads etcd's /version from the member pod name and returns its cluster
// version ("" when it does not answer).
func (tl *timeline) clusterVersion(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	return etcdClusterVersion(ctx, tl.http, tl.ns, podOrdinal(name))
}

// podOrdinal is the ordinal of the member pod name.
func podOrdinal(name string) int {
	var n int
	fmt.Sscanf(memberPod.FindStringSubmatch(name)[1], "%d", &n)
	return n
}

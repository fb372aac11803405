package controllers

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

const (
	// wakeWithin: etcd is watched between passes only when a pass asks to be looked at again
	// this soon. The planners ask for it (rollout.VersionPoll) while they wait on what only
	// etcd shows: a restarted member to answer again, the cluster version to rise.
	wakeWithin = 250 * time.Millisecond
	// wakeEvery is how often a watch asks etcd.
	wakeEvery = 50 * time.Millisecond
	// wakeCallTimeout bounds each of a watch's calls (a member that accepts connections before
	// it serves holds a call until it serves).
	wakeCallTimeout = 200 * time.Millisecond
	// wakeMaxWatches bounds the watches running at once, over all clusters (each holds a
	// client and asks etcd 20 times a second); beyond it a pass waits for its requeue, as
	// without watches.
	wakeMaxWatches = 64
)

// etcdWaker starts a pass as soon as etcd shows what a waiting pass looked for, instead of at
// the pass's requeue: a member that did not answer answers, or the cluster version changed.
// Neither is a Kubernetes event, and in an upgrade both are on the critical path (the
// hand-over to the member restarted last, and the end of the wait for etcd's 4 s version
// timer). A watch only reads etcd (status calls, which carry the cluster version); the pass it
// starts reads etcd itself before it takes any step. Each cluster has at most one watch, which
// the cluster's next pass replaces and which ends by the pass's requeue at the latest; a
// cluster is not woken twice within wakeWithin, so a watch never makes passes more frequent
// than the planners' own poll. Safe for concurrent use.
type etcdWaker struct {
	events chan event.GenericEvent
	dial   etcd.Dialer

	mu      sync.Mutex
	watches map[types.UID]*wakeRun
	woken   map[types.UID]time.Time
}

type wakeRun struct{ cancel context.CancelFunc }

// wakeWatch is what a pass saw and waits to see change.
type wakeWatch struct {
	// silent are the client URLs of listed members that did not answer although their pod
	// exists, is not being deleted and its etcd container runs.
	silent []string
	// versionURL is the leader's client URL when the cluster version is awaited ("" when
	// not), clusterVersion the version the pass saw.
	versionURL, clusterVersion string
	tls                        *tls.Config
}

func (ww wakeWatch) empty() bool { return len(ww.silent) == 0 && ww.versionURL == "" }

func newEtcdWaker(dial etcd.Dialer) *etcdWaker {
	return &etcdWaker{events: make(chan event.GenericEvent, 1024), dial: dial,
		watches: map[types.UID]*wakeRun{}, woken: map[types.UID]time.Time{}}
}

// set replaces the watch of cluster c with one for ww that lasts until (nothing is watched
// when ww is empty or until is longer than wakeWithin). A nil waker does nothing.
func (w *etcdWaker) set(c *v1alpha1.EtcdCluster, ww wakeWatch, until time.Duration) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.watches[c.UID]; old != nil {
		old.cancel()
		delete(w.watches, c.UID)
	}
	for uid, at := range w.woken {
		if time.Since(at) > wakeWithin {
			delete(w.woken, uid)
		}
	}
	if ww.empty() || until <= 0 || until > wakeWithin || len(w.watches) >= wakeMaxWatches {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), until)
	run := &wakeRun{cancel: cancel}
	w.watches[c.UID] = run
	obj := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
	go w.run(ctx, run, obj, ww)
}

func (w *etcdWaker) run(ctx context.Context, run *wakeRun, c *v1alpha1.EtcdCluster, ww wakeWatch) {
	defer func() {
		run.cancel()
		w.mu.Lock()
		if w.watches[c.UID] == run {
			delete(w.watches, c.UID)
		}
		w.mu.Unlock()
	}()
	endpoints := slices.Clone(ww.silent)
	if ww.versionURL != "" && !slices.Contains(endpoints, ww.versionURL) {
		endpoints = append(endpoints, ww.versionURL)
	}
	// A context without an owner: a caching dialer opens a client of the watch's own, which
	// Close closes, instead of taking one of the cluster's cached clients' places.
	cl, err := w.dial(context.Background(), endpoints, ww.tls)
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(wakeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !changed(ctx, cl, ww) {
			continue
		}
		w.mu.Lock()
		last, ok := w.woken[c.UID]
		wake := w.watches[c.UID] == run && (!ok || time.Since(last) >= wakeWithin)
		if wake {
			w.woken[c.UID] = time.Now()
		}
		w.mu.Unlock()
		if wake {
			select {
			case w.events <- event.GenericEvent{Object: c}:
			default: // the queue is full: the pass's requeue comes anyway
			}
		}
		return
	}
}

// changed reports whether a silent member answers now, or the leader reports another cluster
// version than ww's.
func changed(ctx context.Context, cl etcd.Client, ww wakeWatch) bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	found := false
	ask := func(url string, check func(etcd.MemberStatus) bool) {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, wakeCallTimeout)
			defer cancel()
			if st, err := cl.Status(cctx, url); err == nil && check(st) {
				mu.Lock()
				found = true
				mu.Unlock()
			}
		})
	}
	for _, url := range ww.silent {
		ask(url, func(etcd.MemberStatus) bool { return true })
	}
	if ww.versionURL != "" {
		ask(ww.versionURL, func(st etcd.MemberStatus) bool {
			return st.ClusterVersion != "" && st.ClusterVersion != ww.clusterVersion
		})
	}
	wg.Wait()
	return found
}

// wakeWatchOf is what the pass that observed o waits to see change in etcd: listed members
// that did not answer although their etcd container runs, and, while every listed member
// answers and runs a newer minor than the cluster version, the cluster version.
func wakeWatchOf(o observe.Observation, t render.Topology) wakeWatch {
	ww := wakeWatch{tls: t.TLS}
	if o.Etcd == nil {
		return ww
	}
	running := map[string]bool{}
	if o.Pods != nil {
		for i := range o.Pods.Items {
			var p plan.Pod
			plan.PodState(&p, &o.Pods.Items[i])
			running[o.Pods.Items[i].Name] = p.Running && !p.Deleting
		}
	}
	lowest := ""
	leaderURL := ""
	leader := o.Etcd.Leader()
	for _, m := range o.Etcd.Cluster.Members {
		st, ok := o.Etcd.Status[m.ID]
		if !ok {
			if m.Name != "" && len(m.ClientURLs) > 0 && running[m.Name] {
				ww.silent = append(ww.silent, m.ClientURLs[0])
			}
			lowest = "unknown"
			continue
		}
		if m.ID == leader && len(m.ClientURLs) > 0 {
			leaderURL = m.ClientURLs[0]
		}
		if lowest != "unknown" && (lowest == "" || versions.Less(st.Version, lowest)) {
			lowest = st.Version
		}
	}
	cv := o.Etcd.ClusterVersion()
	if lowest == "" || lowest == "unknown" || cv == "" || leaderURL == "" {
		return ww
	}
	run, err1 := versions.Parse(lowest)
	cur, err2 := versions.Parse(cv)
	if err1 == nil && err2 == nil && cur.Less(run) && cur.MinorString() != run.MinorString() {
		ww.versionURL, ww.clusterVersion = leaderURL, cv
	}
	return ww
}

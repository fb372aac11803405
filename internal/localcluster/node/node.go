package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// NameView publishes DNS names for pod IPs (the local cluster's private /etc/hosts).
type NameView interface {
	// Set replaces owner's entries with names resolving to ip.
	Set(owner string, ip string, names ...string) error
	// Remove drops owner's entries.
	Remove(owner string) error
}

// ImageResolver maps a container image to a local folder that plays the image's filesystem
// for its binaries (for example the etcd image of tag v3.6.16 to "<repo>/bin/etcd/v3.6.16"),
// or returns an error saying the image is unknown to this machine.
type ImageResolver func(image string) (string, error)

// Defaults of the Config fields that may be left zero.
const (
	// DefaultRestartBackoff and DefaultMaxRestartBackoff are the kubelet's.
	DefaultRestartBackoff    = 10 * time.Second
	DefaultMaxRestartBackoff = 5 * time.Minute
	// DefaultPods is the pods capacity the kubelet reports by default.
	DefaultPods = 110
)

// Config configures a Node. Every field without a stated default is required.
type Config struct {
	// Name is the Node's name; it must be unique in the cluster.
	Name string
	// Zone is the value of the node's topology.kubernetes.io/zone label; empty leaves the label
	// out.
	Zone string
	// Client talks to the API server with rights over nodes, node leases, pods, pod status,
	// events, PVCs, PVs, secrets, configmaps and service account tokens.
	Client kubernetes.Interface
	// Dir is this node's state folder (pod volumes, logs); it is created when missing.
	Dir string
	// Images maps container images to folders.
	Images ImageResolver
	// IPs hands out pod IPs; all nodes of a cluster must share one.
	IPs *IPAllocator
	// Names publishes each pod's DNS names before its processes start.
	Names NameView
	// Shim is the argv prefix that runs ShimMain (for example {"/path/etcd-pilot-local",
	// "shim"}); the node appends the shim's flags, "--", the command and its args.
	Shim []string
	// Log receives the node's log lines.
	Log logr.Logger
	// APIServer is the API server's host:port, given to every container as
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the variables of the kubernetes
	// Service through which in-cluster clients find the API server. With no kube-proxy here
	// they name the API server itself rather than the Service's cluster IP. Empty leaves
	// them out.
	APIServer string

	// RestartBackoff is the first delay before restarting a container that exited again
	// (the first restart is immediate); the delay doubles up to MaxRestartBackoff. Defaults:
	// DefaultRestartBackoff and DefaultMaxRestartBackoff.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// ShutdownGracePeriod, when positive, caps how long Run waits for pods' processes to exit
	// after SIGTERM when its context ends; zero means each pod's own grace period.
	ShutdownGracePeriod time.Duration
	// MaxProbePeriod, when positive, caps the period of startup and readiness probes, so that a
	// local cluster notices a started or ready process sooner than a real node would (the
	// etcd chart probes every 5s). Liveness probes keep the pod's period: a busy machine must
	// not restart healthy processes. Zero keeps every pod's periods.
	MaxProbePeriod time.Duration
	// Capacity overrides or adds node capacity (and allocatable) entries; by default the node
	// reports the machine's CPUs and memory and DefaultPods pods.
	Capacity corev1.ResourceList
}

// Node is a process node: a kubelet for the pods bound to it. Create it with New and run it
// with Run; KillPod, Stop and Start inject faults.
type Node struct {
	cfg Config
	log logr.Logger

	// Intervals of the heartbeats; tests shorten them.
	leaseInterval        time.Duration
	leaseDuration        time.Duration
	statusReportInterval time.Duration

	// recorder records events; workers read it while holding their own lock, so
	// it must not need n.mu (which is taken before a worker's lock).
	recorder atomic.Pointer[eventRecorder]
	beat     chan struct{} // wakes the heartbeat loop
	// stopped is set between Stop and Start.
	stopped atomic.Bool

	mu       sync.Mutex
	ran      bool
	ctx      context.Context
	closing  bool
	workers  map[types.UID]*podWorker // by pod UID, while the pod object exists
	byName   map[string]*podWorker    // the latest worker of each namespace/name
	live     map[*podWorker]struct{}  // workers whose goroutine runs
	workerWG sync.WaitGroup
}

// New checks cfg and returns a Node that has not started yet.
func New(cfg Config) (*Node, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"Name": cfg.Name != "", "Client": cfg.Client != nil, "Dir": cfg.Dir != "",
		"Images": cfg.Images != nil, "IPs": cfg.IPs != nil, "Names": cfg.Names != nil, "Shim": len(cfg.Shim) > 0,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("node config lacks %v", missing)
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = DefaultRestartBackoff
	}
	if cfg.MaxRestartBackoff <= 0 {
		cfg.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	if cfg.MaxRestartBackoff < cfg.RestartBackoff {
		cfg.MaxRestartBackoff = cfg.RestartBackoff
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("failed to make node folder %s absolute: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	n := &Node{
		cfg:                  cfg,
		log:                  cfg.Log.WithValues("node", cfg.Name),
		leaseInterval:        10 * time.Second,
		leaseDuration:        40 * time.Second,
		statusReportInterval: time.Minute,
		beat:                 make(chan struct{}, 1),
		workers:              map[types.UID]*podWorker{},
		byName:               map[string]*podWorker{},
		live:                 map[*podWorker]struct{}{},
	}
	n.recorder.Store(&eventRecorder{&record.FakeRecorder{}}) // until Run has a real one
	return n, nil
}

// LogPath is where a node whose folder is nodeDir writes the output (stdout and stderr) of a
// pod's container: one file per container and pod name, appended to across restarts and
// across pods recreated under the same name.
func LogPath(nodeDir, namespace, pod, container string) string {
	return filepath.Join(nodeDir, "logs", namespace+"_"+pod+"_"+container+".log")
}

// Run registers the Node, renews its Lease and runs the pods bound to it until ctx ends. On
// return every process of its pods has stopped (SIGTERM, then SIGKILL after the pod's grace
// period, capped by Config.ShutdownGracePeriod); pod objects are left as they are, as a
// stopped kubelet leaves them. It returns an error only when it could not register the Node
// before ctx ended. Run may be called once.
func (n *Node) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.ran {
		n.mu.Unlock()
		return errors.New("node is already running")
	}
	n.ran = true
	n.ctx = ctx
	n.mu.Unlock()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: n.cfg.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	n.recorder.Store(&eventRecorder{broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: n.cfg.Name})})

	if err := n.registerUntilDone(ctx); err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() { n.heartbeat(ctx) })

	factory := informers.NewSharedInformerFactoryWithOptions(n.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", n.cfg.Name).String()
		}))
	pods := factory.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.podChanged(obj) },
		UpdateFunc: func(_, obj any) { n.podChanged(obj) },
		DeleteFunc: func(obj any) { n.podDeleted(obj) },
	}); err != nil {
		return fmt.Errorf("failed to watch pods of node %s: %w", n.cfg.Name, err)
	}
	factory.Start(ctx.Done())

	<-ctx.Done()
	factory.Shutdown()
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	// Each worker stops its processes when it sees ctx end.
	n.workerWG.Wait()
	wg.Wait()
	n.log.Info("Node stopped")
	return nil
}

// KillPod sends SIGKILL to every process of the pod's containers, as if they crashed; the
// restart policy then applies. It returns an error when the node runs no process of the pod.
func (n *Node) KillPod(namespace, name string) error {
	n.mu.Lock()
	w := n.byName[namespace+"/"+name]
	n.mu.Unlock()
	if w == nil || w.signalAll(sigKill) == 0 {
		return fmt.Errorf("node %s runs no process of pod %s/%s", n.cfg.Name, namespace, name)
	}
	return nil
}

// Stop simulates a node failure: it kills every process of the node's pods at once (and
// returns when they are gone), and the node stops renewing its Lease, reporting its status
// and syncing pods, until Start. The node controller then marks the Node NotReady (Unknown).
// Pod objects keep their last status, as they do when a kubelet dies.
func (n *Node) Stop() {
	n.stopped.Store(true)
	n.mu.Lock()
	workers := n.liveWorkers()
	n.mu.Unlock()
	for _, w := range workers {
		w.signalAll(sigKill)
	}
	for _, w := range workers {
		w.waitProcesses(10 * time.Second)
	}
	n.log.Info("Node stopped by a fault")
}

// Start recovers the node from Stop: it reports Ready again and runs its pods again (their
// volumes survived; restart policies apply to the killed containers, without back-off). Pods
// deleted meanwhile are finished then.
func (n *Node) Start() {
	n.stopped.Store(false)
	n.mu.Lock()
	workers := n.liveWorkers()
	n.mu.Unlock()
	for _, w := range workers {
		w.nodeStarted()
	}
	n.poke()
	n.log.Info("Node started after a fault")
}

func (n *Node) isStopped() bool { return n.stopped.Load() }

func (n *Node) poke() {
	select {
	case n.beat <- struct{}{}:
	default:
	}
}

// liveWorkers lists the workers whose goroutine runs; n.mu must be held.
func (n *Node) liveWorkers() []*podWorker {
	ws := make([]*podWorker, 0, len(n.live))
	for w := range n.live {
		ws = append(ws, w)
	}
	return ws
}

func (n *Node) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.workers[pod.UID]; w != nil {
		w.update(pod)
		return
	}
	if n.closing {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	w := newPodWorker(n, pod, n.byName[key])
	n.workers[pod.UID] = w
	n.byName[key] = w
	n.live[w] = struct{}{}
	n.workerWG.Add(1)
	go func() {
		defer n.workerWG.Done()
		w.run(n.ctx)
		n.mu.Lock()
		delete(n.live, w)
		if n.byName[key] == w {
			delete(n.byName, key)
		}
		n.mu.Unlock()
	}()
}

func (n *Node) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.workers[pod.UID]; w != nil {
		w.objectGone(pod)
		delete(n.workers, pod.UID)
	}
}

// event records an event about pod; it never blocks and takes no lock of the node.
func (n *Node) event(pod *corev1.Pod, eventType, reason, format string, args ...any) {
	n.recorder.Load().Eventf(pod, eventType, reason, format, args...)
}

// eventRecorder boxes an EventRecorder for an atomic.Pointer.
type eventRecorder struct{ record.EventRecorder }

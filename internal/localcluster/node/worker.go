package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
)

// podWorker runs one pod (one UID) on the node: a goroutine that syncs the pod whenever the
// pod object, a process or a probe result changes, or a back-off ends.
type podWorker struct {
	n      *Node
	uid    types.UID
	key    string // namespace/name
	ns     string
	name   string
	log    logr.Logger
	podDir string
	policy corev1.RestartPolicy
	// prev is the worker of an earlier pod with the same namespace/name; this one starts once
	// prev is done, so the two never hold the same IP, names or log file at once.
	prev      *podWorker
	startTime metav1.Time
	wake      chan struct{}
	done      chan struct{}

	mu        sync.Mutex
	pod       *corev1.Pod // the latest object seen
	gone      bool        // the object was deleted from the API
	initCtrs  []*container
	ctrs      []*container
	ip        string
	published bool              // names published
	volumes   map[string]volume // nil until the volumes are ready
	// volumeHashes are digests of what the Secret and ConfigMap volumes were last written
	// with, by folder (see refreshVolumes).
	volumeHashes map[string]string
	setupErr     error // why the pod's sandbox is not ready yet
	setupTries   int
	initDone     bool
}

func newPodWorker(n *Node, pod *corev1.Pod, prev *podWorker) *podWorker {
	w := &podWorker{
		n:         n,
		uid:       pod.UID,
		key:       pod.Namespace + "/" + pod.Name,
		ns:        pod.Namespace,
		name:      pod.Name,
		log:       n.log.WithValues("pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID),
		podDir:    filepath.Join(n.cfg.Dir, "pods", string(pod.UID)),
		policy:    pod.Spec.RestartPolicy,
		prev:      prev,
		startTime: metav1.NewTime(time.Now().Truncate(time.Second)),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		pod:       pod,
	}
	if pod.Status.StartTime != nil {
		w.startTime = *pod.Status.StartTime
	}
	// A pod this node ran before (the node's process restarted) keeps its restart counts.
	counts := map[string]int32{}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		counts[s.Name] = s.RestartCount
	}
	for _, spec := range pod.Spec.InitContainers {
		w.initCtrs = append(w.initCtrs, &container{spec: spec, init: true, restarts: counts[spec.Name]})
	}
	for _, spec := range pod.Spec.Containers {
		w.ctrs = append(w.ctrs, &container{spec: spec, restarts: counts[spec.Name]})
	}
	w.initDone = len(w.initCtrs) == 0
	return w
}

// poke makes the worker sync soon.
func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// update hands the worker a newer pod object.
func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.poke()
}

// objectGone tells the worker that the pod object was deleted (pod is its last state).
func (w *podWorker) objectGone(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.gone = true
	w.mu.Unlock()
	w.poke()
}

func (w *podWorker) all() []*container {
	return append(append([]*container{}, w.initCtrs...), w.ctrs...)
}

// signalAll sends sig to every running process of the pod and returns how many it signalled.
func (w *podWorker) signalAll(sig syscall.Signal) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	why := killedByFault
	if w.n.isStopped() {
		why = killedByNodeStop
	}
	for _, c := range w.all() {
		if c.proc == nil {
			continue
		}
		if c.proc.killedBy == "" {
			c.proc.killedBy = why
		}
		c.proc.signal(sig)
		n++
	}
	return n
}

// waitProcesses waits up to timeout for every process of the pod to be reaped.
func (w *podWorker) waitProcesses(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		var p *process
		for _, c := range w.all() {
			if c.proc != nil {
				p = c.proc
				break
			}
		}
		w.mu.Unlock()
		if p == nil {
			return true
		}
		select {
		case <-p.done:
		case <-deadline.C:
			return false
		}
	}
}

// nodeStarted resets the back-off of every container (a restarted node starts its pods
// afresh) and wakes the worker.
func (w *podWorker) nodeStarted() {
	w.mu.Lock()
	for _, c := range w.all() {
		c.notBefore = time.Time{}
		c.crashes = 0
	}
	w.mu.Unlock()
	w.poke()
}

// run is the worker's goroutine.
func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	if w.prev != nil {
		select {
		case <-w.prev.done:
		case <-ctx.Done():
			return
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		requeue, finished := w.sync(ctx)
		if finished {
			return
		}
		if ctx.Err() != nil {
			w.shutdown()
			return
		}
		if requeue > 0 {
			timer.Reset(requeue)
		}
		select {
		case <-ctx.Done():
			w.shutdown()
			return
		case <-w.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// sync brings the pod's processes and status in line with the pod object. It returns when to
// sync again at the latest (0: on the next event), and whether the worker is finished.
func (w *podWorker) sync(ctx context.Context) (time.Duration, bool) {
	if w.n.isStopped() {
		return 0, false
	}
	w.mu.Lock()
	pod, gone := w.pod, w.gone
	w.mu.Unlock()
	if gone || pod.DeletionTimestamp != nil {
		return w.finish(ctx, pod, gone)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// A terminal pod runs nothing, whoever made it terminal.
		w.terminate(gracePeriod(pod, 0), killedByPod)
		return 0, false
	}
	requeue := w.setup(ctx, pod)
	if w.ready() {
		requeue = minPositive(requeue, w.runContainers(ctx, pod))
		requeue = minPositive(requeue, w.refreshVolumes(ctx, pod))
	}
	if err := w.writeStatus(ctx, false); err != nil {
		w.log.Error(err, "Failed to update the pod status")
		requeue = minPositive(requeue, time.Second)
	}
	return requeue, false
}

// ready reports whether the pod's sandbox (IP, names, volumes) is set up.
func (w *podWorker) ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.volumes != nil
}

// setup allocates the pod's IP, publishes its names and prepares its volumes, each once. It
// returns when to retry when something is not ready yet.
func (w *podWorker) setup(ctx context.Context, pod *corev1.Pod) time.Duration {
	w.mu.Lock()
	ip, published, done := w.ip, w.published, w.volumes != nil
	w.mu.Unlock()
	if done {
		return 0
	}
	err := func() error {
		if ip == "" {
			if ip = w.n.cfg.IPs.acquire(w.key, string(w.uid)); ip == "" {
				return fmt.Errorf("no pod IP left")
			}
			w.mu.Lock()
			w.ip = ip
			w.mu.Unlock()
		}
		if !published {
			if err := w.n.cfg.Names.Set(w.owner(), ip, podNames(pod)...); err != nil {
				return fmt.Errorf("failed to publish the pod's names: %w", err)
			}
			w.mu.Lock()
			w.published = true
			w.mu.Unlock()
		}
		vols, err := w.prepareVolumes(ctx, pod)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.volumes = vols
		w.setupErr = nil
		w.mu.Unlock()
		return nil
	}()
	if err == nil {
		return 0
	}
	w.mu.Lock()
	first := w.setupErr == nil || w.setupErr.Error() != err.Error()
	w.setupErr = err
	w.setupTries++
	delay := backoffDelay(w.setupTries, 250*time.Millisecond, 10*time.Second)
	w.mu.Unlock()
	if first {
		w.log.Info("Pod not ready to start containers", "reason", err.Error())
		w.n.event(pod, corev1.EventTypeWarning, "FailedMount", "%v", err)
	}
	return delay
}

// owner is the pod's owner name in the NameView: one per pod UID, so that the cleanup of a
// force-deleted pod never removes the names of its successor (same name, maybe on another
// node).
func (w *podWorker) owner() string { return "pod/" + w.key + "/" + string(w.uid) }

// podNames are the DNS names of a pod: its name and, when it has a hostname and a subdomain
// (a headless Service), <hostname>.<subdomain>.<namespace>.svc with and without
// .cluster.local.
func podNames(pod *corev1.Pod) []string {
	names := []string{pod.Name}
	if h, sub := pod.Spec.Hostname, pod.Spec.Subdomain; h != "" && sub != "" {
		fqdn := h + "." + sub + "." + pod.Namespace + ".svc"
		names = append(names, fqdn, fqdn+".cluster.local")
	}
	return names
}

// runContainers starts the containers that are due: the first unfinished init container, or,
// once every init container succeeded, every regular container that is not running and may
// (re)start. It returns when to look again for containers backing off.
func (w *podWorker) runContainers(ctx context.Context, pod *corev1.Pod) time.Duration {
	now := time.Now()
	w.mu.Lock()
	var due []*container
	var requeue time.Duration
	if !w.initDone {
		for _, c := range w.initCtrs {
			if c.succeeded() {
				continue
			}
			if start, wait := c.due(w.policy, now); start {
				due = append(due, c)
			} else {
				requeue = minPositive(requeue, wait)
			}
			break
		}
		if len(due) == 0 && requeue == 0 {
			w.initDone = allSucceeded(w.initCtrs)
		}
	}
	if w.initDone {
		for _, c := range w.ctrs {
			if start, wait := c.due(w.policy, now); start {
				due = append(due, c)
			} else {
				requeue = minPositive(requeue, wait)
			}
		}
	}
	ip, volumes := w.ip, w.volumes
	w.mu.Unlock()

	for _, c := range due {
		l, reason, err := w.prepare(ctx, pod, c, ip, volumes)
		w.mu.Lock()
		switch {
		case w.n.isStopped() || ctx.Err() != nil:
		case err != nil:
			w.failCreate(c, reason, err.Error())
			w.log.Info("Failed to create container", "container", c.spec.Name, "reason", reason, "message", err.Error())
			w.n.event(pod, corev1.EventTypeWarning, "Failed", "Error: %s: %v", reason, err)
			requeue = minPositive(requeue, time.Until(c.notBefore))
		default:
			if !w.start(ctx, pod, c, l, ip) {
				requeue = minPositive(requeue, time.Until(c.notBefore))
			}
		}
		w.mu.Unlock()
	}
	return requeue
}

func allSucceeded(cs []*container) bool {
	for _, c := range cs {
		if !c.succeeded() {
			return false
		}
	}
	return true
}

// finish ends a deleted pod: stops its processes within the grace period, writes the final
// status, releases the IP, names and pod folder, and deletes the object for good.
func (w *podWorker) finish(ctx context.Context, pod *corev1.Pod, gone bool) (time.Duration, bool) {
	w.terminate(gracePeriod(pod, 0), killedByPod)
	if !gone {
		if err := w.writeStatus(ctx, true); err != nil && !apierrors.IsNotFound(err) {
			w.log.Error(err, "Failed to write the final pod status")
		}
	}
	if err := w.cleanup(); err != nil {
		w.log.Error(err, "Failed to clean up the pod")
		return time.Second, false
	}
	if !gone {
		err := w.n.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(0)),
			Preconditions:      metav1.NewUIDPreconditions(string(w.uid)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.log.Error(err, "Failed to delete the pod")
			return time.Second, false
		}
	}
	w.log.V(1).Info("Pod finished")
	return 0, true
}

// gracePeriod is how long a pod's processes get between SIGTERM and SIGKILL: the deletion's
// grace period, else the pod's terminationGracePeriodSeconds, capped by limit when positive.
func gracePeriod(pod *corev1.Pod, limit time.Duration) time.Duration {
	secs := int64(defaultTerminationSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		secs = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	d := time.Duration(secs) * time.Second
	if limit > 0 && d > limit {
		d = limit
	}
	return d
}

// terminate stops every process of the pod (SIGTERM, SIGKILL after grace) and waits until
// they are gone.
func (w *podWorker) terminate(grace time.Duration, why string) {
	w.mu.Lock()
	var procs []*process
	for _, c := range w.all() {
		if c.proc != nil {
			procs = append(procs, c.proc)
		}
		// Nothing restarts now.
		c.notBefore = time.Now().Add(100 * 365 * 24 * time.Hour)
	}
	w.mu.Unlock()
	if len(procs) == 0 {
		return
	}
	w.log.V(1).Info("Stopping the pod's processes", "grace", grace)
	for _, p := range procs {
		w.kill(p, grace, why)
	}
	for _, p := range procs {
		<-p.done
	}
}

// shutdown stops the pod's processes when the node's Run ends, leaving the API alone.
func (w *podWorker) shutdown() {
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	w.terminate(gracePeriod(pod, w.n.cfg.ShutdownGracePeriod), killedByPod)
}

// cleanup releases what the pod held on the node: names, IP and pod folder (emptyDir,
// Secret and ConfigMap volumes). Persistent volumes and logs stay.
func (w *podWorker) cleanup() error {
	w.mu.Lock()
	published, ip := w.published, w.ip
	w.mu.Unlock()
	if published {
		if err := w.n.cfg.Names.Remove(w.owner()); err != nil {
			return fmt.Errorf("failed to remove the pod's names: %w", err)
		}
	}
	if ip != "" {
		w.n.cfg.IPs.drop(w.key, string(w.uid))
	}
	if err := os.RemoveAll(w.podDir); err != nil {
		return fmt.Errorf("failed to remove pod folder %s: %w", w.podDir, err)
	}
	w.mu.Lock()
	w.published, w.ip, w.volumes = false, "", nil
	w.mu.Unlock()
	return nil
}

// view snapshots what the status is computed from; the worker's mutex must be held.
func (w *podWorker) view(final bool) podView {
	v := podView{
		ip:           w.ip,
		sandboxReady: w.volumes != nil,
		initialized:  w.initDone,
		terminal:     final,
		startTime:    w.startTime,
	}
	if w.setupErr != nil {
		v.setupMessage = w.setupErr.Error()
	}
	for _, c := range w.initCtrs {
		v.initStatuses = append(v.initStatuses, c.status(reasonPodInitializing))
	}
	reason := reasonContainerCreating
	if !w.initDone {
		reason = reasonPodInitializing
	}
	for _, c := range w.ctrs {
		v.statuses = append(v.statuses, c.status(reason))
	}
	return v
}

// writeStatus patches the pod's status when what the node observes differs from it. final
// asks for the status of a pod whose processes all ended for good.
func (w *podWorker) writeStatus(ctx context.Context, final bool) error {
	w.mu.Lock()
	pod := w.pod
	v := w.view(final)
	w.mu.Unlock()
	want := desiredStatus(pod, v, metav1.NewTime(time.Now().Truncate(time.Second)))
	if apiequality.Semantic.DeepEqual(want, pod.Status) {
		return nil
	}
	patch, err := statusPatch(pod.UID, pod.Status, want)
	if err != nil {
		return err
	}
	got, err := w.n.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("failed to patch the status of pod %s: %w", w.key, err)
	}
	w.mu.Lock()
	if !w.gone && got.UID == w.uid {
		w.pod = got
	}
	w.mu.Unlock()
	return nil
}

// statusPatch is a strategic merge patch from old to new status that applies only to the pod
// with uid (a recreated pod of the same name has another).
func statusPatch(uid types.UID, old, new corev1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return nil, fmt.Errorf("failed to encode pod status: %w", err)
	}
	newJSON, err := json.Marshal(corev1.Pod{Status: new})
	if err != nil {
		return nil, fmt.Errorf("failed to encode pod status: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("failed to compute the pod status patch: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("failed to decode the pod status patch: %w", err)
	}
	m["metadata"] = map[string]any{"uid": string(uid)}
	return json.Marshal(m)
}

// minPositive is the smaller of two durations, ignoring zero and negative ones (which mean
// "no deadline").
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

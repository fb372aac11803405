package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Waiting reasons, as the kubelet reports them.
const (
	reasonContainerCreating   = "ContainerCreating"
	reasonPodInitializing     = "PodInitializing"
	reasonCrashLoopBackOff    = "CrashLoopBackOff"
	reasonErrImagePull        = "ErrImagePull"
	reasonCreateConfigError   = "CreateContainerConfigError"
	reasonStartError          = "StartError"
	reasonCompleted           = "Completed"
	reasonError               = "Error"
	defaultPath               = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	defaultImageBinDir        = "/usr/local/bin"
	sigKill                   = syscall.SIGKILL
	sigTerm                   = syscall.SIGTERM
	defaultTerminationSeconds = 30
)

// container is the node's state of one container of a pod. The worker's mutex guards it.
type container struct {
	spec corev1.Container
	init bool

	proc        *process // the running process, nil when none runs
	state       corev1.ContainerState
	lastState   corev1.ContainerState
	restarts    int32
	everRan     bool
	containerID string
	imageID     string
	// termLog is the node's termination-log file of the current or last run, "" when none.
	termLog string
	// crashes counts the exits since the container last ran long enough to reset the back-off;
	// failures counts consecutive failures to create the process (unknown image, bad config).
	crashes  int
	failures int
	// notBefore is when the container may start again.
	notBefore time.Time
	// started and probeReady are the startup and readiness results of the current run.
	started    bool
	probeReady bool
}

// process is a running container process: a shim that became the container's command, leader
// of its own process group.
type process struct {
	pid       int
	startedAt time.Time
	done      chan struct{} // closed once the process exited and its state was recorded
	cancel    context.CancelFunc
	view      shimSpec // the mount view, working dir and (Argv unset) for exec probes
	env       []string
	// termLog is the run's termination-log file ("" when the container has none); logPath is
	// the container's log, where the run's output starts at offset logStart.
	termLog  string
	logPath  string
	logStart int64
	// killedBy says why the node killed it, if it did: "" when it exited on its own.
	killedBy string
}

// signal sends sig as a container runtime does: SIGKILL to the process's whole group (the
// command and the children it did not move to other groups, as if its PID namespace ended),
// any other signal to the command alone (its PID 1).
func (p *process) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = syscall.Kill(-p.pid, sig)
		return
	}
	_ = syscall.Kill(p.pid, sig)
}

// ready reports whether the container counts as ready.
func (c *container) ready() bool {
	return c.proc != nil && c.started && (c.spec.ReadinessProbe == nil || c.probeReady)
}

// succeeded reports whether the container's last run exited 0 and nothing runs.
func (c *container) succeeded() bool {
	return c.proc == nil && c.state.Terminated != nil && c.state.Terminated.ExitCode == 0
}

// lastExit is the termination of the container's last run, nil when it never ran or runs.
func (c *container) lastExit() *corev1.ContainerStateTerminated {
	if c.proc != nil {
		return nil
	}
	if c.state.Terminated != nil {
		return c.state.Terminated
	}
	if c.state.Waiting != nil && c.state.Waiting.Reason == reasonCrashLoopBackOff {
		return c.lastState.Terminated
	}
	return nil
}

// shouldRestart reports whether a container that exited with exitCode restarts under policy.
// Init containers never restart after success, and restart after failure unless the policy is
// Never.
func shouldRestart(policy corev1.RestartPolicy, isInit bool, exitCode int32) bool {
	switch {
	case isInit:
		return exitCode != 0 && policy != corev1.RestartPolicyNever
	case policy == corev1.RestartPolicyNever:
		return false
	case policy == corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// backoffDelay is the n-th (from 1) delay of a doubling back-off from base, capped at max.
func backoffDelay(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// restartDelay is the wait before restarting a container after its crashes-th consecutive
// exit, as the kubelet does it: the first restart is immediate, then base, 2*base, … up to
// max.
func restartDelay(crashes int, base, max time.Duration) time.Duration {
	if crashes <= 1 {
		return 0
	}
	return backoffDelay(crashes-1, base, max)
}

// due decides whether c should start now; when not, wait > 0 says when to look again.
func (c *container) due(policy corev1.RestartPolicy, now time.Time) (start bool, wait time.Duration) {
	if c.proc != nil {
		return false, 0
	}
	if c.everRan {
		exit := c.lastExit()
		if exit == nil || !shouldRestart(policy, c.init, exit.ExitCode) {
			return false, 0
		}
	}
	if now.Before(c.notBefore) {
		return false, c.notBefore.Sub(now)
	}
	return true, 0
}

// status is the container's status as the pod status reports it. waitingReason is the
// reason reported while the container was never tried yet.
func (c *container) status(waitingReason string) corev1.ContainerStatus {
	s := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                c.ready(),
		RestartCount:         c.restarts,
		Started:              ptr.To(c.proc != nil && c.started),
	}
	if c.everRan {
		s.ContainerID = c.containerID
	}
	if s.State.Running == nil && s.State.Terminated == nil && (s.State.Waiting == nil || s.State.Waiting.Reason == "") {
		s.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingReason}}
	}
	return s
}

// failCreate records that c could not be created (reason and message in its waiting state)
// and when to try again; the worker's mutex must be held.
func (w *podWorker) failCreate(c *container, reason, message string) {
	c.failures++
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
	c.notBefore = time.Now().Add(backoffDelay(c.failures, w.n.cfg.RestartBackoff, w.n.cfg.MaxRestartBackoff))
}

// launch is everything needed to start a container process.
type launch struct {
	argv     []string // the container's command and args, expanded
	view     shimSpec // binds and working dir
	env      []string
	imageDir string
	termLog  string // the run's fresh termination-log file, "" when the container has none
}

// prepare resolves c's image, environment, command and mount view. It returns a waiting
// reason and message when the container cannot be created now.
func (w *podWorker) prepare(ctx context.Context, pod *corev1.Pod, c *container, ip string, volumes map[string]volume) (*launch, string, error) {
	dir, err := w.n.cfg.Images(c.spec.Image)
	if err != nil {
		return nil, reasonErrImagePull, fmt.Errorf("failed to pull image %q: %w", c.spec.Image, err)
	}
	env, err := w.containerEnv(ctx, pod, &c.spec, ip)
	if err != nil {
		return nil, reasonCreateConfigError, err
	}
	lookup := mapLookup(env)
	var argv []string
	for _, a := range c.spec.Command {
		argv = append(argv, expand(a, lookup))
	}
	if len(argv) == 0 {
		return nil, reasonCreateConfigError, fmt.Errorf("container %s has no command: a process node cannot read the entrypoint of image %s", c.spec.Name, c.spec.Image)
	}
	for _, a := range c.spec.Args {
		argv = append(argv, expand(a, lookup))
	}
	mounts, err := volumeBinds(c.spec.VolumeMounts, volumes, lookup)
	if err != nil {
		return nil, reasonCreateConfigError, fmt.Errorf("container %s: %w", c.spec.Name, err)
	}
	binds, err := imageBinds(dir, argv[0], mounts)
	if err != nil {
		return nil, reasonCreateConfigError, fmt.Errorf("container %s: %w", c.spec.Name, err)
	}
	binds = append(binds, mounts...)
	for _, b := range binds {
		if strings.Contains(b.Source, ":") {
			return nil, reasonCreateConfigError, fmt.Errorf("container %s: host path %s holds a colon, which the shim cannot take", c.spec.Name, b.Source)
		}
	}
	// Each run gets a fresh termination-log file, bound after the volumes so that a volume
	// mounted at one of its parent folders does not hide it. The kubelet goes on without the
	// bind when it cannot create the file; failing instead keeps a run from losing its result
	// silently.
	var termLog string
	if target := terminationLogTarget(&c.spec); target != "" {
		if termLog, err = newTerminationLog(w.podDir, c.spec.Name); err != nil {
			return nil, reasonCreateConfigError, fmt.Errorf("container %s: %w", c.spec.Name, err)
		}
		binds = append(binds, bindMount{Source: termLog, Target: target})
	}
	workdir := c.spec.WorkingDir
	if workdir == "" {
		workdir = "/"
	}
	return &launch{
		argv:     argv,
		view:     shimSpec{Binds: binds, Workdir: workdir},
		env:      processEnv(env, pod),
		imageDir: dir,
		termLog:  termLog,
	}, "", nil
}

// imageBinds returns where the image folder dir appears in a container's view: always at
// /usr/local/bin, where an image keeps its binaries (so a command run from elsewhere, such as a
// wrapper an init container copied into an emptyDir, can exec the image's own programs), and
// also at the directory of an absolute command when that is another directory not at or under
// the mount path of one of the container's volume mounts (mounts): a command that lives in a
// volume comes from the volume, which is mounted after the image folder and would hide it.
func imageBinds(dir, command string, mounts []bindMount) ([]bindMount, error) {
	binds := []bindMount{{Source: dir, Target: defaultImageBinDir, ReadOnly: true}}
	if !filepath.IsAbs(command) {
		return binds, nil
	}
	cmdDir := filepath.Dir(command)
	if cmdDir == defaultImageBinDir {
		return binds, nil
	}
	for _, m := range mounts {
		if cmdDir == m.Target || strings.HasPrefix(cmdDir, m.Target+"/") || m.Target == "/" {
			return binds, nil
		}
	}
	if cmdDir == "/" {
		return nil, fmt.Errorf("command %s lies in /, which an image folder cannot be mounted over", command)
	}
	return append(binds, bindMount{Source: dir, Target: cmdDir, ReadOnly: true}), nil
}

// processEnv turns the container's environment into the process's, adding what a container
// runtime sets when the image and the pod do not: PATH, HOSTNAME and HOME.
func processEnv(env map[string]string, pod *corev1.Pod) []string {
	out := make([]string, 0, len(env)+3)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	for k, v := range map[string]string{"PATH": defaultPath, "HOSTNAME": hostname, "HOME": "/root"} {
		if _, ok := env[k]; !ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// shimArgv is the argv that runs argv in view through the shim.
func (w *podWorker) shimArgv(view shimSpec, argv []string) []string {
	view.Argv = argv
	return append(append([]string{}, w.n.cfg.Shim...), shimArgs(view)...)
}

// shimSysProcAttr starts the shim in a mount namespace of its own, as leader of its own
// process group (so the node can signal everything the container started).
func shimSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Setpgid:      true,
		// The process dies with the node's process rather than outliving it.
		Pdeathsig: syscall.SIGKILL,
	}
}

// start starts c's process; the worker's mutex must be held and no process of c may run. It
// returns false when the process could not start (recorded as a StartError exit).
func (w *podWorker) start(ctx context.Context, pod *corev1.Pod, c *container, l *launch, ip string) bool {
	logPath := LogPath(w.n.cfg.Dir, pod.Namespace, pod.Name, c.spec.Name)
	now := time.Now()
	if c.everRan {
		c.restarts++
		if c.state.Terminated != nil {
			c.lastState = corev1.ContainerState{Terminated: c.state.Terminated}
		}
	}
	c.everRan = true
	c.failures = 0
	c.imageID = "file://" + l.imageDir
	// The last run's message is in its terminated state by now: its file can go.
	if err := dropFile(c.termLog); err != nil {
		w.log.Error(err, "Failed to remove the termination-log file of the last run", "container", c.spec.Name)
	}
	c.termLog = l.termLog
	fail := func(err error) bool {
		w.log.Error(err, "Failed to start container", "container", c.spec.Name)
		w.n.event(pod, corev1.EventTypeWarning, "Failed", "Error: failed to start container %s: %v", c.spec.Name, err)
		c.containerID = ""
		w.recordExit(c, nil, 128, reasonStartError, err.Error(), now, now)
		return false
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fail(fmt.Errorf("failed to create log folder: %w", err))
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(fmt.Errorf("failed to open log file: %w", err))
	}
	defer logFile.Close()
	logInfo, err := logFile.Stat()
	if err != nil {
		return fail(fmt.Errorf("failed to read the log file's size: %w", err))
	}
	argv := w.shimArgv(l.view, l.argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = l.env
	cmd.SysProcAttr = shimSysProcAttr()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	probeCtx, cancel := context.WithCancel(ctx)
	p := &process{
		pid: cmd.Process.Pid, startedAt: now, done: make(chan struct{}), cancel: cancel, view: l.view, env: l.env,
		termLog: l.termLog, logPath: logPath, logStart: logInfo.Size(),
	}
	c.proc = p
	c.containerID = "process://" + strconv.Itoa(p.pid)
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Truncate(time.Second))}}
	c.started = c.spec.StartupProbe == nil
	c.probeReady = false
	w.log.V(1).Info("Started container", "container", c.spec.Name, "pid", p.pid, "argv", l.argv)
	w.n.event(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	go w.wait(c, p, cmd)
	go w.probe(probeCtx, pod, c, p, ip)
	return true
}

// wait reaps p and records its exit.
func (w *podWorker) wait(c *container, p *process, cmd *exec.Cmd) {
	err := cmd.Wait()
	code := int32(0)
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int32(ws.Signal())
		} else {
			code = int32(cmd.ProcessState.ExitCode())
		}
	} else if err != nil {
		code = 128
	}
	// Like a container runtime when the main process ends, kill what it left behind.
	p.signal(sigKill)
	p.cancel()
	reason := reasonCompleted
	if code != 0 {
		reason = reasonError
	}
	finished := time.Now()
	// c.spec never changes, so it may be read without the mutex.
	message := readTerminationMessage(&c.spec, p, code)
	w.mu.Lock()
	w.recordExit(c, p, code, reason, message, p.startedAt, finished)
	w.mu.Unlock()
	close(p.done)
	w.poke()
}

// recordExit records that c's run (p, nil when it never started) ended; the worker's mutex
// must be held.
func (w *podWorker) recordExit(c *container, p *process, code int32, reason, message string, started, finished time.Time) {
	killedBy := ""
	if p != nil {
		killedBy = p.killedBy
		c.proc = nil
	}
	c.started, c.probeReady = false, false
	term := &corev1.ContainerStateTerminated{
		ExitCode:    code,
		Reason:      reason,
		Message:     message,
		StartedAt:   metav1.NewTime(started.Truncate(time.Second)),
		FinishedAt:  metav1.NewTime(finished.Truncate(time.Second)),
		ContainerID: c.containerID,
	}
	c.state = corev1.ContainerState{Terminated: term}
	w.log.V(1).Info("Container exited", "container", c.spec.Name, "exitCode", code, "killedBy", killedBy)
	switch killedBy {
	case killedByNodeStop:
		return // no back-off: Start restarts it at once
	case killedByPod:
		return // the pod is ending: nothing restarts
	}
	// The back-off resets once a run lasted as long as the kubelet's back-off entries live.
	if finished.Sub(started) >= 2*w.n.cfg.MaxRestartBackoff {
		c.crashes = 0
	}
	c.crashes++
	if !shouldRestart(w.policy, c.init, code) {
		return
	}
	delay := restartDelay(c.crashes, w.n.cfg.RestartBackoff, w.n.cfg.MaxRestartBackoff)
	c.notBefore = finished.Add(delay)
	if delay > 0 {
		c.lastState = corev1.ContainerState{Terminated: term}
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  reasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay, c.spec.Name, w.name, w.ns, w.uid),
		}}
	}
}

// killedBy values of a process.
const (
	killedByNodeStop = "node stop"
	killedByProbe    = "probe"
	killedByPod      = "pod termination"
	killedByFault    = "fault"
)

// kill stops p: SIGTERM, then SIGKILL when it has not exited after grace. It does not wait.
func (w *podWorker) kill(p *process, grace time.Duration, why string) {
	w.mu.Lock()
	if p.killedBy == "" {
		p.killedBy = why
	}
	w.mu.Unlock()
	if grace <= 0 {
		p.signal(sigKill)
		return
	}
	p.signal(sigTerm)
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.signal(sigKill)
		}
	}()
}

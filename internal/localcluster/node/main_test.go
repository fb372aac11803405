package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	etcdpilotv1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
)

// shimArg as the test binary's first argument makes it run ShimMain instead of the tests:
// the nodes under test use the test binary as their shim.
const shimArg = "__process_node_shim__"

// Images the tests' ImageResolver knows: the operator's default etcd image (as the chart
// renders it) and a busybox made of the host's shell.
const (
	etcdImage    = etcdpilotv1alpha1.DefaultImageRepository + ":v3.6.16"
	busyboxImage = "local/busybox:1"
	// shell is the command of busybox pods: the image folder holds sh, a link to /bin/sh.
	shell = "/usr/local/bin/sh"
)

var (
	env       *testenv.Env
	clientset kubernetes.Interface
	// testIPs is shared by every node of the test binary, as by the nodes of one cluster.
	testIPs = NewIPAllocator("127.77")
	// busyboxDir is the folder that plays the busybox image.
	busyboxDir string
	// volumesDir holds the volumes of the test binary's provisioner.
	volumesDir string
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == shimArg {
		err := ShimMain(os.Args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(ShimFailedExitCode)
	}
	if os.Geteuid() != 0 && !userns.Inside() {
		if code, err := runInUserNamespace(); err == nil {
			os.Exit(code)
		} else {
			noNamespaces = err.Error()
		}
	}
	os.Exit(run(m))
}

// noNamespaces says why the tests cannot create mount namespaces ("" when they can); the
// tests that run shims skip with it.
var noNamespaces string

// needNamespaces skips t when the tests cannot create mount namespaces.
func needNamespaces(t *testing.T) {
	t.Helper()
	if noNamespaces != "" {
		t.Skipf("runs shims, which need mount namespaces: %s", noNamespaces)
	}
}

// runInUserNamespace runs this test binary again, with the same arguments, in a user namespace
// mapping this user to root and a mount namespace of its own, as the local cluster runs for a
// user other than root, and returns its exit code. It fails when no user namespace is to be
// had, saying why.
func runInUserNamespace() (int, error) {
	probe := userns.ReadProbe()
	if _, err := userns.Check(probe); err != nil {
		return 0, err
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	userns.Apply(cmd.SysProcAttr, probe)
	if err := cmd.Start(); err != nil {
		return 0, userns.Explain(probe, err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return max(exit.ExitCode(), 1), nil // -1 when killed by a signal
	}
	return 0, err
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "process-node-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	busyboxDir = filepath.Join(dir, "busybox")
	if err := os.Mkdir(busyboxDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Symlink("/bin/sh", filepath.Join(busyboxDir, "sh")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	clientset, err = kubernetes.NewForConfig(env.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// One provisioner, as in a cluster: two would race for the same claims.
	volumesDir = filepath.Join(dir, "volumes")
	ctx, cancel := context.WithCancel(context.Background())
	provisioned := make(chan error, 1)
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	go func() { provisioned <- RunProvisioner(ctx, clientset, volumesDir, logger) }()
	defer func() {
		cancel()
		if err := <-provisioned; err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	return m.Run()
}

// resolveImage is the tests' ImageResolver: the etcd build of the repository and a busybox
// made of the host's shell.
func resolveImage(image string) (string, error) {
	switch image {
	case busyboxImage:
		return busyboxDir, nil
	case etcdImage:
		dir, err := filepath.Abs("../../../bin/etcd/v3.6.16")
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
			return "", fmt.Errorf("etcd 3.6.16 is not built (run hack/build-etcd.sh 3.6.16): %w", err)
		}
		return dir, nil
	default:
		return "", fmt.Errorf("image %s is unknown to this machine", image)
	}
}

// fakeNames is a NameView that remembers what it was told.
type fakeNames struct {
	mu      sync.Mutex
	entries map[string][]string // owner -> ip, names...
}

func (f *fakeNames) Set(owner, ip string, names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.entries == nil {
		f.entries = map[string][]string{}
	}
	f.entries[owner] = append([]string{ip}, names...)
	return nil
}

func (f *fakeNames) Remove(owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.entries, owner)
	return nil
}

// resolve returns the IP name resolves to, or "".
func (f *fakeNames) resolve(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.entries {
		if slices.Contains(e[1:], name) {
			return e[0]
		}
	}
	return ""
}

// testNode is a node running for one test.
type testNode struct {
	*Node
	names *fakeNames
	dir   string
	stop  func() // cancels Run and waits for it
}

// startNode runs a node named like the test's namespace ns, with fast back-off and
// heartbeats, and stops it when the test ends.
func startNode(t *testing.T, ns string, tweak ...func(*Config)) *testNode {
	t.Helper()
	needNamespaces(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	names := &fakeNames{}
	cfg := Config{
		Name:              ns,
		Zone:              "zone-a",
		Client:            clientset,
		Dir:               t.TempDir(),
		Images:            resolveImage,
		IPs:               testIPs,
		Names:             names,
		Shim:              []string{exe, shimArg},
		Log:               testr.NewWithOptions(t, testr.Options{Verbosity: 1}),
		RestartBackoff:    200 * time.Millisecond,
		MaxRestartBackoff: 2 * time.Second,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.leaseInterval = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testNode{Node: n, names: names, dir: cfg.Dir, stop: stop}
}

// eventually polls cond every 50ms until it holds, failing the test after timeout with cond's
// last explanation.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPod waits until the pod satisfies cond and returns it.
func waitPod(t *testing.T, ns, name string, timeout time.Duration, cond func(*corev1.Pod) (bool, string)) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, timeout, func() (bool, string) {
		p, err := clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		ok, why := cond(p)
		return ok, fmt.Sprintf("%s; phase %s, conditions %s, containers %s", why, p.Status.Phase, conditionsString(p), containersString(p))
	})
	return pod
}

// waitPodGone waits until the pod object is deleted.
func waitPodGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() (bool, string) {
		_, err := clientset.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("pod still exists (err %v)", err)
	})
}

func conditionsString(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	return strings.Join(parts, ",")
}

func containersString(p *corev1.Pod) string {
	var parts []string
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		state := "?"
		switch {
		case s.State.Running != nil:
			state = "running"
		case s.State.Waiting != nil:
			state = "waiting(" + s.State.Waiting.Reason + ": " + s.State.Waiting.Message + ")"
		case s.State.Terminated != nil:
			state = fmt.Sprintf("terminated(%d %s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		}
		parts = append(parts, fmt.Sprintf("%s:%s ready=%v restarts=%d", s.Name, state, s.Ready, s.RestartCount))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// podCondition reports whether the pod's condition t is True.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) bool {
	c, ok := findCondition(p.Status.Conditions, t)
	return ok && c.Status == corev1.ConditionTrue
}

func isReady(p *corev1.Pod) (bool, string) { return podCondition(p, corev1.PodReady), "want Ready" }

func isRunning(p *corev1.Pod) (bool, string) {
	return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil, "want the container running"
}

// shellPod is a pod of one busybox container running script with sh -c on node.
func shellPod(ns, name, node, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   busyboxImage,
				Command: []string{shell, "-c", script},
			}},
		},
	}
}

func createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := clientset.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("failed to create pod %s: %v", pod.Name, err)
	}
	return got
}

// readLog returns a container's log so far.
func readLog(n *testNode, ns, pod, container string) string {
	b, err := os.ReadFile(LogPath(n.dir, ns, pod, container))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

// processAlive reports whether the process of a container ID (process://PID) exists.
func processAlive(containerID string) bool {
	pid, ok := strings.CutPrefix(containerID, "process://")
	if !ok {
		return false
	}
	_, err := os.Stat("/proc/" + pid)
	return err == nil
}

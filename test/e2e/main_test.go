// Package e2e runs etcd-pilot end to end on the local cluster (`etcd-pilot-local up`): a real
// kube-apiserver, controller-manager and scheduler, process nodes running real etcd members,
// and the operator. One local cluster serves the whole suite; each test gets a namespace.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

var (
	root    string // repository root
	bin     string // bin/etcd-pilot-local, which runs bin/etcd-pilot as the operator
	dir     string // the local cluster's folder
	k8s     client.Client
	upStart time.Duration
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The suite's clients log nothing; without a logger controller-runtime prints a warning
	// with a goroutine's stack the first time one is made, which read like a failure in CI's
	// output.
	log.SetLogger(logr.Discard())
	wd, _ := os.Getwd()
	root = filepath.Join(wd, "..", "..")
	bin = filepath.Join(root, "bin", "etcd-pilot-local")
	// Builds both binaries: the local cluster's and the operator's it runs.
	if out, err := exec.Command("make", "-C", root, "build").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to build etcd-pilot and etcd-pilot-local: %v\n%s", err, out)
		return 1
	}
	var err error
	dir, err = os.MkdirTemp("", "etcd-pilot-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// ETCD_PILOT_E2E_KEEP set to anything but empty keeps the local cluster's folder
	// (component, operator and pod logs) after the run, to read a failure's logs in full.
	if os.Getenv("ETCD_PILOT_E2E_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		defer fmt.Fprintf(os.Stderr, "kept the local cluster's folder %s\n", dir)
	}

	up, err := startLocal()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		dumpLogs()
		return 1
	}
	stopped := false
	defer func() {
		if !stopped {
			stopLocal(up)
		}
	}()

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// client-go's default limit (5 requests per second) would pace the suite's samplers: each
	// lists its cluster's pods every sampleEvery, so ten clusters' samplers sampled every 2 s
	// instead of every 250 ms.
	cfg.QPS, cfg.Burst = 100, 200
	k8s, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		dumpLogs()
	}
	stopLocal(up)
	stopped = true
	// Stopping the local cluster leaves no process of it behind.
	if left := processesUnder(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "processes left after the local cluster stopped:\n%s\n", strings.Join(left, "\n"))
		return 1
	}
	return code
}

// processesUnder lists the processes whose command line names dir, or that see a bind mount
// from dir (pod processes: the shim execs them in a mount namespace with the pod's folders).
func processesUnder(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		mounts, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if !bytes.Contains(b, []byte(dir)) && !bytes.Contains(mounts, []byte(dir)) {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// startLocal runs `etcd-pilot-local up` and waits for its ready line.
func startLocal() (*exec.Cmd, error) {
	start := time.Now()
	// The suite's MinIO (internal/testutil/minio) listens on 127.0.0.1 over plain HTTP, which
	// the operator's outbound policy refuses by default: the suite allows both, explicitly, as
	// an administrator would. Link-local and metadata addresses stay refused.
	cmd := exec.Command(bin, "up", "--dir", dir,
		"--operator-arg=--allowed-endpoints=127.0.0.0/8", "--operator-arg=--allow-insecure-endpoints")
	cmd.Dir = root
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start local cluster: %w", err)
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, "local up:", line)
			if strings.Contains(line, "ready") {
				ready <- nil
				_, _ = io.Copy(os.Stderr, stdout)
				return
			}
		}
		ready <- fmt.Errorf("local up exited before it was ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			return nil, err
		}
	case <-time.After(15 * time.Minute): // the first run builds the Kubernetes binaries
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("local cluster not ready after 15 minutes")
	}
	upStart = time.Since(start)
	fmt.Fprintf(os.Stderr, "local cluster up in %s\n", upStart.Round(100*time.Millisecond))
	return cmd, nil
}

func stopLocal(up *exec.Cmd) {
	_ = up.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = up.Process.Kill()
		fmt.Fprintln(os.Stderr, "local cluster did not stop within 2 minutes; killed")
	}
}

// dumpLogs prints the tail of the local cluster's component logs and of the operator's, for
// failed runs.
func dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, f := range files {
		if !strings.Contains(f, "local.log") && !strings.Contains(f, "controller-manager") {
			continue
		}
		b, _ := os.ReadFile(f)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		fmt.Fprintf(os.Stderr, "==== %s (tail)\n%s\n", f, b)
	}
	b := operatorLogs()
	if len(b) > 12000 {
		b = b[len(b)-12000:]
	}
	fmt.Fprintf(os.Stderr, "==== the operator's pods (tail)\n%s\n", b)
}

// operatorNamespace and operatorLabels find the operator config/default installs.
const operatorNamespace = "etcd-pilot-system"

var operatorLabels = client.MatchingLabels{"app.kubernetes.io/name": "etcd-pilot"}

// operatorPods lists the operator's pods.
func operatorPods(t testing.TB) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(operatorNamespace), operatorLabels); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// operatorLogs returns the logs of every pod the operator has had, each file's lines in order
// (the process nodes keep a pod's log after the pod is gone).
func operatorLogs() string {
	files, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "logs", operatorNamespace+"_*_manager.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "---- %s\n%s", filepath.Base(f), data)
	}
	return b.String()
}

// local runs `etcd-pilot-local ARGS...` against the suite's cluster.
func local(t testing.TB, args ...string) (string, error) {
	t.Helper()
	full := append([]string{args[0], "--dir", dir}, args[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// etcdctl runs etcdctl in the local cluster's name view.
func etcdctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return local(t, append([]string{"exec", "--", "etcdctl", "--command-timeout=5s"}, args...)...)
}

var invalidName = regexp.MustCompile(`[^a-z0-9-]+`)

// restrictedPodSecurity labels a namespace so the API server admits only pods that meet the
// restricted Pod Security Standard: every pod the chart and the operator create (members,
// backup and restore pods) is checked by the real admission in every scenario.
var restrictedPodSecurity = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
}

// namespace creates a namespace for the test (restricted Pod Security enforced) and deletes
// it afterwards.
func namespace(t testing.TB) string {
	t.Helper()
	name := invalidName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimRight(name, "-") + "-", Labels: restrictedPodSecurity}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	testStarts.Store(t, &testStart{at: time.Now()})
	t.Cleanup(func() {
		logOperatorIfFailed(t)
		testStarts.Delete(t)
	})
	return ns.Name
}

// testStarts holds when each running test made its namespace (a *testStart by testing.TB).
var testStarts sync.Map

type testStart struct {
	at     time.Time
	logged sync.Once
}

// logOperatorIfFailed logs, once, what the operator did since the failed test t began. The
// namespace's cleanup calls it, and so does restartOperator before it replaces the operator's
// pods: a test's own cleanup that restarts the operator runs before the namespace's, and
// would otherwise replace the pods whose state and restarts the log is for.
func logOperatorIfFailed(t testing.TB) {
	if !t.Failed() {
		return
	}
	if v, ok := testStarts.Load(t); ok {
		s := v.(*testStart)
		s.logged.Do(func() {
			t.Logf("the operator while the test ran:\n%s", operatorWindow(s.at.Add(-time.Second), 200))
		})
	}
}

// logTS finds the time stamp of a zap JSON log line.
var logTS = regexp.MustCompile(`"ts":"([^"]+)"`)

// operatorWindow is what the operator did since from: the state of its pods, then the last
// max lines its containers logged since then, in time order, each with its pod. The log the
// suite prints at its end is the tail of every pod's file, which by then shows later tests.
func operatorWindow(from time.Time, max int) string {
	var b strings.Builder
	pods := &corev1.PodList{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k8s.List(ctx, pods, client.InNamespace(operatorNamespace), operatorLabels); err != nil {
		fmt.Fprintf(&b, "failed to list the operator's pods: %v\n", err)
	} else {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			for _, cs := range p.Status.ContainerStatuses {
				fmt.Fprintf(&b, ", %s ready %v restarts %d", cs.Name, cs.Ready, cs.RestartCount)
				if w := cs.State.Waiting; w != nil {
					fmt.Fprintf(&b, " waiting %s", w.Reason)
				}
				if l := cs.LastTerminationState.Terminated; l != nil {
					fmt.Fprintf(&b, " last exit %d at %s", l.ExitCode, l.FinishedAt.UTC().Format("15:04:05"))
				}
			}
			b.WriteString("\n")
		}
	}
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	files, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "logs", operatorNamespace+"_*_manager.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pod := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), operatorNamespace+"_"), "_manager.log")
		var at time.Time // lines without a stamp (a stack trace) go with the line before
		for _, l := range strings.Split(string(data), "\n") {
			if m := logTS.FindStringSubmatch(l); m != nil {
				if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
					at = ts
				}
			}
			if l != "" && !at.Before(from) {
				if len(l) > 600 {
					l = l[:600] + "..."
				}
				lines = append(lines, line{at, pod + " " + l})
			}
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	if len(lines) > max {
		fmt.Fprintf(&b, "(%d earlier lines left out)\n", len(lines)-max)
		lines = lines[len(lines)-max:]
	}
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// eventually polls cond until it returns nil or the timeout passes.
var eventually = testutil.Eventually

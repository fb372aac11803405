package localcli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	etcdpilotv1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"

	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// TestMain lets the test binary play etcd-pilot-local (cmd/etcd-pilot-local's main is one call
// of Run): a first argument that is not a flag, such as up, exec or the nodes' shim, runs Run
// instead of the tests. TestUpAsAnotherUser runs a copy of it, so it tests this package's code
// without building the binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestUpWithoutNamespacesSaysHowToGetThem(t *testing.T) {
	readProbe = func() userns.Probe {
		return userns.Probe{Euid: 1000, Egid: 1000, Supported: true, Sysctls: map[string]string{userns.UnprivilegedClone: "0", userns.MaxUserNamespaces: "63432"}}
	}
	t.Cleanup(func() { readProbe = userns.ReadProbe })
	op := filepath.Join(t.TempDir(), "etcd-pilot")
	if err := os.WriteFile(op, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"up", "--dir", dir, "--operator-binary", op}, nil, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"etcd-pilot-local up: no mount namespaces for the local cluster: it needs mount namespaces of its own",
		"uid 1000 cannot have one: kernel.unprivileged_userns_clone is 0.",
		"`sudo sysctl -w kernel.unprivileged_userns_clone=1`",
		"or run it as root",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	// It says so before building or creating anything.
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("up created %s before finding it cannot run: %v", dir, err)
	}
}

// TestUpAsAnotherUser runs the local cluster as a user other than root, as `make demo` does for
// a developer who is not root: as root, the test runs it as nobody (uid and gid 65534); as
// another user, as that user. It starts one node, runs an etcd pod whose mount points are
// missing on the machine (so the shim must create them in copies of /, /var/lib, /etc and
// /dev), reaches etcd at the pod's IP from outside and by its name through exec, and checks
// that every file the cluster wrote belongs to the user, that nothing showed up on the
// machine, and that stopping it leaves no process behind. It skips where the kernel gives that
// user no user namespaces. It needs the Kubernetes and etcd builds (make tools builds them;
// else the test does, which takes minutes).
func TestUpAsAnotherUser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	start := time.Now()
	uid, gid := os.Geteuid(), os.Getegid()
	var cred *syscall.Credential
	if uid == 0 {
		uid, gid = 65534, 65534
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	asUser := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	probe := userns.ReadProbe()
	probe.Euid, probe.Egid = uid, gid
	if _, err := userns.Check(probe); err != nil {
		t.Skipf("the local cluster cannot run as uid %d here: %v", uid, err)
	}
	if out, err := asUser(exec.Command("unshare", "--user", "--map-root-user", "--mount", "true")).CombinedOutput(); err != nil {
		t.Skipf("uid %d gets no user namespace here (unshare --user --map-root-user --mount true: %v: %s)", uid, err, out)
	}

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := localcluster.FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	bins, err := localcluster.EnsureBinaries(root, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := asUser(exec.Command("sh", "-c", `test -r "$1" && test -x "$2" && test -x "$3"`, "sh",
		filepath.Join(root, "config", "crd", "bases"), filepath.Join(bins.Kube, "kube-apiserver"), filepath.Join(bins.Etcd, "etcd"))).CombinedOutput(); err != nil {
		t.Skipf("uid %d cannot read the repository at %s (every folder above it must be searchable by others): %v %s", uid, root, err, out)
	}

	// A folder of the user's own: the cluster's folder, and a copy of this test binary, which
	// plays etcd-pilot-local (see TestMain) and the operator's binary (not run: --operator=false).
	tmp, err := os.MkdirTemp("", "etcd-pilot-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "etcd-pilot-local")
	if err := copyExecutable(self, bin); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "cluster")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tmp, bin, dir} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "HOME="+tmp)

	t.Logf("prepared in %.1fs", time.Since(start).Seconds())
	upStart := time.Now()
	up := asUser(exec.Command(bin, "up", "--dir", dir, "--nodes", "1", "--operator=false", "--operator-binary", bin))
	up.Dir, up.Env = root, env
	var upErr testutil.SyncBuffer
	up.Stderr = &upErr
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "local cluster ready") {
				ready <- sc.Text()
			}
		}
		exited <- up.Wait()
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = up.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("up exited with %v:\n%s", err, upErr.String())
			}
		case <-time.After(time.Minute):
			_ = up.Process.Kill()
			t.Errorf("up did not stop within a minute after SIGTERM")
		}
	}
	t.Cleanup(stop)
	select {
	case line := <-ready:
		t.Logf("%s (%.1fs from the start)", line, time.Since(upStart).Seconds())
	case err := <-exited:
		t.Fatalf("up exited before it was ready (%v):\n%s\n%s", err, upErr.String(), tail(filepath.Join(dir, "logs", "local.log")))
	case <-time.After(2 * time.Minute):
		t.Fatalf("up not ready after 2 minutes:\n%s", upErr.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || !nodeReady(&nodes.Items[0]) {
		t.Fatalf("nodes: %+v, want one Ready", nodes.Items)
	}

	// Mount points no run has created on this machine: under /, /var/lib, /etc and /dev.
	tag := fmt.Sprintf("etcd-pilot-nonroot-%d", time.Now().UnixNano())
	hostPaths := []string{"/" + tag, "/var/lib/" + tag, "/etc/" + tag, "/dev/" + tag}
	podStart := time.Now()
	pod := etcdPod(tag)
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data:       map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller-manager creates the default ServiceAccount, which admission waits for.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Logf("creating the pod: %v", err)
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ip = p.Status.PodIP
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		p, _ := client.CoreV1().Pods("default").Get(context.Background(), pod.Name, metav1.GetOptions{})
		t.Fatalf("pod not Ready: %v\nstatus: %+v\nlog:\n%s\nnode log:\n%s", err, p.Status, tail(filepath.Join(dir, "nodes", "local-node-1", "logs", "default_"+pod.Name+"_etcd.log")), tail(filepath.Join(dir, "logs", "local-node-1.log")))
	}
	t.Logf("pod Ready at %s in %.1fs", ip, time.Since(podStart).Seconds())
	// From outside: the pod's loopback address needs no namespace.
	resp, err := http.Get("http://" + ip + ":2379/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"health":"true"`) {
		t.Errorf("etcd's /health at %s: %s", ip, body)
	}
	// Through exec, in the cluster's user and mount namespaces: the pod's name resolves there.
	put := asUser(exec.Command(bin, "exec", "--dir", dir, "--", "etcdctl", "--endpoints", "http://"+pod.Name+":2379", "put", "greeting", "hello"))
	put.Dir, put.Env = root, env
	if out, err := put.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Errorf("exec etcdctl put: %v: %s", err, out)
	}
	if wal, _ := filepath.Glob(filepath.Join(dir, "nodes", "local-node-1", "pods", "*", "volumes", "data", "data", "member", "wal")); len(wal) != 1 {
		t.Errorf("etcd's data is not in the pod's emptyDir")
	}
	// The shim made the pod's mount points in its own view only.
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists on the machine (%v): the shim must not create it there", p, err)
		}
	}

	// Processes of the cluster (the pod's too), to find any left behind after it stopped.
	procs := localcluster.Descendants(up.Process.Pid)
	stopStart := time.Now()
	stop()
	if !strings.Contains(upErr.String(), "local cluster stopped") {
		t.Errorf("up did not say it stopped:\n%s", upErr.String())
	}
	t.Logf("stopped in %.1fs", time.Since(stopStart).Seconds())
	if left := localcluster.KillLeftovers(procs, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left after the cluster stopped (now killed): %s", strings.Join(left, "; "))
	}
	if left := processesUsing(dir); len(left) > 0 {
		t.Errorf("processes that name or mount the cluster's folder after it stopped: %s", strings.Join(left, "; "))
	}

	// Everything in the cluster's folder is the user's, etcd's data included.
	var files, foreign int
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid {
			if foreign++; foreign <= 5 {
				t.Errorf("%s belongs to %d:%d, want %d:%d", path, st.Uid, st.Gid, uid, gid)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists on the machine after the cluster stopped (%v)", p, err)
		}
	}
	t.Logf("%d files, all of uid %d; %.1fs in all", files, uid, time.Since(start).Seconds())
}

// etcdPod is a one-member etcd whose data, configuration and termination log sit at paths
// named after tag under /, /var/lib, /etc and /dev.
func etcdPod(tag string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-0", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "etcd",
				Image: etcdpilotv1alpha1.DefaultImageRepository + ":v" + localcluster.EtcdVersion,
				Command: []string{"/usr/local/bin/etcd", "--name=etcd-0", "--data-dir=/var/lib/" + tag + "/data",
					"--listen-client-urls=http://$(POD_IP):2379", "--advertise-client-urls=http://$(POD_IP):2379",
					"--listen-peer-urls=http://$(POD_IP):2380", "--initial-advertise-peer-urls=http://$(POD_IP):2380",
					"--initial-cluster=etcd-0=http://$(POD_IP):2380"},
				Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: "/var/lib/" + tag},
					{Name: "scratch", MountPath: "/" + tag},
					{Name: "conf", MountPath: "/etc/" + tag},
				},
				WorkingDir:             "/" + tag,
				TerminationMessagePath: "/dev/" + tag,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(2379)}},
					PeriodSeconds: 1,
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
			},
		},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// processesUsing lists the processes whose command line names dir or that see a mount from it.
func processesUsing(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		mounts, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if bytes.Contains(cmdline, []byte(dir)) || bytes.Contains(mounts, []byte(dir)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// copyExecutable copies src to a new executable file dst.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// tail returns the last lines of the file at path.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Package lane holds the end-to-end scenarios of the real-node lane (etcd-pilot-local up
// --runtime=containerd): real kubelets, containerd, runc, CNI, kube-proxy and CoreDNS, the
// operator installed from its chart with its image under restricted Pod Security. TestMain
// starts the lane and runs this test binary again inside the lane's network (etcd-pilot-local
// exec), where the scenarios reach pods by their addresses and names as a pod would.
package lane

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
	"github.com/etcd-pilot/etcd-pilot/internal/repo"
)

// insideEnv marks the run inside the lane.
const insideEnv = "ETCD_PILOT_LANE_TESTS_INSIDE"

// laneStartTimeout covers a first build of every binary (hack/build-node.sh) and the start.
const laneStartTimeout = 30 * time.Minute

var (
	root       string
	laneDir    string
	localBin   string
	restConfig *rest.Config
	kube       kubernetes.Interface
	k8s        client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	wd, _ := os.Getwd()
	if root, err = repo.FindRoot(wd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	laneDir = filepath.Join(root, ".local-lane-test")
	if d := os.Getenv("ETCD_PILOT_LANE_DIR"); d != "" {
		laneDir = d // two runs side by side (each lane has its own namespaces and cgroups)
	}
	localBin = filepath.Join(root, "bin", "etcd-pilot-local")
	if os.Getenv(insideEnv) == "1" {
		os.Exit(inside(m))
	}
	if err := localcluster.CheckLaneMachine(); err != nil {
		fmt.Printf("SKIP: the real-node lane cannot run on this machine, its scenarios did not run: %v\n", err)
		os.Exit(0)
	}
	os.Exit(outside())
}

// outside starts the lane, runs this binary inside it, and stops the lane.
func outside() int {
	if out, err := exec.Command("make", "-C", root, "build").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to build etcd-pilot and etcd-pilot-local: %v\n%s", err, out)
		return 1
	}
	_ = exec.Command(localBin, "down", "--dir", laneDir).Run() // one a killed run left
	// The backup scenario's MinIO listens on the lane's bridge over plain HTTP, which the
	// operator's outbound policy refuses by default: the lane allows it, explicitly, as an
	// administrator would, and narrows what a tenant may name to the bridge's range.
	args := []string{"up", "--runtime=containerd", "--dir", laneDir, "-v",
		"--operator-value=outbound.allowedEndpoints={10.200.0.0/24}", "--operator-value=outbound.allowInsecureEndpoints=true"}
	if *peerBin != "" {
		// The comparison's other operator runs from an image the nodes import at start.
		tmp, err := os.MkdirTemp("", "etcd-pilot-lane-peer-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		archive, err := peerArchive(tmp)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		args = append(args, "--image-archive="+archive)
	}
	up := exec.Command(localBin, args...)
	up.Dir = root
	up.Stderr = os.Stderr
	stdout, err := up.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	if err := up.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exited := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Println(sc.Text())
			if strings.Contains(sc.Text(), "lane ready in") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(os.Stdout, stdout)
	}()
	go func() { exited <- up.Wait() }()
	select {
	case <-ready:
	case err := <-exited:
		fmt.Fprintf(os.Stderr, "the real-node lane did not start: %v (logs in %s)\n", err, filepath.Join(laneDir, "logs"))
		return 1
	case <-time.After(laneStartTimeout):
		_ = up.Process.Kill()
		fmt.Fprintf(os.Stderr, "the real-node lane did not start within %s\n", laneStartTimeout)
		return 1
	}
	fmt.Printf("real-node lane up in %.1fs (with any build)\n", time.Since(start).Seconds())
	self, _ := os.Executable()
	in := exec.Command(localBin, append([]string{"exec", "--dir", laneDir, "--", self}, os.Args[1:]...)...)
	in.Dir = filepath.Join(root, "test", "lane")
	in.Env = append(os.Environ(), insideEnv+"=1")
	in.Stdout, in.Stderr = os.Stdout, os.Stderr
	code := 0
	if err := in.Run(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	stopped := time.Now()
	if out, err := exec.Command(localBin, "down", "--dir", laneDir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "failed to stop the lane: %v\n%s", err, out)
		code = 1
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		fmt.Fprintln(os.Stderr, "the lane's up process did not exit")
		code = 1
	}
	fmt.Printf("real-node lane stopped in %.1fs\n", time.Since(stopped).Seconds())
	if left := leftovers(); left != "" {
		fmt.Fprintf(os.Stderr, "the lane left behind: %s\n", left)
		code = 1
	}
	return code
}

// leftovers names what a stopped lane must not leave: its cgroups, or a containerd.
func leftovers() string {
	var left []string
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", realnode.LaneCgroup(laneDir))); err == nil {
		left = append(left, "cgroup "+realnode.LaneCgroup(laneDir))
	}
	for _, p := range localcluster.Descendants(1) {
		if strings.Contains(p.Cmd, laneDir) {
			left = append(left, p.String())
		}
	}
	return strings.Join(left, "; ")
}

// inside runs the scenarios in the lane's network.
func inside(m *testing.M) int {
	var err error
	restConfig, err = clientcmd.BuildConfigFromFlags("", filepath.Join(laneDir, "kubeconfig"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig.QPS, restConfig.Burst = 50, 100
	if kube, err = kubernetes.NewForConfig(restConfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scheme := clientScheme()
	if k8s, err = client.New(restConfig, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kube.CoreV1().Nodes().List(ctx, metav1ListAll); err != nil {
		fmt.Fprintf(os.Stderr, "the lane's API server does not answer from inside: %v\n", err)
		return 1
	}
	return m.Run()
}

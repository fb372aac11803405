package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/controlplane"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/node"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

// Versions of the real-node lane's parts beyond the control plane (hack/build-node.sh).
const (
	ContainerdVersion = "v2.4.2"
	CoreDNSVersion    = "v1.14.7"
)

// RuntimeContainerd names the real-node lane (up --runtime=containerd).
const RuntimeContainerd = "containerd"

// LaneNodeCommand is the hidden command of etcd-pilot-local that runs a lane node
// (realnode.RunNode) in the namespaces StartNode made.
const LaneNodeCommand = "lane-node"

// LaneOptions configures UpLane.
type LaneOptions struct {
	// Dir is the lane's folder (absolute).
	Dir string
	// Nodes is the number of nodes, lane-node-1..N, in zones zone-a, zone-b...
	Nodes int
	// Operator installs the operator from its chart (charts/etcd-pilot) with the operator's
	// image built from OperatorBinary, into a namespace under restricted Pod Security.
	Operator bool
	// OperatorValues are further --set values for the operator's chart.
	OperatorValues []string
	// ExtraImages are further image archives (OCI layouts in tar files) every node imports,
	// such as another operator's image for a comparison.
	ExtraImages []string
	Binaries    Binaries
	// Executable is etcd-pilot-local: the nodes run its LaneNodeCommand, and its pause
	// command is the pods' sandbox image.
	Executable     string
	OperatorBinary string
	Progress       func(msg string)
}

// LaneBinaries are the lane's binaries beyond Binaries.
type LaneBinaries struct {
	Containerd string // containerd, ctr, containerd-shim-runc-v2
	CoreDNS    string // coredns
	Runc       string
	Helm       string
}

// LocateLaneBinaries returns where hack/build-node.sh puts the lane's binaries, and the
// parts that are missing, each with how to get it.
func LocateLaneBinaries(root string) (LaneBinaries, []string) {
	var missing []string
	b := LaneBinaries{
		Containerd: filepath.Join(root, "bin", "containerd", ContainerdVersion),
		CoreDNS:    filepath.Join(root, "bin", "coredns", CoreDNSVersion),
		Runc:       "/usr/sbin/runc",
	}
	// hack/build-helm.sh puts helm into bin/helm/<version>/.
	if found, _ := filepath.Glob(filepath.Join(root, "bin", "helm", "v*", "helm")); len(found) > 0 {
		b.Helm = found[len(found)-1]
	} else {
		missing = append(missing, "helm (hack/build-helm.sh)")
	}
	check := func(path, how string) {
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, path+" ("+how+")")
		}
	}
	kube := filepath.Join(root, "bin", "k8s", KubeVersion)
	check(filepath.Join(kube, "kubelet"), "hack/build-node.sh")
	check(filepath.Join(kube, "kube-proxy"), "hack/build-node.sh")
	check(filepath.Join(b.Containerd, "containerd"), "hack/build-node.sh")
	check(filepath.Join(b.Containerd, "containerd-shim-runc-v2"), "hack/build-node.sh")
	check(filepath.Join(b.CoreDNS, "coredns"), "hack/build-node.sh")
	check(b.Runc, "Debian's runc: hack/build-node.sh installs it")
	check("/usr/lib/cni/bridge", "Debian's containernetworking-plugins: hack/build-node.sh installs it")
	check("/usr/lib/cni/host-local", "Debian's containernetworking-plugins: hack/build-node.sh installs it")
	for cmd, pkg := range map[string]string{"iptables": "iptables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd+" (Debian's "+pkg+": hack/build-node.sh installs it)")
		}
	}
	return b, missing
}

// EnsureLaneBinaries builds and installs what the lane needs beyond EnsureBinaries
// (hack/build-node.sh, hack/build-helm.sh; cached).
func EnsureLaneBinaries(root string, progress io.Writer) error {
	for _, script := range []string{"hack/build-node.sh", "hack/build-helm.sh"} {
		cmd := exec.Command(filepath.Join(root, script))
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = io.Discard, progress
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("failed to build with %s: %w", script, err)
		}
	}
	return nil
}

// CheckLaneMachine says what this machine lacks for the lane, beyond binaries: root, cgroup v1
// hierarchies (the kubelet runs with failCgroupV1: false), veth and bridge links.
func CheckLaneMachine() error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "the real-node lane runs as root (containerd, runc and the kubelet need it); the process nodes (up without --runtime) do not")
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err != nil {
		problems = append(problems, "no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids (the lane supports this machine kind's cgroup v1 layout)")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Lane is a running real-node lane. Its methods implement Controller.
type Lane struct {
	Kubeconfig string
	opts       LaneOptions
	bins       LaneBinaries
	log        logr.Logger
	logFile    *os.File
	cp         *controlplane.ControlPlane
	client     kubernetes.Interface
	images     []string

	mu    sync.Mutex
	nodes map[int]*realnode.NodeProcess

	// mountpoints are the machine folders the lane created for the nodes' mounts.
	mountpoints []string

	aux     []*controlplane.Process // CoreDNS, the lane's own kube-proxy
	auxStop context.CancelFunc
	auxWG   sync.WaitGroup

	failed   chan error
	stopOnce sync.Once
}

// laneNodeStopGrace bounds how long a node may take to stop (kubelet, containers, containerd).
const laneNodeStopGrace = 30 * time.Second

// UpLane starts the lane. It must run in a new network and mount namespace (the lane's), as
// root. On error it stops what it started; the caller must call Stop.
func UpLane(ctx context.Context, opts LaneOptions) (l *Lane, err error) {
	start := time.Now()
	if opts.Progress == nil {
		opts.Progress = func(string) {}
	}
	bins, missing := LocateLaneBinaries(opts.Binaries.Root)
	if len(missing) > 0 {
		return nil, fmt.Errorf("the real-node lane needs: %s", strings.Join(missing, "; "))
	}
	logs := filepath.Join(opts.Dir, "logs")
	for _, d := range []string{"nodes", "volumes", "logs", "images"} {
		if d != "images" && d != "logs" {
			if err := os.RemoveAll(filepath.Join(opts.Dir, d)); err != nil {
				return nil, err
			}
		}
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	l = &Lane{opts: opts, bins: bins, nodes: map[int]*realnode.NodeProcess{}, failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			l.Stop()
		}
	}()
	l.logFile, err = os.OpenFile(filepath.Join(logs, "lane.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return l, err
	}
	l.log = fileLogr(l.logFile)
	klog.SetLogger(l.log.WithName("client-go"))
	step := func(msg string) {
		l.log.Info(msg, "at", time.Since(start).Round(100*time.Millisecond).String())
		opts.Progress(msg)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return l, fmt.Errorf("failed to make the mount tree private: %w", err)
	}
	if err := realnode.SetUpLaneNetwork(); err != nil {
		return l, err
	}
	// Every process of the lane resolves cluster names through the cluster's DNS.
	resolv := filepath.Join(opts.Dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+realnode.DNSServiceIP+"\nsearch default.svc."+realnode.ClusterDomain+" svc."+realnode.ClusterDomain+" "+realnode.ClusterDomain+"\noptions ndots:5\n"), 0o644); err != nil {
		return l, err
	}
	if err := syscall.Mount(resolv, "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		return l, fmt.Errorf("failed to bind-mount the lane's resolv.conf: %w", err)
	}
	step("lane network ready")

	// The images, while nothing else runs.
	if l.images, err = buildLaneImages(opts); err != nil {
		return l, err
	}
	l.images = append(l.images, opts.ExtraImages...)
	step(fmt.Sprintf("%d images built", len(l.images)))

	l.cp, err = controlplane.Start(ctx, controlplane.Config{
		Dir:        opts.Dir,
		KubeBinDir: opts.Binaries.Kube,
		EtcdBinDir: opts.Binaries.Etcd,
		Address:    realnode.BridgeIP,
		Progress:   step,
	})
	if err != nil {
		return l, err
	}
	l.Kubeconfig = l.cp.Kubeconfig
	if l.client, err = kubernetes.NewForConfig(l.cp.RESTConfig); err != nil {
		return l, err
	}
	go func() {
		if err := <-l.cp.Failed(); err != nil {
			l.fail(err)
		}
	}()
	if err := installCRDs(ctx, l.cp.RESTConfig, filepath.Join(opts.Binaries.Root, "config", "crd", "bases")); err != nil {
		return l, err
	}
	for _, sc := range node.StorageClasses() {
		if _, err := l.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return l, fmt.Errorf("failed to create StorageClass %s: %w", sc.Name, err)
		}
	}
	auxCtx, auxStop := context.WithCancel(context.Background())
	l.auxStop = auxStop
	l.auxWG.Go(func() {
		if err := node.RunProvisioner(auxCtx, l.client, filepath.Join(opts.Dir, "volumes"), l.log); err != nil && auxCtx.Err() == nil {
			l.fail(fmt.Errorf("volume provisioner stopped: %w", err))
		}
	})
	if err := l.startDNS(ctx); err != nil {
		return l, err
	}
	step("CRDs, StorageClass and CoreDNS")

	if l.mountpoints, err = realnode.PrepareMountpoints(); err != nil {
		return l, fmt.Errorf("failed to create the nodes' mount points: %w", err)
	}
	for i := 1; i <= opts.Nodes; i++ {
		if err := l.startNode(i); err != nil {
			return l, err
		}
	}
	if err := l.waitNodesReady(ctx, 3*time.Minute); err != nil {
		return l, err
	}
	if err := l.startLaneProxy(); err != nil {
		return l, err
	}
	step(fmt.Sprintf("%d nodes ready", opts.Nodes))

	if opts.Operator {
		if err := l.installOperator(ctx); err != nil {
			return l, err
		}
		step("operator running (charts/etcd-pilot, restricted Pod Security)")
	}
	return l, nil
}

// buildLaneImages writes the lane's image archives into Dir/images: the pause image, the
// operator's (from the Dockerfile) and one etcd image per built release.
func buildLaneImages(opts LaneOptions) ([]string, error) {
	dir := filepath.Join(opts.Dir, "images")
	repo, err := realnode.ChartEtcdRepository(filepath.Join(opts.Binaries.Root, "charts", "etcd-cluster", "values.yaml"))
	if err != nil {
		return nil, err
	}
	imgs := []realnode.Image{realnode.PauseImageOf(opts.Executable)}
	op, err := realnode.OperatorImageOf(filepath.Join(opts.Binaries.Root, "Dockerfile"), opts.OperatorBinary)
	if err != nil {
		return nil, err
	}
	imgs = append(imgs, op)
	for _, v := range realnode.EtcdVersions(opts.Binaries.EtcdRoot) {
		img, err := realnode.EtcdImage(repo, v, filepath.Join(opts.Binaries.EtcdRoot, "v"+v))
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	var files []string
	for _, img := range imgs {
		name := strings.NewReplacer("/", "_", ":", "_").Replace(img.Name) + ".tar"
		file := filepath.Join(dir, name)
		if _, err := realnode.WriteArchiveFile(file, img); err != nil {
			return nil, err
		}
		files = append(files, file)
	}
	return files, nil
}

// startDNS starts CoreDNS on the bridge and the kube-dns Service in front of it.
func (l *Lane) startDNS(ctx context.Context) error {
	logs := filepath.Join(l.opts.Dir, "logs")
	corefile := filepath.Join(l.opts.Dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(realnode.Corefile(l.Kubeconfig)), 0o644); err != nil {
		return err
	}
	dns, err := controlplane.StartProcess("coredns", filepath.Join(l.bins.CoreDNS, "coredns"), []string{"-conf", corefile}, nil, filepath.Join(logs, "coredns.log"), true)
	if err != nil {
		return err
	}
	l.aux = append(l.aux, dns)
	l.watchAux(dns)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: realnode.DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if _, err := l.client.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create the kube-dns Service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-lane", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "etcd-pilot-local"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{realnode.BridgeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	if _, err := l.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create the kube-dns EndpointSlice: %w", err)
	}
	return nil
}

// startLaneProxy starts a kube-proxy of the lane's own network namespace, so the lane's
// processes (the tests) reach Services as pods do. It runs once the nodes are registered and
// takes node 1's name: kube-proxy waits 30 s for a Node object of its name before it programs
// any rule, and the lane has no node of its own.
func (l *Lane) startLaneProxy() error {
	logs := filepath.Join(l.opts.Dir, "logs")
	proxyConf := filepath.Join(l.opts.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyConf, []byte(realnode.KubeProxyConfig(l.Kubeconfig, realnode.NodeName(1))), 0o644); err != nil {
		return err
	}
	proxy, err := controlplane.StartProcess("kube-proxy", filepath.Join(l.opts.Binaries.Kube, "kube-proxy"), []string{"--config=" + proxyConf}, nil, filepath.Join(logs, "kube-proxy.log"), true)
	if err != nil {
		return err
	}
	l.aux = append(l.aux, proxy)
	l.watchAux(proxy)
	// Ready when a name resolves through the kube-dns Service: CoreDNS answers and the rules
	// that lead there are in place.
	name := "kubernetes.default.svc." + realnode.ClusterDomain
	var last error
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = net.DefaultResolver.LookupHost(ctx, name)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s does not resolve through the cluster's DNS (see %s): %v", name, filepath.Join(logs, "coredns.log"), last)
	}
	return nil
}

// watchAux fails the lane when p exits on its own.
func (l *Lane) watchAux(p *controlplane.Process) {
	go func() {
		<-p.Done()
		if !p.Stopping() {
			l.fail(fmt.Errorf("%s exited: %v (see %s)", p.Name, p.Err(), p.LogPath))
		}
	}()
}

func (l *Lane) nodeConfig(i int) realnode.NodeConfig {
	return realnode.NodeConfig{
		Index:            i,
		LaneDir:          l.opts.Dir,
		Kubeconfig:       l.Kubeconfig,
		KubeBinDir:       l.opts.Binaries.Kube,
		ContainerdBinDir: l.bins.Containerd,
		Runc:             l.bins.Runc,
		Images:           l.images,
		Zone:             zoneName(i - 1),
	}
}

// startNode starts node i (again, after StopNode), after clearing what a killed one left.
func (l *Lane) startNode(i int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.nodes[i]; n != nil {
		select {
		case <-n.Done():
		default:
			return fmt.Errorf("node %s is running", realnode.NodeName(i))
		}
	}
	if err := realnode.KillNodeCgroup(l.opts.Dir, i); err != nil {
		return err
	}
	logPath := filepath.Join(l.opts.Dir, "logs", realnode.NodeName(i)+".log")
	n, err := realnode.StartNode(l.opts.Executable, []string{LaneNodeCommand}, l.nodeConfig(i), logPath)
	if err != nil {
		return err
	}
	l.nodes[i] = n
	go func() {
		<-n.Done()
		l.mu.Lock()
		current := l.nodes[i] == n
		l.mu.Unlock()
		if current && n.Err() != nil {
			l.log.Error(n.Err(), "node exited", "node", realnode.NodeName(i), "log", logPath)
		}
	}()
	return nil
}

func (l *Lane) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for i := 1; i <= l.opts.Nodes; i++ {
			l.mu.Lock()
			n := l.nodes[i]
			l.mu.Unlock()
			select {
			case <-n.Done():
				return false, fmt.Errorf("node %s exited: %v (see %s)", realnode.NodeName(i), n.Err(), filepath.Join(l.opts.Dir, "logs"))
			default:
			}
		}
		nodes, err := l.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		last = fmt.Sprintf("%d of %d nodes Ready", ready, l.opts.Nodes)
		return ready == l.opts.Nodes, nil
	})
	if err != nil {
		return fmt.Errorf("the lane's nodes did not become Ready (%s; logs in %s): %w", last, filepath.Join(l.opts.Dir, "logs"), err)
	}
	return nil
}

// laneOperatorNamespace is where the lane installs the operator's chart.
const laneOperatorNamespace = "etcd-pilot-system"

// installOperator installs charts/etcd-pilot with helm, with the lane's operator image, in a
// namespace that enforces the restricted Pod Security profile, and waits for a Ready pod.
func (l *Lane) installOperator(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: laneOperatorNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	if _, err := l.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	args := []string{"upgrade", "--install", "etcd-pilot", filepath.Join(l.opts.Binaries.Root, "charts", "etcd-pilot"),
		"--namespace", laneOperatorNamespace, "--kubeconfig", l.Kubeconfig,
		"--set", "image.repository=" + realnode.OperatorRepository, "--set", "image.tag=" + realnode.OperatorTag,
		"--set", "image.pullPolicy=Never", "--skip-crds"}
	for _, v := range l.opts.OperatorValues {
		args = append(args, "--set", v)
	}
	out, err := exec.CommandContext(ctx, l.bins.Helm, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	l.log.Info("installed the operator's chart", "output", string(out))
	last := ""
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := l.client.CoreV1().Pods(laneOperatorNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("%d pods, none Ready", len(pods.Items))
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason != "" {
					last = fmt.Sprintf("pod %s: %s: %s", p.Name, w.Reason, w.Message)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no operator pod became Ready (%s): %w", last, err)
	}
	return nil
}

// Failed receives an error when a part of the lane stops on its own.
func (l *Lane) Failed() <-chan error { return l.failed }

func (l *Lane) fail(err error) {
	l.log.Error(err, "lane failed")
	select {
	case l.failed <- err:
	default:
	}
}

// Stop stops the nodes (their pods with them), CoreDNS, the lane's kube-proxy and the control
// plane, and removes the nodes' cgroups.
func (l *Lane) Stop() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		nodes := l.nodes
		l.nodes = map[int]*realnode.NodeProcess{}
		l.mu.Unlock()
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() { n.Stop(laneNodeStopGrace) })
		}
		wg.Wait()
		for i := range nodes {
			if err := realnode.KillNodeCgroup(l.opts.Dir, i); err != nil {
				l.log.Error(err, "failed to clean a node's cgroups")
			}
		}
		if l.auxStop != nil {
			l.auxStop()
			l.auxWG.Wait()
		}
		for _, p := range l.aux {
			p.Stop(5 * time.Second)
		}
		if l.cp != nil {
			l.cp.Stop()
		}
		realnode.RemoveMountpoints(l.mountpoints)
		if err := realnode.RemoveLaneCgroup(l.opts.Dir); err != nil {
			l.log.Error(err, "failed to remove the lane's cgroups")
		}
		if l.logFile != nil {
			l.log.Info("lane stopped")
			l.logFile.Close()
		}
	})
}

// nodeIndex returns the index of the node named name.
func (l *Lane) nodeIndex(name string) (int, error) {
	for i := 1; i <= l.opts.Nodes; i++ {
		if realnode.NodeName(i) == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no node %q in this lane", name)
}

// StopNode stops a node as a fault: its process, kubelet, containerd and every container are
// killed at once, as a machine that loses power.
func (l *Lane) StopNode(name string) error {
	i, err := l.nodeIndex(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	n := l.nodes[i]
	l.mu.Unlock()
	if n == nil {
		return fmt.Errorf("node %s is not running", name)
	}
	n.Kill()
	return realnode.KillNodeCgroup(l.opts.Dir, i)
}

// StartNode starts a node StopNode stopped.
func (l *Lane) StartNode(name string) error {
	i, err := l.nodeIndex(name)
	if err != nil {
		return err
	}
	return l.startNode(i)
}

// KillPod deletes the pod at once (grace 0): the lane's kubelet kills its containers.
func (l *Lane) KillPod(namespace, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
}

// StopOperator scales the operator's Deployment to zero and waits for its pods to go.
func (l *Lane) StopOperator() error { return l.scaleOperator(0) }

// StartOperator scales the operator's Deployment back; env is not supported on the lane.
func (l *Lane) StartOperator(env []string) error {
	if len(env) > 0 {
		return errors.New("operator start --env is for the process nodes; on the lane, set the chart's values")
	}
	return l.scaleOperator(2)
}

func (l *Lane) scaleOperator(replicas int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := l.client.AppsV1().Deployments(laneOperatorNamespace).GetScale(ctx, "etcd-pilot", metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Replicas = replicas
	_, err = l.client.AppsV1().Deployments(laneOperatorNamespace).UpdateScale(ctx, "etcd-pilot", s, metav1.UpdateOptions{})
	return err
}

// NetFault applies a network fault (realnode.ApplyFault) to a running node.
func (l *Lane) NetFault(name, fault string, delay time.Duration) error {
	i, err := l.nodeIndex(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	n := l.nodes[i]
	l.mu.Unlock()
	if n == nil {
		return fmt.Errorf("node %s is not running", name)
	}
	select {
	case <-n.Done():
		return fmt.Errorf("node %s is stopped", name)
	default:
	}
	l.log.Info("network fault", "node", name, "fault", fault, "delay", delay.String())
	return realnode.ApplyFault(n.Pid(), fault, delay)
}

// RestartAPIServer restarts kube-apiserver as a fault.
func (l *Lane) RestartAPIServer() error { return l.cp.RestartAPIServer(context.Background()) }

// fileLogr returns a logger writing text lines to f.
func fileLogr(f *os.File) logr.Logger {
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if prefix != "" {
			prefix += " "
		}
		fmt.Fprintf(f, "%s %s%s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})
}

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/controlplane"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/node"
)

const (
	// firstIPOctet and lastIPOctet bound the second octet of the loopback /16 a cluster's pod
	// IPs come from: the first not locked by another local cluster on this machine.
	firstIPOctet = 20
	lastIPOctet  = 254
	// nodeReadyTimeout bounds the wait for the nodes to register Ready.
	nodeReadyTimeout = time.Minute
	// podShutdownGrace caps the pods' grace period when the cluster stops.
	podShutdownGrace = 2 * time.Second
	// nodeShutdownTimeout bounds how long a node may take to stop its pods at shutdown.
	nodeShutdownTimeout = 40 * time.Second
)

// Options configures Up.
type Options struct {
	// Dir is the cluster's folder (absolute): kubeconfig, logs, state, node and volume data.
	Dir string
	// Nodes is the number of process nodes, named local-node-1..N in zones zone-a, zone-b...
	Nodes int
	// Operator installs the operator from config/default (kubectl apply -k): its Deployment's
	// pods run OperatorBinary as the operator's image, under the roles of config/.
	Operator bool
	// Binaries locates the Kubernetes and etcd builds and the repository (for the CRDs).
	Binaries Binaries
	// Executable is the local cluster's own binary (etcd-pilot-local): the process nodes run
	// each container through its hidden shim command (Executable shim).
	Executable string
	// OperatorBinary is the operator's binary (etcd-pilot, a separate build that does not
	// link this package): the only file of the operator's image (see InstallOperatorImage),
	// which the operator's pods and its backup pods run. It must pass CheckOperatorBinary.
	OperatorBinary string
	// OperatorArgs are added to the manager's args of config/default's Deployment before it
	// is applied, as an administrator would (the end-to-end suite allows its MinIO, on
	// 127.0.0.1 over plain HTTP, with --allowed-endpoints and --allow-insecure-endpoints).
	OperatorArgs []string
	// Names is the name view every process of the cluster resolves through.
	Names NameView
	// Progress, if set, is called as each step completes.
	Progress func(msg string)
}

// Cluster is a running local cluster. Its methods implement Controller.
type Cluster struct {
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// RESTConfig connects as the admin.
	RESTConfig *rest.Config

	opts     Options
	log      logr.Logger
	logFiles []*os.File
	cp       *controlplane.ControlPlane
	client   kubernetes.Interface

	nodeNames []string
	ipLock    *os.File // holds the cluster's pod IP range, see lockIPPrefix
	nodes     map[string]*node.Node
	nodesStop context.CancelFunc
	nodesWG   sync.WaitGroup

	operator *operator // nil without Options.Operator

	auxStop context.CancelFunc // provisioner and Service publisher
	auxWG   sync.WaitGroup

	failed   chan error
	stopOnce sync.Once
}

// Up starts the local cluster: the control plane, the CRDs, the StorageClass and its
// provisioner, the nodes (returning once all are Ready), the Service name publisher and the
// operator. It must run in the mount namespace whose /etc/hosts opts.Names writes. It logs to
// Dir/logs/local.log, where it also sends this process's klog output. On error it stops what
// it started. The caller must call Stop.
func Up(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("need at least one node, got %d", opts.Nodes)
	}
	if opts.Executable == "" {
		return nil, errors.New("no local cluster executable to run the process nodes' shim")
	}
	if err := CheckOperatorBinary(opts.OperatorBinary); err != nil {
		return nil, err
	}
	if opts.Progress == nil {
		opts.Progress = func(string) {}
	}
	logs := filepath.Join(opts.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", logs, err)
	}
	// Every run starts from empty nodes and volumes, as the control plane's store does.
	for _, d := range []string{"nodes", "volumes"} {
		if err := os.RemoveAll(filepath.Join(opts.Dir, d)); err != nil {
			return nil, fmt.Errorf("failed to delete the %s of an earlier run: %w", d, err)
		}
	}
	c = &Cluster{opts: opts, nodes: map[string]*node.Node{}, failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.log, err = c.fileLogger(filepath.Join(logs, "local.log")); err != nil {
		return c, err
	}
	// client-go logs through klog, to standard error by default; the terminal shows only
	// the ready line.
	klog.SetLogger(c.log.WithName("client-go"))
	step := func(msg string) {
		c.log.Info(msg)
		opts.Progress(msg)
	}

	c.cp, err = controlplane.Start(ctx, controlplane.Config{
		Dir:        opts.Dir,
		KubeBinDir: opts.Binaries.Kube,
		EtcdBinDir: opts.Binaries.Etcd,
		Progress:   step,
	})
	if err != nil {
		return c, err
	}
	c.Kubeconfig, c.RESTConfig = c.cp.Kubeconfig, c.cp.RESTConfig
	if c.client, err = kubernetes.NewForConfig(c.RESTConfig); err != nil {
		return c, fmt.Errorf("failed to create a client: %w", err)
	}
	go func() {
		if err := <-c.cp.Failed(); err != nil {
			c.fail(err)
		}
	}()

	if err := installCRDs(ctx, c.RESTConfig, filepath.Join(opts.Binaries.Root, "config", "crd", "bases")); err != nil {
		return c, err
	}
	step("CRDs installed")

	for _, sc := range node.StorageClasses() {
		if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return c, fmt.Errorf("failed to create StorageClass %s: %w", sc.Name, err)
		}
	}
	auxCtx, auxStop := context.WithCancel(context.Background())
	c.auxStop = auxStop
	c.auxWG.Go(func() {
		if err := node.RunProvisioner(auxCtx, c.client, filepath.Join(opts.Dir, "volumes"), c.log); err != nil && auxCtx.Err() == nil {
			c.fail(fmt.Errorf("volume provisioner stopped: %w", err))
		}
	})
	c.auxWG.Go(func() {
		if err := publishServices(auxCtx, c.client, opts.Names, c.log.WithName("services")); err != nil && auxCtx.Err() == nil {
			c.fail(fmt.Errorf("Service name publisher stopped: %w", err))
		}
	})

	if err := c.startNodes(ctx); err != nil {
		return c, err
	}
	step(fmt.Sprintf("%d nodes ready", opts.Nodes))

	if opts.Operator {
		if err := c.installOperator(ctx); err != nil {
			return c, err
		}
		step("operator running (config/default)")
	}
	return c, nil
}

// startNodes starts the process nodes and waits until each reports Ready.
func (c *Cluster) startNodes(ctx context.Context) error {
	prefix, lock, err := lockIPPrefix()
	if err != nil {
		return err
	}
	c.ipLock = lock
	c.log.Info("pod IPs", "prefix", prefix)
	nodesCtx, nodesStop := context.WithCancel(context.Background())
	c.nodesStop = nodesStop
	ips := node.NewIPAllocator(prefix)
	operatorDir, err := InstallOperatorImage(c.opts.Dir, c.opts.OperatorBinary)
	if err != nil {
		return err
	}
	api, err := url.Parse(c.RESTConfig.Host)
	if err != nil {
		return fmt.Errorf("failed to parse the API server's address %q: %w", c.RESTConfig.Host, err)
	}
	images := WithOverrides(filepath.Join(c.opts.Dir, ImageOverridesFile), Images(c.opts.Binaries.EtcdRoot, operatorDir))
	for i := range c.opts.Nodes {
		name := fmt.Sprintf("local-node-%d", i+1)
		log, err := c.fileLogger(filepath.Join(c.opts.Dir, "logs", name+".log"))
		if err != nil {
			return err
		}
		n, err := node.New(node.Config{
			Name:      name,
			Zone:      zoneName(i),
			Client:    c.client,
			Dir:       filepath.Join(c.opts.Dir, "nodes", name),
			Images:    images,
			IPs:       ips,
			Names:     c.opts.Names,
			Shim:      []string{c.opts.Executable, "shim"},
			Log:       log,
			APIServer: api.Host,
			// Tearing the cluster down need not wait for etcd members to leave gracefully:
			// the next up starts from empty volumes anyway.
			ShutdownGracePeriod: podShutdownGrace,
		})
		if err != nil {
			return fmt.Errorf("failed to create node %s: %w", name, err)
		}
		c.nodes[name] = n
		c.nodeNames = append(c.nodeNames, name)
		c.nodesWG.Go(func() {
			if err := n.Run(nodesCtx); err != nil && nodesCtx.Err() == nil {
				c.fail(fmt.Errorf("node %s stopped: %w", name, err))
			}
		})
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && c.nodes[n.Name] != nil {
					ready++
				}
			}
		}
		return ready == len(c.nodes), nil
	})
	if err != nil {
		return fmt.Errorf("failed waiting for the nodes to be Ready (see %s): %w", filepath.Join(c.opts.Dir, "logs"), err)
	}
	return nil
}

// lockIPPrefix picks the pod IP range of this cluster, 127.N/16, so that local clusters
// running at the same time (a developer's and the e2e suite's) never hand out the same
// address: it takes an exclusive lock on a file per range in the temporary folder, held by the
// returned file until it is closed or this process exits.
func lockIPPrefix() (string, *os.File, error) {
	for n := firstIPOctet; n <= lastIPOctet; n++ {
		prefix := fmt.Sprintf("127.%d", n)
		path := filepath.Join(os.TempDir(), "etcd-pilot-local-"+prefix+".lock")
		f, err := openLockFile(path)
		if errors.Is(err, os.ErrPermission) {
			continue // another user's, unreadable: take it as held
		}
		if err != nil {
			return "", nil, fmt.Errorf("failed to open %s: %w", path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		return prefix, f, nil
	}
	return "", nil, fmt.Errorf("no free pod IP range: 127.%d to 127.%d are all held by other local clusters", firstIPOctet, lastIPOctet)
}

// openLockFile opens the lock file at path for reading, creating it when missing. Any user's
// local cluster may lock it: flock(2) needs no write access, and an existing file is opened
// without O_CREAT, which a sticky temporary folder with fs.protected_regular refuses for
// another user's file.
func openLockFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	}
	return f, err
}

// zoneName returns the zone of the i-th node (from 0): zone-a, zone-b, ... zone-z, zone-27...
func zoneName(i int) string {
	if i < 26 {
		return fmt.Sprintf("zone-%c", 'a'+i)
	}
	return fmt.Sprintf("zone-%d", i+1)
}

// Failed receives an error when a part of the cluster stops on its own (a control plane
// component exits, a node cannot run): the cluster is broken and should be stopped.
func (c *Cluster) Failed() <-chan error { return c.failed }

func (c *Cluster) fail(err error) {
	c.log.Error(err, "local cluster failed")
	select {
	case c.failed <- err:
	default:
	}
}

// Stop stops everything Up started, in order: the operator (so it does not react to the
// rest going away), the nodes and their pods, the provisioner and the Service publisher, and
// the control plane. It returns when every process is gone. It may be called more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.operator != nil {
			ctx, cancel := context.WithTimeout(context.Background(), operatorStopTimeout)
			if err := c.operator.stop(ctx); err != nil {
				c.log.Error(err, "failed to stop the operator before the rest")
			} else {
				c.log.Info("operator stopped")
			}
			cancel()
		}
		if c.nodesStop != nil {
			c.nodesStop()
			done := make(chan struct{})
			go func() { c.nodesWG.Wait(); close(done) }()
			select {
			case <-done:
				c.log.Info("nodes stopped")
			case <-time.After(nodeShutdownTimeout):
				c.log.Error(errors.New("timed out"), "nodes did not stop their pods in time")
			}
		}
		if c.auxStop != nil {
			c.auxStop()
			c.auxWG.Wait()
		}
		if c.cp != nil {
			c.cp.Stop()
			c.log.Info("control plane stopped")
		}
		if c.ipLock != nil {
			c.ipLock.Close()
		}
		for _, f := range c.logFiles {
			f.Close()
		}
	})
}

// StopNode stops a node as a fault (see node.Node.Stop).
func (c *Cluster) StopNode(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	n.Stop()
	return nil
}

// StartNode starts a node stopped by StopNode.
func (c *Cluster) StartNode(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	n.Start()
	return nil
}

// RestartAPIServer restarts kube-apiserver as a fault (see controlplane.RestartAPIServer).
func (c *Cluster) RestartAPIServer() error {
	return c.cp.RestartAPIServer(context.Background())
}

// NetFault is not possible here: the process nodes share the machine's network.
func (c *Cluster) NetFault(node, fault string, delay time.Duration) error {
	return errors.New("the process nodes share the machine's network, which a fault would cut for every node: network faults need the real-node lane (up --runtime=containerd)")
}

// KillPod kills the processes of a pod on whichever node runs it.
func (c *Cluster) KillPod(namespace, name string) error {
	if namespace == "" || name == "" {
		return errors.New("name the pod as NAMESPACE/NAME")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("failed to get pod %s/%s: %w", namespace, name, err)
	}
	n, err := c.node(pod.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("pod %s/%s is not on a node of this cluster: %w", namespace, name, err)
	}
	return n.KillPod(namespace, name)
}

func (c *Cluster) node(name string) (*node.Node, error) {
	n := c.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("no node %q in this local cluster (nodes: %v)", name, c.nodeNames)
	}
	return n, nil
}

// fileLogger returns a logger writing text lines to a new file at path, closed by Stop.
func (c *Cluster) fileLogger(path string) (logr.Logger, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return logr.Discard(), fmt.Errorf("failed to create log %s: %w", path, err)
	}
	c.logFiles = append(c.logFiles, f)
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if prefix != "" {
			prefix += " "
		}
		fmt.Fprintf(f, "%s %s%s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1}), nil
}

// installCRDs creates the CustomResourceDefinitions of the YAML files in dir (the generated
// config/crd/bases, so the local cluster always runs the CRDs of the checkout it was started
// from) and waits until they are established.
func installCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("failed to find CRDs in %s: %v", dir, err)
	}
	sort.Strings(files)
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to create a client: %w", err)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("failed to read CRD: %w", err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.UnmarshalStrict(data, crd); err != nil {
			return fmt.Errorf("failed to parse CRD %s: %w", f, err)
		}
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if !slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("failed waiting for the CRDs %v to be established: %w", names, err)
	}
	return nil
}

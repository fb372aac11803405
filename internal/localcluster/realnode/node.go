package realnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/controlplane"
)

// NodeConfigEnv carries a node's NodeConfig (JSON) to the node process.
const NodeConfigEnv = "ETCD_PILOT_LANE_NODE"

// NodeConfig is what a node process needs.
type NodeConfig struct {
	Index      int    `json:"index"`
	LaneDir    string `json:"laneDir"`
	Kubeconfig string `json:"kubeconfig"`
	// KubeBinDir holds kubelet and kube-proxy; ContainerdBinDir containerd, ctr and the shim.
	KubeBinDir       string `json:"kubeBinDir"`
	ContainerdBinDir string `json:"containerdBinDir"`
	// Runc is runc's path.
	Runc string `json:"runc"`
	// Images are OCI archives imported into the node's containerd before the kubelet starts.
	Images []string `json:"images"`
	// Zone is the node's topology.kubernetes.io/zone.
	Zone string `json:"zone"`
}

// nodeStartTimeout bounds a node's start up to its kubelet's start.
const nodeStartTimeout = 2 * time.Minute

// NodeProcess is a node as the lane sees it: the process that runs in its namespaces.
type NodeProcess struct {
	Index int
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
}

// StartNode starts node cfg.Index: exe (with args, the hidden command that calls RunNode) in
// a new network and mount namespace, linked to the lane's bridge before it goes on.
func StartNode(exe string, args []string, cfg NodeConfig, logPath string) (*NodeProcess, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), NodeConfigEnv+"="+string(data))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{r} // fd 3: the go-ahead
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("failed to start node %d in namespaces of its own: %w", cfg.Index, err)
	}
	n := &NodeProcess{Index: cfg.Index, cmd: cmd, done: make(chan struct{})}
	go func() { n.err = cmd.Wait(); close(n.done) }()
	if err := linkNode(cfg.Index, cmd.Process.Pid); err != nil {
		w.Close()
		n.Kill()
		return nil, fmt.Errorf("failed to link node %d: %w", cfg.Index, err)
	}
	_, err = w.Write([]byte("go\n"))
	w.Close()
	if err != nil {
		n.Kill()
		return nil, err
	}
	return n, nil
}

// Pid is the node process's id: its network namespace is the node's.
func (n *NodeProcess) Pid() int { return n.cmd.Process.Pid }

// Done is closed when the node process has exited.
func (n *NodeProcess) Done() <-chan struct{} { return n.done }

// Err is how it exited, once Done is closed.
func (n *NodeProcess) Err() error { return n.err }

// Stop asks the node to stop its pods and itself (SIGTERM), and kills it after grace.
func (n *NodeProcess) Stop(grace time.Duration) {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(grace):
		n.Kill()
	}
}

// Kill kills the node process; its containers go with the cleanup of the next start or the
// lane's stop (KillNodeCgroup).
func (n *NodeProcess) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

// KillNodeCgroup kills every process left in node i's cgroup (containers, shims) and removes
// its cgroups.
func KillNodeCgroup(laneDir string, i int) error {
	if left := killCgroup(CgroupRoot(laneDir, i), -1, 10*time.Second); len(left) > 0 {
		return fmt.Errorf("processes %v of node %s would not die", left, NodeName(i))
	}
	return removeCgroup(CgroupRoot(laneDir, i))
}

// RemoveLaneCgroup removes the lane's cgroups once its nodes are gone (and the lanes' common
// parent when no other lane uses it).
func RemoveLaneCgroup(laneDir string) error {
	err := removeCgroup(LaneCgroup(laneDir))
	if hs, herr := hierarchies(); herr == nil {
		for _, h := range hs {
			_ = syscall.Rmdir(filepath.Join(h, "etcd-pilot-lane"))
		}
	}
	return err
}

// RunNode is the node process: it waits for the lane to link it (fd 3), sets up its network
// and mounts, starts containerd, imports the images, and runs the kubelet and kube-proxy
// until ctx ends or one of them exits; then it kills everything of the node.
func RunNode(ctx context.Context) (err error) {
	var cfg NodeConfig
	if err := json.Unmarshal([]byte(os.Getenv(NodeConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("no node configuration in %s: %w", NodeConfigEnv, err)
	}
	goAhead := os.NewFile(3, "go-ahead")
	line, rerr := bufio.NewReader(goAhead).ReadString('\n')
	goAhead.Close()
	if rerr != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("the lane did not link this node: %v", rerr)
	}
	self := os.Getpid()
	if err := makeCgroup(CgroupRoot(cfg.LaneDir, cfg.Index) + "/node"); err != nil {
		return err
	}
	if err := joinCgroup(CgroupRoot(cfg.LaneDir, cfg.Index)+"/node", self); err != nil {
		return fmt.Errorf("failed to join the node's cgroup: %w", err)
	}
	defer func() {
		if left := killCgroup(CgroupRoot(cfg.LaneDir, cfg.Index), self, 15*time.Second); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("processes %v would not die", left))
		}
	}()
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("failed to make the mount tree private: %w", err)
	}
	if err := setUpNodeNetwork(cfg.Index); err != nil {
		return err
	}
	dir := nodeDir(cfg.LaneDir, cfg.Index)
	if err := setUpNodeMounts(dir); err != nil {
		return err
	}
	cniConf := filepath.Join(dir, "cni-conf")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(dir, "containerd.toml"):      containerdConfig(cniConf, cfg.Runc),
		filepath.Join(cniConf, "10-lane.conflist"): cniConfig(cfg.Index),
		filepath.Join(dir, "kubelet.yaml"):         kubeletConfig(cfg.LaneDir, cfg.Index),
		filepath.Join(dir, "kube-proxy.yaml"):      KubeProxyConfig(cfg.Kubeconfig, NodeName(cfg.Index)),
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := makeCgroup(CgroupRoot(cfg.LaneDir, cfg.Index)); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, nodeStartTimeout)
	defer cancel()
	logs := filepath.Join(cfg.LaneDir, "logs")
	name := NodeName(cfg.Index)
	pathEnv := "PATH=" + cfg.ContainerdBinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	containerd, err := controlplane.StartProcess(name+"-containerd", filepath.Join(cfg.ContainerdBinDir, "containerd"),
		[]string{"--config", filepath.Join(dir, "containerd.toml"), "--log-level", "warn"}, []string{pathEnv},
		filepath.Join(logs, name+"-containerd.log"), false)
	if err != nil {
		return err
	}
	procs := []*controlplane.Process{containerd}
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop(5 * time.Second)
		}
	}()
	ctr := func(args ...string) error {
		cmd := exec.CommandContext(startCtx, filepath.Join(cfg.ContainerdBinDir, "ctr"),
			append([]string{"--address", "/run/containerd/containerd.sock", "--namespace", "k8s.io"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for {
		if ctr("version") == nil {
			break
		}
		select {
		case <-containerd.Done():
			return fmt.Errorf("containerd exited: %v (see %s)", containerd.Err(), containerd.LogPath)
		case <-startCtx.Done():
			return fmt.Errorf("containerd did not answer within %s (see %s)", nodeStartTimeout, containerd.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, img := range cfg.Images {
		if err := ctr("images", "import", "--local", img); err != nil {
			return fmt.Errorf("failed to import %s: %w", img, err)
		}
	}
	kubelet, err := controlplane.StartProcess(name+"-kubelet", filepath.Join(cfg.KubeBinDir, "kubelet"), []string{
		"--config=" + filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig=" + cfg.Kubeconfig,
		"--hostname-override=" + name,
		"--node-ip=" + NodeIP(cfg.Index),
		"--node-labels=topology.kubernetes.io/zone=" + cfg.Zone,
		"--v=1",
	}, []string{pathEnv}, filepath.Join(logs, name+"-kubelet.log"), false)
	if err != nil {
		return err
	}
	procs = append(procs, kubelet)
	proxy, err := controlplane.StartProcess(name+"-kube-proxy", filepath.Join(cfg.KubeBinDir, "kube-proxy"),
		[]string{"--config=" + filepath.Join(dir, "kube-proxy.yaml")}, []string{pathEnv},
		filepath.Join(logs, name+"-kube-proxy.log"), false)
	if err != nil {
		return err
	}
	procs = append(procs, proxy)
	select {
	case <-ctx.Done():
		return nil
	case <-containerd.Done():
		return fmt.Errorf("containerd exited: %v (see %s)", containerd.Err(), containerd.LogPath)
	case <-kubelet.Done():
		return fmt.Errorf("the kubelet exited: %v (see %s)", kubelet.Err(), kubelet.LogPath)
	case <-proxy.Done():
		return fmt.Errorf("kube-proxy exited: %v (see %s)", proxy.Err(), proxy.LogPath)
	}
}

// setUpNodeMounts gives the node its own copy of nodePaths (folders under dir) and of the
// settings the kubelet writes machine-wide.
func setUpNodeMounts(dir string) error {
	for _, p := range nodePaths {
		src := filepath.Join(dir, "fs", strings.ReplaceAll(strings.Trim(p, "/"), "/", "_"))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(src, p, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("failed to bind-mount %s over %s: %w", src, p, err)
		}
	}
	sysctls := filepath.Join(dir, "sysctl")
	if err := os.MkdirAll(sysctls, 0o755); err != nil {
		return err
	}
	for _, s := range kubeletSysctls {
		target := "/proc/sys/" + s
		cur, err := os.ReadFile(target)
		if err != nil {
			continue // not on this kernel; the kubelet skips it too
		}
		file := filepath.Join(sysctls, strings.ReplaceAll(s, "/", "."))
		if err := os.WriteFile(file, cur, 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(file, target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("failed to bind-mount over %s: %w", target, err)
		}
	}
	return nil
}

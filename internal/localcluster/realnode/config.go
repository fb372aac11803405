package realnode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// containerdConfig is containerd's configuration (version 3) for a node. Its root and state
// are the default paths, which the node bind-mounts from its own folder.
func containerdConfig(cniConfDir, runc string) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE: a container may not lower its OOM score below
  # containerd's own, which is what runc's sandbox asks without this.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q
    max_conf_num = 1

# NRI's socket is machine-wide (/var/run/nri); the lane has no NRI plugins.
[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
`, runc, cniConfDir, PauseImage)
}

// cniConfig is node i's CNI network: a bridge with the node's pod range, routed (not
// masqueraded) through the node.
func cniConfig(i int) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "lane",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, NodePodCIDR(i))
}

// LaneCgroup is the cgroup (in every hierarchy) of the lane in laneDir: lanes in two folders
// run side by side.
func LaneCgroup(laneDir string) string {
	sum := sha256.Sum256([]byte(laneDir))
	return "/etcd-pilot-lane/" + hex.EncodeToString(sum[:4])
}

// CgroupRoot is the cgroup under which node i's kubelet makes its pods'.
func CgroupRoot(laneDir string, i int) string { return LaneCgroup(laneDir) + "/" + NodeName(i) }

// kubeletConfig is node i's KubeletConfiguration.
func kubeletConfig(laneDir string, i int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine boots cgroup v1 (hybrid).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: %s
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: [%s]
clusterDomain: %s
resolvConf: ""
failSwapOn: false
# The machine's disk and memory are shared with everything else on it: evict only at the end.
evictionHard:
  memory.available: 50Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusReportFrequency: 10s
fileCheckFrequency: 5s
syncFrequency: 10s
`, CgroupRoot(laneDir, i), NodeIP(i), DNSServiceIP, ClusterDomain)
}

// KubeProxyConfig is kube-proxy's configuration on the host named name with address ip.
// It leaves every machine-wide setting alone (conntrack table size and timeouts, the
// localhost NodePorts' route_localnet).
func KubeProxyConfig(kubeconfig, name string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
iptables:
  localhostNodePorts: false
`, kubeconfig, PodCIDR, name)
}

// Corefile is CoreDNS's configuration: the cluster's names and the reverse names of its pod
// and Service addresses, from the API server, served on the lane's bridge address.
func Corefile(kubeconfig string) string {
	return strings.Join([]string{
		".:53 {",
		"    errors",
		"    bind " + BridgeIP,
		"    kubernetes " + ClusterDomain + " in-addr.arpa ip6.arpa {",
		"        kubeconfig " + kubeconfig,
		"        pods insecure",
		"        ttl 5",
		"    }",
		"    cache 5",
		"}",
		"",
	}, "\n")
}

// nodePaths are the machine folders each node has a copy of, bind-mounted from its folder in
// its mount namespace: containerd's and the kubelet's state, the pods' logs, the CNI's
// address leases and the pods' network namespaces.
var nodePaths = []string{
	"/var/lib/containerd", "/run/containerd", "/var/lib/kubelet", "/var/log/pods",
	"/var/log/containers", "/var/lib/cni", "/run/netns",
}

// PrepareMountpoints creates the machine folders the nodes mount over that do not exist yet,
// and returns them (parents first), for RemoveMountpoints once the nodes are gone: the nodes'
// copies are mounted in their own namespaces, but a mount point must exist on the machine.
func PrepareMountpoints() ([]string, error) {
	var created []string
	for _, p := range nodePaths {
		var missing []string
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			missing = append([]string{d}, missing...)
		}
		for _, d := range missing {
			if err := os.Mkdir(d, 0o755); err != nil {
				return created, err
			}
			created = append(created, d)
		}
	}
	return created, nil
}

// RemoveMountpoints removes the folders PrepareMountpoints created, deepest first, each only
// if it is empty.
func RemoveMountpoints(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		_ = os.Remove(created[i])
	}
}

// kubeletSysctls are the machine-wide settings the kubelet writes at start; each node
// bind-mounts a file of its own over them, so the machine's stay as they are.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func nodeDir(laneDir string, i int) string { return filepath.Join(laneDir, "nodes", NodeName(i)) }

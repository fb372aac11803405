// Package realnode runs the real-node lane of the local cluster (etcd-pilot-local up
// --runtime=containerd): the control plane of internal/localcluster/controlplane and nodes
// that are each a private network and mount namespace with containerd, runc, a real kubelet
// and kube-proxy, on a bridge inside a network namespace of the lane's own, with CoreDNS as
// the cluster's DNS. Nothing it makes is visible to the machine: the lane's namespaces go
// when its processes do. It needs root.
package realnode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The lane's addresses. The bridge carries the control plane, CoreDNS and whatever the tests
// run beside the cluster (MinIO); node i has NodeIP(i) on it and routes the pod range
// NodePodCIDR(i) behind it.
const (
	BridgeName    = "lane0"
	BridgeIP      = "10.200.0.1"
	bridgePrefix  = "/24"
	PodCIDR       = "10.244.0.0/16"
	ServiceCIDR   = "10.96.0.0/16"
	DNSServiceIP  = "10.96.0.10"
	ClusterDomain = "cluster.local"
)

// NodeName is the name of node i (from 1).
func NodeName(i int) string { return fmt.Sprintf("lane-node-%d", i) }

// NodeIP is the address of node i on the lane's bridge.
func NodeIP(i int) string { return fmt.Sprintf("10.200.0.%d", 10+i) }

// NodePodCIDR is the pod range of node i.
func NodePodCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i) }

// vethName is the lane's end of node i's link.
func vethName(i int) string { return fmt.Sprintf("veth-n%d", i) }

// ipCmd runs ip(8) with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// writeSysctl writes value to /proc/sys/<name with dots as slashes>.
func writeSysctl(name, value string) error {
	return os.WriteFile("/proc/sys/"+strings.ReplaceAll(name, ".", "/"), []byte(value), 0o644)
}

// SetUpLaneNetwork makes the lane's own network namespace (the calling process's, which must
// be a new one) usable: loopback, the bridge with BridgeIP, and forwarding between nodes.
func SetUpLaneNetwork() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", BridgeIP + bridgePrefix, "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
		// Service addresses need a route before the lane's kube-proxy rewrites them.
		{"route", "add", ServiceCIDR, "dev", BridgeName},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return writeSysctl("net.ipv4.ip_forward", "1")
}

// linkNode connects node i, whose process pid runs in the node's new network namespace: a
// veth pair whose node end is eth0 there, the lane end on the bridge, and the route to the
// node's pods. Idempotent for a restarted node (the old pair went with the old namespace).
func linkNode(i, pid int) error {
	_ = ipCmd("link", "del", vethName(i)) // left by a node whose namespace still lingers
	for _, args := range [][]string{
		{"link", "add", vethName(i), "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(pid)},
		{"link", "set", vethName(i), "master", BridgeName},
		{"link", "set", vethName(i), "up"},
		{"route", "replace", NodePodCIDR(i), "via", NodeIP(i)},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// setUpNodeNetwork runs in node i's network namespace once linkNode has made eth0.
func setUpNodeNetwork(i int) error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", NodeIP(i) + bridgePrefix, "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", BridgeIP},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	if err := writeSysctl("net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	// Service traffic between two pods of one node crosses the CNI bridge: kube-proxy's rules
	// must see it. Per network namespace where the kernel has br_netfilter.
	_ = writeSysctl("net.bridge.bridge-nf-call-iptables", "1")
	return nil
}

package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Labels and addresses of the Node object.
const (
	labelHostname = "kubernetes.io/hostname"
	labelZone     = "topology.kubernetes.io/zone"
	labelOS       = "kubernetes.io/os"
	labelArch     = "kubernetes.io/arch"
	// hostIP is the node's address: every node of the local cluster is this machine.
	hostIP = "127.0.0.1"
	// leaseNamespace holds the nodes' heartbeat leases.
	leaseNamespace = "kube-node-lease"
)

// registerUntilDone registers the Node, retrying with back-off until it succeeds or ctx ends
// (the API server may still be starting).
func (n *Node) registerUntilDone(ctx context.Context) error {
	delay := 200 * time.Millisecond
	for {
		err := n.register(ctx)
		if err == nil {
			return nil
		}
		n.log.Error(err, "Failed to register the node; retrying", "after", delay)
		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to register node %s before shutdown: %w", n.cfg.Name, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// register creates the Node (or adopts an existing one, as a restarted kubelet does), sets its
// status and makes sure the lease namespace exists.
func (n *Node) register(ctx context.Context) error {
	nodes := n.cfg.Client.CoreV1().Nodes()
	want := n.nodeObject()
	got, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = nodes.Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err == nil && !labelsContain(got.Labels, want.Labels) {
			if got.Labels == nil {
				got.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				got.Labels[k] = v
			}
			got, err = nodes.Update(ctx, got, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("failed to create node %s: %w", n.cfg.Name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}
	if _, err := n.cfg.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create namespace %s: %w", leaseNamespace, err)
	}
	if err := n.syncStatus(ctx, got, true); err != nil {
		return err
	}
	n.log.Info("Node registered")
	return nil
}

// heartbeat renews the Lease every leaseInterval and keeps the Node's status current, except
// while the node is stopped. A poke (from Start) runs it at once.
func (n *Node) heartbeat(ctx context.Context) {
	t := time.NewTicker(n.leaseInterval)
	defer t.Stop()
	force := false
	for {
		if !n.isStopped() {
			if err := n.renewLease(ctx); err != nil && ctx.Err() == nil {
				n.log.Error(err, "Failed to renew the node lease")
			}
			if err := n.refreshStatus(ctx, force); err != nil && ctx.Err() == nil {
				n.log.Error(err, "Failed to update the node status")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			force = false
		case <-n.beat:
			force = true
		}
	}
}

// renewLease creates or renews the node's Lease.
func (n *Node) renewLease(ctx context.Context) error {
	leases := n.cfg.Client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, n.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name, Namespace: leaseNamespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.cfg.Name),
				LeaseDurationSeconds: ptr.To(int32(n.leaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{}); err == nil {
			// As the kubelet does: the lease goes with its Node.
			lease.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}}
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("failed to create lease %s/%s: %w", leaseNamespace, n.cfg.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to get lease %s/%s: %w", leaseNamespace, n.cfg.Name, err)
	}
	lease.Spec.HolderIdentity = ptr.To(n.cfg.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(n.leaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to renew lease %s/%s: %w", leaseNamespace, n.cfg.Name, err)
	}
	return nil
}

// refreshStatus reads the Node and writes its status when it is not what this node reports,
// or when the last heartbeat is older than statusReportInterval, or when force is set. A
// deleted Node is registered again.
func (n *Node) refreshStatus(ctx context.Context, force bool) error {
	node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return n.register(ctx)
	}
	if err != nil {
		return fmt.Errorf("failed to get node %s: %w", n.cfg.Name, err)
	}
	return n.syncStatus(ctx, node, force)
}

// syncStatus writes the node's status into node when it differs or force is set or the
// heartbeat is due. The controller-manager writes every new Node at once (the TTL
// controller's annotation, the node lifecycle controller's taints), so a write based on the
// Node just created or read may conflict: then the Node is read again and the status
// computed anew.
func (n *Node) syncStatus(ctx context.Context, node *corev1.Node, force bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if node == nil {
			var err error
			if node, err = n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("failed to get node %s: %w", n.cfg.Name, err)
			}
		}
		err := n.writeStatus(ctx, node, force)
		node = nil
		return err
	})
}

// writeStatus is one attempt of syncStatus on node as read.
func (n *Node) writeStatus(ctx context.Context, node *corev1.Node, force bool) error {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	want := n.nodeStatus()
	due := force
	for _, c := range want.Conditions {
		got := findNodeCondition(node.Status.Conditions, c.Type)
		if got == nil || got.Status != c.Status || got.Reason != c.Reason || now.Sub(got.LastHeartbeatTime.Time) >= n.statusReportInterval {
			due = true
		}
	}
	if !apiequality.Semantic.DeepEqual(node.Status.Capacity, want.Capacity) ||
		!apiequality.Semantic.DeepEqual(node.Status.Addresses, want.Addresses) {
		due = true
	}
	if !due {
		return nil
	}
	conds := make([]corev1.NodeCondition, 0, len(want.Conditions))
	for _, c := range want.Conditions {
		c.LastHeartbeatTime = now
		c.LastTransitionTime = now
		if got := findNodeCondition(node.Status.Conditions, c.Type); got != nil && got.Status == c.Status {
			c.LastTransitionTime = got.LastTransitionTime
		}
		conds = append(conds, c)
	}
	// Keep conditions other components own.
	for _, c := range node.Status.Conditions {
		if findNodeCondition(conds, c.Type) == nil {
			conds = append(conds, c)
		}
	}
	node = node.DeepCopy()
	want.Conditions = conds
	want.Images = node.Status.Images
	want.VolumesInUse = node.Status.VolumesInUse
	want.VolumesAttached = node.Status.VolumesAttached
	node.Status = want
	if _, err := n.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to update the status of node %s: %w", n.cfg.Name, err)
	}
	return nil
}

// nodeObject is the Node this node registers.
func (n *Node) nodeObject() *corev1.Node {
	labels := map[string]string{
		labelHostname: n.cfg.Name,
		labelOS:       "linux",
		labelArch:     runtime.GOARCH,
	}
	if n.cfg.Zone != "" {
		labels[labelZone] = n.cfg.Zone
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name, Labels: labels},
		Status:     n.nodeStatus(),
	}
}

// nodeStatus is the status this node reports, without timestamps.
func (n *Node) nodeStatus() corev1.NodeStatus {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memTotal(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(DefaultPods, resource.DecimalSI),
	}
	for k, v := range n.cfg.Capacity {
		capacity[k] = v
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity.DeepCopy(),
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "process node has sufficient memory available"},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "process node has no disk pressure"},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "process node has sufficient PID available"},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "process node is posting ready status"},
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: hostIP},
			{Type: corev1.NodeHostName, Address: n.cfg.Name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "process://etcd-pilot",
			KubeletVersion:          "v0.0.0-process-node",
		},
	}
}

func findNodeCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// memTotal is the machine's memory in bytes, from /proc/meminfo (1 GiB when unreadable).
func memTotal() int64 {
	const fallback = 1 << 30
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallback
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				return kb * 1024
			}
		}
	}
	return fallback
}

package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := clientset.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("failed to get node %s: %v", name, err)
	}
	return n
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	if c := findNodeCondition(n.Status.Conditions, corev1.NodeReady); c != nil {
		return c.Status
	}
	return ""
}

// leaseRenewTime returns the node lease's renew time, zero when there is none yet.
func leaseRenewTime(t *testing.T, name string) time.Time {
	t.Helper()
	l, err := clientset.CoordinationV1().Leases(leaseNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func TestNodeRegistersAndRenewsItsLease(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startNode(t, ns)

	eventually(t, 30*time.Second, func() (bool, string) {
		n, err := clientset.CoreV1().Nodes().Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return nodeReady(n) == corev1.ConditionTrue, fmt.Sprintf("Ready = %q", nodeReady(n))
	})
	n := getNode(t, ns)
	for k, v := range map[string]string{labelHostname: ns, labelZone: "zone-a", labelOS: "linux"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if pods := n.Status.Allocatable[corev1.ResourcePods]; pods.Value() != DefaultPods {
		t.Errorf("allocatable pods = %s, want %d", pods.String(), DefaultPods)
	}
	if cpu := n.Status.Capacity[corev1.ResourceCPU]; cpu.Value() < 1 {
		t.Errorf("cpu capacity = %s", cpu.String())
	}
	if mem := n.Status.Capacity[corev1.ResourceMemory]; mem.Value() < 1<<20 {
		t.Errorf("memory capacity = %s", mem.String())
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
		t.Errorf("addresses = %v, want InternalIP 127.0.0.1 first", n.Status.Addresses)
	}

	// The lease exists, is held by the node and keeps being renewed.
	var first time.Time
	eventually(t, 10*time.Second, func() (bool, string) {
		first = leaseRenewTime(t, ns)
		return !first.IsZero(), "no lease yet"
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		return leaseRenewTime(t, ns).After(first), "lease not renewed"
	})

	// When the node controller marks the node Unknown, the next heartbeat reports Ready again.
	n = getNode(t, ns)
	c := findNodeCondition(n.Status.Conditions, corev1.NodeReady)
	c.Status, c.Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	if _, err := clientset.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		n := getNode(t, ns)
		return nodeReady(n) == corev1.ConditionTrue, fmt.Sprintf("Ready = %q", nodeReady(n))
	})
}

// TestStopAndStart stops a node with a running pod: the process dies, the lease stops, a pod
// deleted meanwhile stays until Start, and after Start the node is Ready and the pod runs
// again with a restart counted.
func TestStopAndStart(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	createPod(t, shellPod(ns, "sleeper", ns, "exec sleep 3600"))
	createPod(t, shellPod(ns, "doomed", ns, "exec sleep 3600"))
	before := waitPod(t, ns, "sleeper", 30*time.Second, isRunning)
	waitPod(t, ns, "doomed", 30*time.Second, isRunning)
	id := before.Status.ContainerStatuses[0].ContainerID
	if !processAlive(id) {
		t.Fatalf("container %s has no live process", id)
	}

	n.Stop()
	if processAlive(id) {
		t.Fatalf("process %s survived Stop", id)
	}
	if err := n.KillPod(ns, "sleeper"); err == nil {
		t.Error("KillPod on a stopped node succeeded")
	}
	// Delete a pod while the node is down: it must wait for the node.
	if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Play the node controller: the node went Unknown.
	node := getNode(t, ns)
	findNodeCondition(node.Status.Conditions, corev1.NodeReady).Status = corev1.ConditionUnknown
	if _, err := clientset.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing renews the lease, reports the node or touches the pods for several heartbeats.
	renewed := leaseRenewTime(t, ns)
	for deadline := time.Now().Add(5 * n.leaseInterval); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got := leaseRenewTime(t, ns); !got.Equal(renewed) {
			t.Fatalf("lease renewed at %s while stopped", got)
		}
		if nodeReady(getNode(t, ns)) != corev1.ConditionUnknown {
			t.Fatal("stopped node reported its status")
		}
	}
	if _, err := clientset.CoreV1().Pods(ns).Get(context.Background(), "doomed", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod deleted while the node was stopped is gone already: %v", err)
	}

	n.Start()
	eventually(t, 10*time.Second, func() (bool, string) {
		return nodeReady(getNode(t, ns)) == corev1.ConditionTrue, "node not Ready again"
	})
	waitPodGone(t, ns, "doomed", 10*time.Second)
	after := waitPod(t, ns, "sleeper", 10*time.Second, func(p *corev1.Pod) (bool, string) {
		s := p.Status.ContainerStatuses[0]
		return s.State.Running != nil && s.RestartCount == 1 && s.ContainerID != id, "want the container running again after one restart"
	})
	if !processAlive(after.Status.ContainerStatuses[0].ContainerID) {
		t.Error("restarted container has no live process")
	}
	if last := after.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("last termination = %+v, want exit 137 (SIGKILL)", last)
	}
}

// TestRunStopsEveryProcess checks that ending Run stops the pods' processes with SIGTERM.
func TestRunStopsEveryProcess(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n := startNode(t, ns)
	pod := shellPod(ns, "sleeper", ns, "trap 'echo got TERM; exit 0' TERM; echo started; while :; do sleep 0.1; done")
	createPod(t, pod)
	p := waitPod(t, ns, "sleeper", 30*time.Second, isRunning)
	eventually(t, 10*time.Second, func() (bool, string) {
		log := readLog(n, ns, "sleeper", "main")
		return log == "started\n", fmt.Sprintf("log %q", log)
	})
	n.stop()
	if id := p.Status.ContainerStatuses[0].ContainerID; processAlive(id) {
		t.Errorf("process %s survived Run", id)
	}
	if log := readLog(n, ns, "sleeper", "main"); log != "started\ngot TERM\n" {
		t.Errorf("log = %q, want the TERM trap to have run", log)
	}
}

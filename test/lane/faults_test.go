package lane

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

// netFault applies a network fault to a lane node (etcd-pilot-local net).
func netFault(t *testing.T, fault, node string, extra ...string) error {
	t.Helper()
	out, err := exec.Command(localBin, append([]string{"net", fault, node, "--dir", laneDir}, extra...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("net %s %s: %v: %s", fault, node, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// leaderOf asks each reachable member who leads; it returns the leader's member ID.
func leaderOf(t *testing.T, cli *clientv3.Client, eps []string) uint64 {
	t.Helper()
	for _, ep := range eps {
		if st, err := cli.Status(tctx(t), ep); err == nil && st.Leader != 0 {
			return st.Leader
		}
	}
	return 0
}

// allHealthy waits until every member answers, from its own store, with the same cluster ID
// and member list as before, a leader, and raft indexes within 100 of each other.
func allHealthy(t *testing.T, cli *clientv3.Client, eps []string, clusterID uint64, ids map[uint64]bool) {
	t.Helper()
	eventually(t, 3*time.Minute, time.Second, "every member healthy in etcd with the same members", func() error {
		return settledOnce(cli, eps, clusterID, ids)
	})
}

// nodeOfMember returns the node of the member whose etcd ID is id.
func nodeOfMember(t *testing.T, ns, name string, id uint64) (member, node string) {
	t.Helper()
	c := getCluster(t, ns, name)
	for _, m := range c.Status.Members {
		if m.ID == fmt.Sprintf("%x", id) {
			p, err := kube.CoreV1().Pods(ns).Get(tctx(t), m.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return m.Name, p.Spec.NodeName
		}
	}
	t.Fatalf("no member with ID %x in status %+v", id, c.Status.Members)
	return "", ""
}

// TestNetworkFaults cuts nodes off on the lane, which the process nodes cannot do: the node of
// the leader is partitioned from the other nodes and the API server, then a follower's node
// drops what it receives, then (where the kernel has netem) a node's traffic is delayed. The
// two members left keep serving, nothing is replaced, and every acknowledged write is in etcd
// once the faults heal.
func TestNetworkFaults(t *testing.T) {
	const ns, name = "faults", "etcd"
	// A member behind a fault is not lost: nothing may be replaced during these.
	createLaneCluster(t, ns, name, 3, 30*time.Minute, nil)
	eps := memberEndpoints(ns, name, 3)
	cli := etcdClient(t, ns, name, name+"-client-app", eps, false)
	clusterID, ids := membersOf(t, cli)

	t.Run("PartitionTheLeadersNode", func(t *testing.T) {
		old := leaderOf(t, cli, eps)
		member, node := nodeOfMember(t, ns, name, old)
		w := startWriter(cli, "/lane/partition")
		w.waitAcked(t, 50)
		start := time.Now()
		if err := netFault(t, realnode.FaultPartition, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netFault(t, realnode.FaultHeal, node) })
		// The other two elect a leader among themselves and take writes.
		var others []string
		for _, ep := range eps {
			if !strings.Contains(ep, "//"+member+".") {
				others = append(others, ep)
			}
		}
		eventually(t, time.Minute, 500*time.Millisecond, "a new leader among the two members left", func() error {
			if l := leaderOf(t, cli, others); l == 0 || l == old {
				return fmt.Errorf("leader %x", l)
			}
			return nil
		})
		elected := time.Since(start)
		// The fault is held a fixed time, past the node's NotReady grace period (20 s), so
		// the operator sees a node gone and must still not replace anything.
		time.Sleep(30 * time.Second)
		w.waitAcked(t, 50) // the two members left took writes all along
		if err := netFault(t, realnode.FaultHeal, node); err != nil {
			t.Fatal(err)
		}
		allHealthy(t, cli, eps, clusterID, ids)
		acked, failed, longest := w.Stop()
		checkAcked(t, cli, "/lane/partition", acked)
		t.Logf("leader %s's node %s partitioned 30s: new leader in %.1fs, healed with the same 3 members; %d writes acknowledged and all readable, %d failed, longest write gap %s",
			member, node, elected.Seconds(), len(acked), failed, longest.Round(time.Millisecond))
	})

	t.Run("DropWhatAFollowerReceives", func(t *testing.T) {
		leader := leaderOf(t, cli, eps)
		var member, node string
		for id := range ids {
			if id != leader {
				member, node = nodeOfMember(t, ns, name, id)
				break
			}
		}
		w := startWriter(cli, "/lane/inbound")
		w.waitAcked(t, 50)
		if err := netFault(t, realnode.FaultInbound, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netFault(t, realnode.FaultHeal, node) })
		// The fault is held a fixed time: long enough for elections and the operator's passes to
		// run into it, short of the node's NotReady grace period.
		time.Sleep(20 * time.Second)
		if l := leaderOf(t, cli, eps); l == 0 {
			t.Fatal("no leader while one follower drops what it receives")
		}
		if err := netFault(t, realnode.FaultHeal, node); err != nil {
			t.Fatal(err)
		}
		allHealthy(t, cli, eps, clusterID, ids)
		acked, failed, longest := w.Stop()
		checkAcked(t, cli, "/lane/inbound", acked)
		t.Logf("follower %s's node %s dropped what it received for 20s: %d writes acknowledged and all readable, %d failed, longest write gap %s",
			member, node, len(acked), failed, longest.Round(time.Millisecond))
	})

	t.Run("Latency", func(t *testing.T) {
		_, node := nodeOfMember(t, ns, name, leaderOf(t, cli, eps))
		if err := netFault(t, realnode.FaultLatency, node, "--delay", "50ms"); err != nil {
			if strings.Contains(err.Error(), "no netem") {
				t.Skipf("not on this kernel: %v", err)
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netFault(t, realnode.FaultHeal, node) })
		w := startWriter(cli, "/lane/latency")
		time.Sleep(15 * time.Second) // the fault is held a fixed time under the writer
		if err := netFault(t, realnode.FaultHeal, node); err != nil {
			t.Fatal(err)
		}
		acked, failed, longest := w.Stop()
		checkAcked(t, cli, "/lane/latency", acked)
		allHealthy(t, cli, eps, clusterID, ids)
		t.Logf("50ms added to the leader's node for 15s: %d writes, %d failed, longest gap %s", len(acked), failed, longest.Round(time.Millisecond))
	})

	// Nothing was replaced: the operator saw members behind faults, not lost ones.
	final := &v1alpha1.EtcdCluster{}
	if err := k8s.Get(tctx(t), client.ObjectKey{Namespace: ns, Name: name}, final); err != nil {
		t.Fatal(err)
	}
	for _, m := range final.Status.Members {
		var id uint64
		fmt.Sscanf(m.ID, "%x", &id)
		if !ids[id] {
			t.Fatalf("member %s has a new ID %s: it was replaced", m.Name, m.ID)
		}
	}
}

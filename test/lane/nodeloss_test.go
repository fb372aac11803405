package lane

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestTwoMembersOnALostNode: five members on three nodes put two on one node; that node
// stops. Three voters keep quorum and writes go on; both lost members are replaced, one at a
// time, on the nodes left, with no person. Found on the lane: the first member removed for
// its replacement left a pod whose container its kubelet had last reported ready, and the
// cluster stood Stalled ("ready but not a member") with four members. Every pass while the
// members were silent also waited for each of them twice.
func TestTwoMembersOnALostNode(t *testing.T) {
	const ns, name = "twolost", "etcd"
	// Replaced soon after the node is seen lost, to keep the scenario short. The chart only
	// prefers spreading members across nodes, and the scheduler once put three of the five on
	// one node (whose loss costs quorum, not this scenario): a hard spread makes it 2/2/1. It
	// honours taints, so the lost node (tainted unreachable) is no domain for the replacements.
	honor := corev1.NodeInclusionPolicyHonor
	createLaneCluster(t, ns, name, 5, 10*time.Second, func(s *v1alpha1.EtcdClusterSpec) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, NodeTaintsPolicy: &honor,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": name}},
		}}
	})
	eps := memberEndpoints(ns, name, 5)
	cli := etcdClient(t, ns, name, name+"-client-app", eps, false)
	ml, err := cli.MemberList(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	clusterID, before := ml.Header.ClusterId, map[uint64]string{}
	for _, m := range ml.Members {
		before[m.ID] = m.Name
	}

	// The node with the most members: with five pods on three nodes, one holds two.
	pods, err := kube.CoreV1().Pods(ns).List(tctx(t), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
	}
	node := ""
	for n, ps := range byNode {
		if node == "" || len(ps) > len(byNode[node]) {
			node = n
		}
	}
	lost := byNode[node]
	sort.Strings(lost)
	if len(lost) != 2 {
		t.Fatalf("members by node %v: want two on the node that stops", byNode)
	}
	t.Logf("stopping %s, which holds %s", node, strings.Join(lost, " and "))

	w := startWriter(cli, "/lane/twolost")
	w.waitAcked(t, 50)
	start := time.Now()
	if out, err := exec.Command(localBin, "node", "stop", node, "--dir", laneDir).CombinedOutput(); err != nil {
		t.Fatalf("node stop %s: %v: %s", node, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(localBin, "node", "start", node, "--dir", laneDir).Run() })
	// Three of five voters left: writes go on.
	w.waitAcked(t, 100)

	eventually(t, 10*time.Minute, 2*time.Second, fmt.Sprintf("%s replaced away from stopped node %s", strings.Join(lost, " and "), node), func() error {
		c := getCluster(t, ns, name)
		if s := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionStalled); s != nil && s.Status == metav1.ConditionTrue {
			t.Fatalf("the cluster stands Stalled (%s): %s", s.Reason, s.Message)
		}
		for _, pn := range lost {
			p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pn, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName == node || p.Spec.NodeName == "" || !podReady(p) {
				return fmt.Errorf("pod %s on %q, ready %v", pn, p.Spec.NodeName, podReady(p))
			}
		}
		avail := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionAvailable)
		if c.Status.ReadyReplicas != 5 || avail == nil || avail.Status != metav1.ConditionTrue {
			return fmt.Errorf("%d ready", c.Status.ReadyReplicas)
		}
		ml, err := cli.MemberList(tctx(t))
		if err != nil {
			return err
		}
		voters := 0
		for _, m := range ml.Members {
			if !m.IsLearner {
				voters++
			}
		}
		if voters != 5 || len(ml.Members) != 5 {
			return fmt.Errorf("etcd lists %d members, %d voters", len(ml.Members), voters)
		}
		return nil
	})
	took := time.Since(start)
	acked, failed, longest := w.Stop()
	checkAcked(t, cli, "/lane/twolost", acked)

	ml, err = cli.MemberList(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if ml.Header.ClusterId != clusterID {
		t.Fatalf("cluster ID %x after the replacements, want %x", ml.Header.ClusterId, clusterID)
	}
	for _, m := range ml.Members {
		for _, pn := range lost {
			if old := before[m.ID]; old == pn {
				t.Errorf("member %s kept its ID %x: it was not replaced", pn, m.ID)
			}
		}
	}
	t.Logf("%s replaced after node %s stopped in %.1fs: %d writes acknowledged and all readable, %d failed, longest gap %s",
		strings.Join(lost, " and "), node, took.Seconds(), len(acked), failed, longest.Round(time.Millisecond))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// scaleTo sets spec.replicas and waits until etcd has exactly n healthy voting members, no
// learner, and the cluster is Ready.
func scaleTo(t testing.TB, ns string, n int32) time.Duration {
	t.Helper()
	start := time.Now()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Replicas = &n
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 4*time.Minute, fmt.Sprintf("%d healthy voting members", n), func() error {
		c := getCluster(t, ns)
		voters := 0
		for _, m := range c.Status.Members {
			if m.Learner || !m.Healthy {
				return fmt.Errorf("member %s learner=%v healthy=%v", m.Name, m.Learner, m.Healthy)
			}
			voters++
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		if voters != int(n) || ready == nil || ready.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
			prog := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionProgressing)
			return fmt.Errorf("%d voting members, ready %+v, progressing %+v", voters, ready, prog)
		}
		return nil
	})
	return time.Since(start)
}

func TestScaleOneThreeFiveThreeOneKeepsEveryWrite(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 1)
	w := startWriter(t, ns, 5)
	s := startSampler(t, ns)
	for _, n := range []int32{3, 5, 3, 1} {
		took := scaleTo(t, ns, n)
		t.Logf("scaled to %d in %s", n, took.Round(100*time.Millisecond))
		// Scale-in deletes the removed members' claims (retention whenScaledIn: Delete).
		eventually(t, time.Minute, fmt.Sprintf("%d volume claims", n), func() error {
			claims := &corev1.PersistentVolumeClaimList{}
			if err := k8s.List(context.Background(), claims, client.InNamespace(ns)); err != nil {
				return err
			}
			live := 0
			for _, c := range claims.Items {
				if c.DeletionTimestamp == nil {
					live++
				}
			}
			if live != int(n) {
				return fmt.Errorf("%d claims", live)
			}
			return nil
		})
	}
	s.finish(t)
	w.finish(t, ns, 1)
}

// TestMemberWithDeletedVolumeIsReplaced deletes a member's volume claim and pod: the member's
// data is gone, so the operator removes it and adds it back as a learner on a fresh volume,
// while the other two keep quorum and every acknowledged write survives.
func TestMemberWithDeletedVolumeIsReplaced(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	scaleTo(t, ns, 3) // all three healthy voting members
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	s.allowDown("etcd-1")
	took := replaceByDeletingVolume(t, ns, "etcd-1")
	t.Logf("replaced in %s", took.Round(100*time.Millisecond))
	// Where the time went, from the operator's own log: the steps it took for etcd-1.
	for _, line := range strings.Split(operatorLogs(), "\n") {
		if strings.Contains(line, ns) && (strings.Contains(line, "learner") || strings.Contains(line, "refuses")) {
			t.Log(line)
		}
	}
	if r := s.finish(t); r.FewestHealthyVoters > 2 {
		t.Errorf("the sampler never saw etcd-1 gone (fewest healthy voters %d of %d): it is not reading etcd", r.FewestHealthyVoters, r.VotersThen)
	}
	w.finish(t, ns, 3)
}

func memberIDs(t testing.TB, ns string) map[string]string {
	out := map[string]string{}
	for _, m := range getCluster(t, ns).Status.Members {
		out[m.Name] = m.ID
	}
	return out
}

// TestMemberOnAStoppedNodeIsReplaced stops the node of one member: once the node is NotReady
// for longer than spec.membership.replaceAfter, the member is replaced by a fresh one on
// another node, while the other two keep quorum.
func TestMemberOnAStoppedNodeIsReplaced(t *testing.T) {
	ns := namespace(t)
	createQuicklyReplacedCluster(t, ns)
	before := memberIDs(t, ns)
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "etcd-2"}, pod); err != nil {
		t.Fatal(err)
	}
	node := pod.Spec.NodeName
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	s.allowDown("etcd-2")
	start := time.Now()
	if out, err := local(t, "node", "stop", node); err != nil {
		t.Fatalf("node stop: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := local(t, "node", "start", node); err != nil {
			t.Errorf("node start: %v %s", err, out)
		}
	})
	eventually(t, 4*time.Minute, "etcd-2 replaced on another node", func() error {
		ids := memberIDs(t, ns)
		p := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "etcd-2"}, p); err != nil {
			return err
		}
		c := getCluster(t, ns)
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		if ids["etcd-2"] == before["etcd-2"] || p.Spec.NodeName == node || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("etcd-2 id %s (was %s) on %s, ready %+v", ids["etcd-2"], before["etcd-2"], p.Spec.NodeName, ready)
		}
		return nil
	})
	t.Logf("replaced %s after its node stopped (replaceAfter 10s, node NotReady after the controller-manager's grace period)", time.Since(start).Round(100*time.Millisecond))
	if r := s.finish(t); r.FewestHealthyVoters > 2 {
		t.Errorf("the sampler never saw etcd-2 down (fewest healthy voters %d of %d): it is not reading etcd", r.FewestHealthyVoters, r.VotersThen)
	}
	w.finish(t, ns, 3)
}

// createQuicklyReplacedCluster creates 3 members that are replaced 10 s after they are lost,
// and waits until all three are healthy voters.
func createQuicklyReplacedCluster(t *testing.T, ns string) {
	t.Helper()
	replicas := int32(3)
	c := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: &replicas,
			Membership: v1alpha1.MembershipSpec{ReplaceAfter: &metav1.Duration{Duration: 10 * time.Second}}},
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	scaleTo(t, ns, 3)
}

// replaceByDeletingVolume deletes a member's claim and pod and waits until a new member of
// that name is a healthy voter and the cluster is Ready.
func replaceByDeletingVolume(t testing.TB, ns, member string) time.Duration {
	t.Helper()
	before := memberIDs(t, ns)
	start := time.Now()
	for _, obj := range []client.Object{
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-" + member}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: member}},
	} {
		if err := k8s.Delete(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 4*time.Minute, member+" replaced by a new member", func() error {
		c := getCluster(t, ns)
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		ids := memberIDs(t, ns)
		if len(ids) != len(before) || ids[member] == "" || ids[member] == before[member] || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("members %v (before %v), ready %+v", ids, before, ready)
		}
		for _, m := range c.Status.Members {
			if m.Learner || !m.Healthy {
				return fmt.Errorf("member %s learner=%v healthy=%v", m.Name, m.Learner, m.Healthy)
			}
		}
		return nil
	})
	return time.Since(start)
}

// TestMemberWithWipedDataIsReplaced empties one member's data folder in place (the claim
// stays) and kills its process: the member cannot come back under its old identity with an
// empty log, and is replaced once it has failed for replaceAfter.
func TestMemberWithWipedDataIsReplaced(t *testing.T) {
	ns := namespace(t)
	createQuicklyReplacedCluster(t, ns)
	before := memberIDs(t, ns)
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	s.allowDown("etcd-0")

	start := time.Now()
	wipeInPlace(t, ns, "etcd-0")
	eventually(t, 4*time.Minute, "etcd-0 replaced", func() error {
		ids := memberIDs(t, ns)
		c := getCluster(t, ns)
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		if len(ids) != 3 || ids["etcd-0"] == "" || ids["etcd-0"] == before["etcd-0"] || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("members %v (before %v), ready %+v", ids, before, ready)
		}
		return nil
	})
	t.Logf("replaced %s after its data was wiped", time.Since(start).Round(100*time.Millisecond))
	s.finish(t)
	w.finish(t, ns, 3)
}

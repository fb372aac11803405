package e2e

// Volume expansion end to end: spec.storage.size grows under writes. The claims, the
// StatefulSet and the pods are read from the API server, the members' health from etcd by the
// sampler; the operator's status is only logged and checked to say where it stands.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestGrownStorageUnderWrites: a 3-member cluster's spec.storage.size goes from 1Gi to 2Gi
// while a writer runs. Every member's claim grows on the local cluster's provisioner (volume,
// then file system), the StatefulSet is re-created with 2Gi in its claim template and its
// three replicas, no member pod is deleted or restarted, no acknowledged write is lost, and
// the sampler never sees an unsafe state. A member added afterwards gets a 2Gi claim.
func TestGrownStorageUnderWrites(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	w.waitAcked(t, 50)
	grown, took := growStorage(t, ns, "2Gi")
	w.finish(t, ns, 3)
	s.finish(t)
	t.Logf("claims grown to 2Gi in %s, StatefulSet re-created and the cluster Ready in %s; longest write gap %s, no pod restarted",
		grown.Round(time.Millisecond), took.Round(time.Millisecond), w.longestGap().Round(time.Millisecond))

	// A member added now gets a claim of the new size from the re-created template.
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Replicas = ptr.To(int32(4))
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the fourth member's claim asks 2Gi", func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "data-etcd-3"}, pvc); err != nil {
			return err
		}
		if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "2Gi" {
			return fmt.Errorf("it asks %s", q.String())
		}
		return nil
	})
}

// TestGrownStorageOfflineRestartsOneMemberAtATime: on a class whose file systems grow only
// when the volume is mounted again (the local cluster's local-offline), the claims grow, stay
// FileSystemResizePending while the members run, and after two minutes the operator
// restarts the members one at a time, followers first and the leader last after one
// hand-over: no acknowledged write lost, no unsafe sample, at most one leader change.
func TestGrownStorageOfflineRestartsOneMemberAtATime(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)), Storage: v1alpha1.StorageSpec{StorageClassName: ptr.To("local-offline")}})
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	w.waitAcked(t, 50)
	grown, took := growStorageWith(t, ns, "2Gi", true)
	changes := w.termChanges()
	w.finish(t, ns, 3)
	s.finish(t)
	if changes > 1 {
		t.Errorf("%d leader changes: the leader should hand over once, after its followers restarted", changes)
	}
	t.Logf("claims grown offline to 2Gi in %s (each member restarted once), the cluster Ready in %s; %d leader change(s), longest write gap %s",
		grown.Round(time.Millisecond), took.Round(time.Millisecond), changes, w.longestGap().Round(time.Millisecond))
}

// TestOperatorKilledWhileGrowingStorageConverges kills the operator right after each step
// of a volume expansion (the claim grown, the StatefulSet deleted with its pods orphaned)
// while a client writes: the expansion completes, the StatefulSet comes back with its three
// replicas (never the default of one), and no member pod is deleted or restarted.
func TestOperatorKilledWhileGrowingStorageConverges(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	t.Cleanup(func() { restartOperator(t, "") })
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)
	w.waitAcked(t, 50)
	for _, step := range []struct{ fault, size string }{{"RecreateStatefulSet", "2Gi"}, {"ExpandClaim", "3Gi"}} {
		restartOperator(t, step.fault)
		_, took := growStorage(t, ns, step.size)
		if got := operatorCrashes(t); got == 0 {
			t.Fatalf("growing to %s never reached the fault point after %s", step.size, step.fault)
		} else {
			t.Logf("grown to %s in %s with the operator killed %d times after %s", step.size, took.Round(100*time.Millisecond), got, step.fault)
		}
	}
	restartOperator(t, "")
	s.finish(t)
	w.finish(t, ns, 3)
}

// growStorage sets spec.storage.size of the 3-member cluster "etcd" in ns to size and waits
// until every claim has it, the StatefulSet was re-created with it and three replicas, and
// the cluster is Ready; it fails the test if a member pod was deleted or restarted. It
// returns how long the claims took to grow, and the whole change.
func growStorage(t *testing.T, ns, size string) (grown, took time.Duration) {
	t.Helper()
	return growStorageWith(t, ns, size, false)
}

// growStorageWith is growStorage; with offline (a class whose file systems grow only when
// remounted) it instead requires every member pod to have been replaced exactly once (one
// restart each, one at a time), and waits past the operator's two minutes for a file system
// to grow online.
func growStorageWith(t *testing.T, ns, size string, offline bool) (grown, took time.Duration) {
	t.Helper()
	want := resource.MustParse(size)
	before := map[string]string{}
	for _, p := range memberPods(t, ns) {
		before[p.Name] = fmt.Sprintf("%s/%d", p.UID, restartCount(&p))
	}
	old := &appsv1.StatefulSet{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "etcd"}, old); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Storage.Size = &want
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	uids := map[string]map[string]bool{}
	seen := func() {
		for _, p := range memberPods(t, ns) {
			if uids[p.Name] == nil {
				uids[p.Name] = map[string]bool{}
			}
			uids[p.Name][string(p.UID)] = true
		}
	}
	timeout := 3 * time.Minute
	if offline {
		timeout = 6 * time.Minute
	}
	eventually(t, timeout, "every claim at "+size, func() error {
		seen()
		for i := range 3 {
			pvc := &corev1.PersistentVolumeClaim{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-etcd-%d", i)}, pvc); err != nil {
				return err
			}
			if q := pvc.Status.Capacity[corev1.ResourceStorage]; q.Cmp(want) < 0 {
				return fmt.Errorf("%s has %s", pvc.Name, q.String())
			}
		}
		grown = time.Since(start)
		return nil
	})
	eventually(t, 3*time.Minute, "a new StatefulSet with "+size+", the cluster Ready", func() error {
		seen()
		sts := &appsv1.StatefulSet{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "etcd"}, sts); err != nil {
			return err
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			t.Fatalf("StatefulSet %s has replicas %v: it must keep every member pod", sts.UID, sts.Spec.Replicas)
		}
		tmpl := ""
		for _, ct := range sts.Spec.VolumeClaimTemplates {
			q := ct.Spec.Resources.Requests[corev1.ResourceStorage]
			tmpl = q.String()
		}
		if sts.UID == old.UID || tmpl != size {
			return fmt.Errorf("StatefulSet %s (the old one: %v) template %s", sts.UID, sts.UID == old.UID, tmpl)
		}
		c := getCluster(t, ns)
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("Ready %+v", ready)
		}
		if st := c.Status.Storage; st == nil || st.TemplateSize != size {
			return fmt.Errorf("status.storage %+v", st)
		}
		return nil
	})
	took = time.Since(start)
	for _, p := range memberPods(t, ns) {
		now := fmt.Sprintf("%s/%d", p.UID, restartCount(&p))
		switch {
		case offline && (len(uids[p.Name]) != 2 || before[p.Name] == now):
			t.Errorf("member pod %s: %d pods seen by its name (now %s, was %s), want one restart", p.Name, len(uids[p.Name]), now, before[p.Name])
		case !offline && before[p.Name] != now:
			t.Errorf("member pod %s changed (uid/restarts %s, was %s): expansion must not restart members", p.Name, now, before[p.Name])
		}
	}
	return grown, took
}

// memberPods are the member pods of the cluster "etcd" in ns.
func memberPods(t testing.TB, ns string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": "etcd"}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "etcd-") {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no member pods in %s", ns)
	}
	return out
}

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
	c.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi"))
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	var grown time.Duration
	eventually(t, 3*time.Minute, "every claim at 2Gi", func() error {
		for i := range 3 {
			pvc := &corev1.PersistentVolumeClaim{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-etcd-%d", i)}, pvc); err != nil {
				return err
			}
			if q := pvc.Status.Capacity[corev1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) < 0 {
				return fmt.Errorf("%s has %s", pvc.Name, q.String())
			}
		}
		grown = time.Since(start)
		return nil
	})
	eventually(t, 3*time.Minute, "a new StatefulSet with 2Gi, the cluster Ready", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "etcd"}, sts); err != nil {
			return err
		}
		size := ""
		for _, tmpl := range sts.Spec.VolumeClaimTemplates {
			q := tmpl.Spec.Resources.Requests[corev1.ResourceStorage]
			size = q.String()
		}
		if sts.UID == old.UID || size != "2Gi" || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			return fmt.Errorf("StatefulSet %s (old %v) template %s replicas %v", sts.UID, sts.UID == old.UID, size, sts.Spec.Replicas)
		}
		c := getCluster(t, ns)
		ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("Ready %+v", ready)
		}
		if st := c.Status.Storage; st == nil || st.TemplateSize != "2Gi" {
			return fmt.Errorf("status.storage %+v", st)
		}
		return nil
	})
	took := time.Since(start)
	for _, p := range memberPods(t, ns) {
		if now := fmt.Sprintf("%s/%d", p.UID, restartCount(&p)); before[p.Name] != now {
			t.Errorf("member pod %s changed (uid/restarts %s, was %s): expansion must not restart members", p.Name, now, before[p.Name])
		}
	}
	w.finish(t, ns, 3)
	s.finish(t)
	t.Logf("claims grown to 2Gi in %s, StatefulSet re-created and the cluster Ready in %s; longest write gap %s, no pod restarted",
		grown.Round(time.Millisecond), took.Round(time.Millisecond), w.longestGap().Round(time.Millisecond))

	// A member added now gets a claim of the new size from the re-created template.
	c = getCluster(t, ns)
	patch = client.MergeFrom(c.DeepCopy())
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

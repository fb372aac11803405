package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// storageClass creates a StorageClass of its own for the test's namespace (classes are
// cluster-wide), allowing volume expansion or not.
func storageClass(t *testing.T, ns string, expand bool) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "class-" + ns}, Provisioner: "example.com/none", AllowVolumeExpansion: ptr.To(expand)}
	if err := env.Client.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sc) })
	return sc.Name
}

// boundClaims plays the StatefulSet controller and the provisioner (envtest runs neither):
// each member's claim of class, bound, with capacity size. A claim asks for more only once
// bound: the API server refuses to resize a claim that is not.
func boundClaims(t *testing.T, ns, class, size string, n int) {
	t.Helper()
	for i := range n {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("data-etcd-%d", i), Namespace: ns,
			Labels: map[string]string{v1alpha1.LabelCluster: "etcd"}}}
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		pvc.Spec.StorageClassName = ptr.To(class)
		pvc.Spec.VolumeName = fmt.Sprintf("pv-%s-%d", ns, i)
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
		if err := env.Client.Create(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}
		if err := env.Client.Status().Update(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
	}
}

// claimRequests are the sizes the members' claims ask for, by ordinal.
func claimRequests(t *testing.T, ns string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := getObject(ns, fmt.Sprintf("data-etcd-%d", i), pvc); err != nil {
			t.Fatal(err)
		}
		q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		out = append(out, q.String())
	}
	return out
}

func templateSize(sts *appsv1.StatefulSet) string {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == "data" {
			q := t.Spec.Resources.Requests[corev1.ResourceStorage]
			return q.String()
		}
	}
	return ""
}

// TestGrownStorageExpandsEveryClaimThenRecreatesTheStatefulSet: spec.storage.size grows from
// 1Gi to 2Gi. The operator asks every member's claim for 2Gi, waits while the storage grows
// them (status.storage says where each stands), then deletes the StatefulSet orphaning its
// pods, and creates it again with 2Gi in its claim template and the replicas that keep every
// member pod (not the default of one, which would delete two members' pods). No pod is
// deleted on the way.
func TestGrownStorageExpandsEveryClaimThenRecreatesTheStatefulSet(t *testing.T) {
	ns := env.Namespace(t)
	class := storageClass(t, ns, true)
	healthyEtcd(ns, 3)
	boundClaims(t, ns, class, "1Gi", 3)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Storage.StorageClassName = ptr.To(class)
		c.Spec.Storage.Size = ptr.To(resource.MustParse("1Gi"))
	})
	old := waitStatefulSet(t, ns)
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	pods := map[string]string{}
	for i := range 3 {
		p := &corev1.Pod{}
		if err := getObject(ns, fmt.Sprintf("etcd-%d", i), p); err != nil {
			t.Fatal(err)
		}
		pods[p.Name] = string(p.UID)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi")) })
	eventually(t, timeout, "every claim asks 2Gi", func() error {
		if got := claimRequests(t, ns, 3); !slices.Equal(got, []string{"2Gi", "2Gi", "2Gi"}) {
			return fmt.Errorf("claims ask %v", got)
		}
		return nil
	})
	c := waitCondition(t, ns, v1alpha1.ConditionProgressing, "True/"+v1alpha1.ReasonExpandingVolumes)
	eventually(t, timeout, "status.storage shows every claim resizing", func() error {
		c = getCluster(t, ns)
		st := c.Status.Storage
		if st == nil || st.TemplateSize != "1Gi" || len(st.Members) != 3 {
			return fmt.Errorf("status.storage %+v", st)
		}
		for _, m := range st.Members {
			if m.Requested != "2Gi" || m.Capacity != "1Gi" || m.State != v1alpha1.VolumeResizing {
				return fmt.Errorf("status.storage %+v", st.Members)
			}
		}
		return nil
	})
	sts := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", sts); err != nil || sts.UID != old.UID || sts.DeletionTimestamp != nil {
		t.Fatalf("the StatefulSet changed before the volumes grew: %v %+v", err, sts.ObjectMeta)
	}

	// The storage grows the volumes (retried: the operator may write a claim meanwhile).
	for i := range 3 {
		eventually(t, timeout, fmt.Sprintf("claim data-etcd-%d grown", i), func() error {
			pvc := &corev1.PersistentVolumeClaim{}
			if err := getObject(ns, fmt.Sprintf("data-etcd-%d", i), pvc); err != nil {
				return err
			}
			pvc.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("2Gi")
			return env.Client.Status().Update(context.Background(), pvc)
		})
	}
	// The operator deletes the StatefulSet, orphaning its pods; the garbage collector (which
	// envtest does not run) then lifts its orphan finalizer.
	eventually(t, timeout, "the StatefulSet deleted with its pods orphaned", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if sts.UID == old.UID && sts.DeletionTimestamp == nil {
			return fmt.Errorf("not deleted")
		}
		if sts.UID == old.UID && !slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents) {
			return fmt.Errorf("deleted without orphaning its pods: finalizers %v", sts.Finalizers)
		}
		if sts.UID == old.UID {
			sts.Finalizers = nil
			return fmt.Errorf("lifting the orphan finalizer: %v", env.Client.Update(context.Background(), sts))
		}
		return nil
	})
	var fresh *appsv1.StatefulSet
	eventually(t, timeout, "a new StatefulSet with 2Gi and 3 replicas", func() error {
		fresh = &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", fresh); err != nil {
			return err
		}
		if fresh.UID == old.UID {
			return fmt.Errorf("still the old StatefulSet")
		}
		if got := templateSize(fresh); got != "2Gi" || fresh.Spec.Replicas == nil || *fresh.Spec.Replicas != 3 {
			return fmt.Errorf("template %s, replicas %v", got, fresh.Spec.Replicas)
		}
		return nil
	})
	// Created with them: a StatefulSet created with one replica and scaled after would have
	// had the StatefulSet controller delete two member pods in between (envtest runs no such
	// controller, so the generation is what shows it: a scale raises it).
	if fresh.Generation != 1 {
		t.Fatalf("the new StatefulSet is at generation %d: it was changed after its creation (replicas %d)", fresh.Generation, *fresh.Spec.Replicas)
	}
	markStatefulSetCurrent(t, ns)
	c = waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if st := c.Status.Storage; st == nil || st.TemplateSize != "2Gi" || st.Members[2].State != v1alpha1.VolumeReady {
		t.Fatalf("status.storage %+v", st)
	}
	for name, uid := range pods {
		p := &corev1.Pod{}
		if err := getObject(ns, name, p); err != nil || string(p.UID) != uid || p.DeletionTimestamp != nil {
			t.Fatalf("pod %s was touched: %v %+v", name, err, p.ObjectMeta)
		}
	}
	// The replicas stay the membership owner's: an apply of the chart after the re-creation
	// must not drop them to the default of one.
	n := reconciles(t)
	poke(t, ns)
	waitReconciles(t, n+1)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if err := getObject(ns, "etcd", fresh); err != nil || *fresh.Spec.Replicas != 3 {
		t.Fatalf("replicas after another pass: %v %v", err, fresh.Spec.Replicas)
	}
}

// TestGrownStorageOnAClassWithoutExpansionStalls: the class does not allow volume expansion:
// the operator touches no claim and says what to do.
func TestGrownStorageOnAClassWithoutExpansionStalls(t *testing.T) {
	ns := env.Namespace(t)
	class := storageClass(t, ns, false)
	healthyEtcd(ns, 3)
	boundClaims(t, ns, class, "1Gi", 3)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.StorageClassName = ptr.To(class) })
	waitStatefulSet(t, ns)
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.Size = ptr.To(resource.MustParse("3Gi")) })
	c := waitCondition(t, ns, v1alpha1.ConditionStalled, "True/"+v1alpha1.ReasonVolumeExpansionNotAllowed)
	if msg := condition(c, v1alpha1.ConditionDegraded); msg != "True/"+v1alpha1.ReasonVolumeExpansionNotAllowed {
		t.Fatalf("Degraded %s", msg)
	}
	if got := claimRequests(t, ns, 3); !slices.Equal(got, []string{"1Gi", "1Gi", "1Gi"}) {
		t.Fatalf("claims ask %v", got)
	}
	// Once the class allows it, the claims grow.
	sc := &storagev1.StorageClass{}
	if err := getObject("", class, sc); err != nil {
		t.Fatal(err)
	}
	sc.AllowVolumeExpansion = ptr.To(true)
	if err := env.Client.Update(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, "every claim asks 3Gi", func() error {
		if got := claimRequests(t, ns, 3); !slices.Equal(got, []string{"3Gi", "3Gi", "3Gi"}) {
			return fmt.Errorf("claims ask %v", got)
		}
		return nil
	})
	waitCondition(t, ns, v1alpha1.ConditionStalled, "False/"+v1alpha1.ReasonNotStalled)
}

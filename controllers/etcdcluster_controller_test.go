package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

const timeout = 30 * time.Second

func newCluster(t testing.TB, ns string, mutate func(*v1alpha1.EtcdCluster)) *v1alpha1.EtcdCluster {
	t.Helper()
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns}}
	// Plain unless the test asks for TLS: most tests are about other things, and envtest has
	// no etcd to speak TLS to (the secure default has tests of its own, secure_test.go).
	c.Spec.Insecure = true
	if mutate != nil {
		mutate(c)
	}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatalf("failed to create EtcdCluster: %v", err)
	}
	return c
}

func getCluster(t testing.TB, ns string) *v1alpha1.EtcdCluster {
	t.Helper()
	c := &v1alpha1.EtcdCluster{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd"}, c); err != nil {
		t.Fatalf("failed to get EtcdCluster: %v", err)
	}
	return c
}

func condition(c *v1alpha1.EtcdCluster, typ string) string {
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s/%s", cond.Status, cond.Reason)
}

func waitCondition(t testing.TB, ns, typ, want string) *v1alpha1.EtcdCluster {
	t.Helper()
	var c *v1alpha1.EtcdCluster
	eventually(t, timeout, typ+" "+want, func() error {
		c = getCluster(t, ns)
		if got := condition(c, typ); got != want {
			return fmt.Errorf("%s is %s (conditions %+v)", typ, got, c.Status.Conditions)
		}
		return nil
	})
	return c
}

func getObject(ns, name string, obj client.Object) error {
	return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

func waitStatefulSet(t testing.TB, ns string) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	eventually(t, timeout, "StatefulSet", func() error { return getObject(ns, "etcd", sts) })
	return sts
}

// markReady plays the StatefulSet controller and the kubelet (envtest runs neither): all
// pods and their volume claims exist, pods run the current template and are ready.
func markReady(t testing.TB, ns string) {
	t.Helper()
	eventually(t, timeout, "StatefulSet scaled by the operator", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != specReplicasOf(t, ns) {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	sts := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", sts); err != nil {
		t.Fatal(err)
	}
	// Claims first, as the StatefulSet controller creates each claim before its pod: once a
	// pod runs, every member's claim exists.
	for i := int32(0); i < *sts.Spec.Replicas; i++ {
		name := fmt.Sprintf("etcd-%d", i)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-" + name, Namespace: ns,
			Labels: map[string]string{v1alpha1.LabelCluster: "etcd"}}}
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		if err := env.Client.Create(context.Background(), pvc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for i := int32(0); i < *sts.Spec.Replicas; i++ {
		runReadyPod(t, ns, fmt.Sprintf("etcd-%d", i), sts, nil)
	}
	markStatefulSetCurrent(t, ns)
}

// runReadyPod creates a member pod of sts (unless it exists) with args, and marks it running
// and ready. The pods run the revision the StatefulSet's status names (etcd-1, see
// markStatefulSetCurrent), so no rollout starts.
func runReadyPod(t testing.TB, ns, name string, sts *appsv1.StatefulSet, args []string) {
	t.Helper()
	labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: "etcd-1"}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
	pod.Spec.Containers = []corev1.Container{{Name: "etcd", Image: "etcd", Args: args}}
	if err := env.Client.Create(context.Background(), pod); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// markStatefulSetCurrent plays the StatefulSet controller: its status says every replica runs
// the current revision, etcd-1.
func markStatefulSetCurrent(t testing.TB, ns string) {
	t.Helper()
	eventually(t, timeout, "StatefulSet status update", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		n := *sts.Spec.Replicas
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n,
			CurrentReplicas: n, UpdatedReplicas: n, CurrentRevision: "etcd-1", UpdateRevision: "etcd-1",
		}
		return env.Client.Status().Update(context.Background(), sts)
	})
}

// healthyEtcd registers a fake etcd for ns that reports n healthy voting members, the first
// leading.
func healthyEtcd(ns string, n int) *etcd.Fake {
	f := &etcd.Fake{State: etcd.Cluster{ClusterID: 0xc1}, Statuses: map[string]etcd.MemberStatus{}}
	for i := 0; i < n; i++ {
		id := uint64(0xa0 + i)
		url := fmt.Sprintf("http://etcd-%d.etcd.%s.svc:2379", i, ns)
		f.State.Members = append(f.State.Members, etcd.Member{
			ID: id, Name: fmt.Sprintf("etcd-%d", i), ClientURLs: []string{url},
			PeerURLs: []string{fmt.Sprintf("http://etcd-%d.etcd.%s.svc:2380", i, ns)},
		})
		f.Statuses[url] = etcd.MemberStatus{ID: id, Version: "3.6.16", DBSize: 20480, Leader: 0xa0, RaftIndex: 42}
	}
	fakes.set(ns, f)
	return f
}

func TestAppliesChartObjectsWithOwnerAndFinalizer(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	sts := waitStatefulSet(t, ns)
	objects := map[string]client.Object{
		"etcd": &corev1.Service{}, "etcd-client": &corev1.Service{},
	}
	for name, o := range objects {
		eventually(t, timeout, "Service "+name, func() error { return getObject(ns, name, o) })
	}
	for _, o := range []client.Object{&policyv1.PodDisruptionBudget{}, &corev1.ServiceAccount{}} {
		eventually(t, timeout, fmt.Sprintf("%T", o), func() error { return getObject(ns, "etcd", o) })
	}
	if ref := metav1.GetControllerOf(sts); ref == nil || ref.UID != getCluster(t, ns).UID {
		t.Fatalf("StatefulSet is not controlled by the EtcdCluster: %+v", sts.OwnerReferences)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Fatalf("StatefulSet strategy %s", sts.Spec.UpdateStrategy.Type)
	}
	// The operator owns the replicas: all members of the first formation at once.
	eventually(t, timeout, "StatefulSet at 3 replicas", func() error {
		s := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", s); err != nil {
			return err
		}
		if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %v", s.Spec.Replicas)
		}
		cm := &corev1.ConfigMap{}
		if err := getObject(ns, "etcd-membership", cm); err != nil {
			return err
		}
		if cm.Data["ETCD_INITIAL_CLUSTER_STATE"] != "new" || strings.Count(cm.Data["ETCD_INITIAL_CLUSTER"], "=http://") != 3 {
			return fmt.Errorf("membership ConfigMap %v", cm.Data)
		}
		return nil
	})
	got := waitCondition(t, ns, v1alpha1.ConditionProgressing, "True/"+v1alpha1.ReasonCreating)
	if !controllerutilContains(got.Finalizers, v1alpha1.FinalizerName) {
		t.Fatalf("finalizer missing: %v", got.Finalizers)
	}
	if got.Status.Selector != "app.kubernetes.io/instance=etcd,app.kubernetes.io/name=etcd" {
		t.Fatalf("selector %q", got.Status.Selector)
	}
	if condition(got, v1alpha1.ConditionAvailable) != "False/"+v1alpha1.ReasonQuorumNotReady {
		t.Fatalf("Available: %s", condition(got, v1alpha1.ConditionAvailable))
	}
}

// updateCluster changes the EtcdCluster's spec, retrying on conflicts with the operator's own
// writes (finalizer, intent annotation).
func updateCluster(t testing.TB, ns string, change func(*v1alpha1.EtcdCluster)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns)
		change(c)
		return env.Client.Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func specReplicasOf(t testing.TB, ns string) int32 {
	c := getCluster(t, ns)
	if c.Spec.Replicas == nil {
		return 3
	}
	return *c.Spec.Replicas
}

func controllerutilContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestHealthyClusterReportsMembersAndIsReady(t *testing.T) {
	ns := env.Namespace(t)
	healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	c := waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if c.Status.Leader != "etcd-0" || c.Status.LeaderID != "a0" || c.Status.ClusterID != "c1" || c.Status.CurrentVersion != "3.6.16" {
		t.Fatalf("status leader %q id %q cluster %q version %q", c.Status.Leader, c.Status.LeaderID, c.Status.ClusterID, c.Status.CurrentVersion)
	}
	if len(c.Status.Members) != 3 || !c.Status.Members[0].Leader || !c.Status.Members[2].Healthy || c.Status.Members[1].PeerURL == "" {
		t.Fatalf("members %+v", c.Status.Members)
	}
	if c.Status.ObservedGeneration != c.Generation || c.Status.ReadyReplicas != 3 {
		t.Fatalf("observedGeneration %d generation %d ready %d", c.Status.ObservedGeneration, c.Generation, c.Status.ReadyReplicas)
	}
}

func TestUnhealthyMemberDegradesCluster(t *testing.T) {
	ns := env.Namespace(t)
	f := healthyEtcd(ns, 3)
	f.ErrStatus = map[string]error{fmt.Sprintf("http://etcd-2.etcd.%s.svc:2379", ns): fmt.Errorf("connection refused")}
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonMembersUnhealthy)
	if condition(c, v1alpha1.ConditionAvailable) != "True/"+v1alpha1.ReasonQuorumAvailable {
		t.Fatalf("two of three healthy members keep quorum; Available is %s", condition(c, v1alpha1.ConditionAvailable))
	}
	if condition(c, v1alpha1.ConditionReady) != "False/"+v1alpha1.ReasonDegraded {
		t.Fatalf("Ready %s", condition(c, v1alpha1.ConditionReady))
	}
}

func TestDeletedStatefulSetComesBack(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	old := waitStatefulSet(t, ns)
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, "a new StatefulSet", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if sts.UID == old.UID {
			return fmt.Errorf("still the old StatefulSet")
		}
		return nil
	})
}

func TestHandEditsAreRestored(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	pdb := &policyv1.PodDisruptionBudget{}
	eventually(t, timeout, "PDB", func() error { return getObject(ns, "etcd", pdb) })

	// A hand edit of a field the chart sets, and of one the chart does not set.
	eventually(t, timeout, "hand edit", func() error {
		if err := getObject(ns, "etcd", pdb); err != nil {
			return err
		}
		pdb.Spec.MinAvailable.IntVal = 1
		pdb.Annotations = map[string]string{"team": "platform"}
		return env.Client.Update(context.Background(), pdb)
	})
	eventually(t, timeout, "minAvailable restored", func() error {
		if err := getObject(ns, "etcd", pdb); err != nil {
			return err
		}
		if pdb.Spec.MinAvailable.IntValue() != 2 {
			return fmt.Errorf("minAvailable %s", pdb.Spec.MinAvailable.String())
		}
		return nil
	})
	if pdb.Annotations["team"] != "platform" {
		t.Fatalf("the operator removed a field it does not own: annotations %v", pdb.Annotations)
	}

	svc := &corev1.Service{}
	eventually(t, timeout, "client Service", func() error { return getObject(ns, "etcd-client", svc) })
	if err := env.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, "client Service restored", func() error {
		s := &corev1.Service{}
		if err := getObject(ns, "etcd-client", s); err != nil {
			return err
		}
		if s.UID == svc.UID {
			return fmt.Errorf("still the old Service")
		}
		return nil
	})
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	ns := env.Namespace(t)
	healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if writesIn(ns) == 0 {
		t.Fatal("no write of the operator's was counted in the namespace, though it created the cluster's objects there")
	}

	// Let any pass that is already queued finish, then count.
	eventually(t, timeout, "a quiet controller", func() error {
		before := writesIn(ns)
		r := reconciles(t)
		touch(t, ns, "quiet")
		waitReconciles(t, r+1)
		if w := writesIn(ns) - before; w != 0 {
			return fmt.Errorf("%d writes", w)
		}
		return nil
	})
	before, r := writesIn(ns), reconciles(t)
	for i := 0; i < 5; i++ {
		touch(t, ns, fmt.Sprintf("pass-%d", i))
	}
	// An edit by someone else to a field the operator does not own is no reason to write.
	eventually(t, timeout, "foreign annotation", func() error {
		svc := &corev1.Service{}
		if err := getObject(ns, "etcd-client", svc); err != nil {
			return err
		}
		svc.Annotations["example.com/owner"] = "team-a"
		return env.Client.Update(context.Background(), svc)
	})
	waitReconciles(t, r+6)
	if w := writesIn(ns) - before; w != 0 {
		t.Fatalf("reconciles of an unchanged, healthy cluster made %d write calls; want 0", w)
	}
}

// touch changes an annotation of the EtcdCluster, which triggers a pass without changing
// the spec.
func touch(t testing.TB, ns, value string) {
	t.Helper()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations["test/touch"] = value
	if err := env.Client.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

func waitReconciles(t testing.TB, n float64) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%v reconciles", n), func() error {
		if got := reconciles(t); got < n {
			return fmt.Errorf("%v reconciles", got)
		}
		return nil
	})
}

func TestObjectsNoLongerRenderedArePruned(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	eventually(t, timeout, "PDB", func() error { return getObject(ns, "etcd", &policyv1.PodDisruptionBudget{}) })

	// A PDB with the inventory labels that this cluster does not control is never pruned.
	foreign := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns,
		Labels: map[string]string{v1alpha1.LabelCluster: "etcd", v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}}}
	foreign.Spec.MaxUnavailable = ptrIntStr(1)
	if err := env.Client.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"podDisruptionBudget":{"enabled":false}}`)}
	})
	eventually(t, timeout, "PDB pruned", func() error {
		err := getObject(ns, "etcd", &policyv1.PodDisruptionBudget{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("PDB still there (err %v)", err)
	})
	if err := getObject(ns, "foreign", &policyv1.PodDisruptionBudget{}); err != nil {
		t.Fatalf("a PDB the cluster does not control was deleted: %v", err)
	}
}

func TestPausedClusterIsNotChanged(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Paused = true
	})
	waitCondition(t, ns, v1alpha1.ConditionProgressing, "False/"+v1alpha1.ReasonPaused)

	svc := &corev1.Service{}
	if err := getObject(ns, "etcd-client", svc); err != nil {
		t.Fatal(err)
	}
	r := reconciles(t)
	if err := env.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	touch(t, ns, "paused")
	waitReconciles(t, r+2)
	if err := getObject(ns, "etcd-client", &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a paused cluster's Service was recreated (err %v)", err)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Paused = false
	})
	eventually(t, timeout, "Service back after unpause", func() error { return getObject(ns, "etcd-client", &corev1.Service{}) })
}

func TestChartValuesTheChartRefusesAreReported(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	sts := &appsv1.StatefulSet{}
	eventually(t, timeout, "the first formation's replicas", func() error {
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %v", sts.Spec.Replicas)
		}
		return nil
	})
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"terminationGracePeriodSeconds":0,"podDisruptionBudget":{"enabled":false}}`)}
	})
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonInvalidSpec)
	msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message
	if !contains(msg, "spec.chart.values") || !contains(msg, "terminationGracePeriodSeconds") {
		t.Fatalf("the condition does not say what to fix: %q", msg)
	}
	// The pass finished on this generation by refusing it (Stalled): observedGeneration
	// records it, so kstatus reads Failed rather than a generation not yet observed.
	if c.Status.ObservedGeneration != c.Generation || condition(c, v1alpha1.ConditionStalled) != "True/"+v1alpha1.ReasonInvalidSpec {
		t.Fatalf("observedGeneration %d, generation %d, Stalled %s", c.Status.ObservedGeneration, c.Generation, condition(c, v1alpha1.ConditionStalled))
	}
	// Nothing was applied or pruned from the invalid spec.
	if err := getObject(ns, "etcd", &policyv1.PodDisruptionBudget{}); err != nil {
		t.Fatalf("PDB pruned from an invalid spec: %v", err)
	}
	now := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", now); err != nil || *now.Spec.Replicas != *sts.Spec.Replicas {
		t.Fatalf("StatefulSet changed from an invalid spec: %v %d", err, *now.Spec.Replicas)
	}
}

func TestDeletionRemovesObjectsAndFinalizer(t *testing.T) {
	for _, policy := range []v1alpha1.RetentionAction{v1alpha1.RetentionRetain, v1alpha1.RetentionDelete} {
		t.Run(string(policy), func(t *testing.T) { testDeletion(t, policy) })
	}
}

func testDeletion(t *testing.T, whenDeleted v1alpha1.RetentionAction) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.Retention.WhenDeleted = whenDeleted })
	waitStatefulSet(t, ns)
	markReady(t, ns)
	if err := env.Client.Delete(context.Background(), getCluster(t, ns)); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, "EtcdCluster gone", func() error {
		err := getObject(ns, "etcd", &v1alpha1.EtcdCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}, &corev1.ServiceAccount{}} {
		if err := getObject(ns, "etcd", o); !apierrors.IsNotFound(err) {
			t.Fatalf("%T left behind (err %v)", o, err)
		}
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := env.Client.List(context.Background(), claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			kept++
		}
	}
	if want := map[v1alpha1.RetentionAction]int{v1alpha1.RetentionRetain: 3, v1alpha1.RetentionDelete: 0}[whenDeleted]; kept != want {
		t.Fatalf("whenDeleted %s: %d volume claims kept, want %d", whenDeleted, kept, want)
	}
}

func TestEphemeralStorageIsWarnedAbout(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.Ephemeral = ptr.To(true) })
	c := waitCondition(t, ns, v1alpha1.ConditionEphemeralStorage, "True/"+v1alpha1.ReasonEmptyDir)
	if !contains(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionEphemeralStorage).Message, "lose") {
		t.Fatalf("the warning does not say data is lost")
	}
	sts := waitStatefulSet(t, ns)
	if len(sts.Spec.VolumeClaimTemplates) != 0 || sts.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Fatalf("ephemeral cluster has volume claims")
	}
}

// TestLeaderChangeIsCountedInStatusEventsAndMetrics: a new leader shows in status (leader,
// leaderChanges, lastLeaderChangeTime), as a LeaderChanged event and in the
// etcdpilot_cluster_leader_changes_total metric.
func TestLeaderChangeIsCountedInStatusEventsAndMetrics(t *testing.T) {
	ns := env.Namespace(t)
	f := healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	c := waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if c.Status.LeaderChanges != 0 || c.Status.Leader != "etcd-0" {
		t.Fatalf("before: leader %s, %d changes", c.Status.Leader, c.Status.LeaderChanges)
	}
	before := leaderChangesMetric(t, ns)
	f.SetLeader(0xa1)
	poke(t, ns)
	eventually(t, timeout, "a leader change in status", func() error {
		c = getCluster(t, ns)
		if c.Status.Leader != "etcd-1" || c.Status.LeaderChanges != 1 || c.Status.LastLeaderChangeTime == nil {
			return fmt.Errorf("leader %s, %d changes, last %v", c.Status.Leader, c.Status.LeaderChanges, c.Status.LastLeaderChangeTime)
		}
		return nil
	})
	eventually(t, timeout, "a LeaderChanged event", func() error {
		evs := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "LeaderChanged" && strings.Contains(e.Note, "etcd-1 (a1) leads now; etcd-0 (a0) led before") {
				return nil
			}
		}
		return fmt.Errorf("no LeaderChanged event among %d", len(evs.Items))
	})
	if got := leaderChangesMetric(t, ns); got != before+1 {
		t.Fatalf("etcdpilot_cluster_leader_changes_total went from %v to %v, want +1", before, got)
	}
}

// leaderChangesMetric reads etcdpilot_cluster_leader_changes_total for the cluster in ns.
func leaderChangesMetric(t *testing.T, ns string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "etcdpilot_cluster_leader_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["name"] == "etcd" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// poke changes an annotation of the EtcdCluster, which starts a pass.
func poke(t *testing.T, ns string) {
	t.Helper()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations["test/poke"] = time.Now().String()
	if err := env.Client.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

// TestVersionBelowTheClusterVersionIsRefused: a spec.version older than the cluster version
// etcd reports (stored before the admission rule, or by a client that skipped it) blocks the
// render with Degraded VersionRefused, and nothing is applied from it.
func TestVersionBelowTheClusterVersionIsRefused(t *testing.T) {
	ns := env.Namespace(t)
	f := healthyEtcd(ns, 3)
	f.SetClusterVersion("3.6.0")
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.5.35" })
	waitStatefulSet(t, ns)
	markReady(t, ns)
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonVersionRefused)
	d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
	if !strings.Contains(d.Message, "spec.version 3.5.35 is older than the cluster version 3.6") || !strings.Contains(d.Message, "set spec.version to a 3.6 release") {
		t.Fatalf("Degraded message %q", d.Message)
	}
	if c.Status.ClusterVersion != "3.6.0" || c.Status.TargetVersion != "3.5.35" {
		t.Fatalf("clusterVersion %q targetVersion %q", c.Status.ClusterVersion, c.Status.TargetVersion)
	}
}

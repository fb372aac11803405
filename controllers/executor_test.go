package controllers_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
)

// TestExecutorDeletesOnlyWhatItObserved (path 9 of issue 9): a pod or claim re-created since
// the pass observed it is a different object; the delete carries the observed UID and leaves
// the new one alone.
func TestExecutorDeletesOnlyWhatItObserved(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	var kinds []string
	r := &controllers.EtcdClusterReconciler{Client: env.Client, Scheme: env.Client.Scheme(), Recorder: events.NewFakeRecorder(10),
		AfterStep: func(k string) { kinds = append(kinds, k) }}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd"}}

	newPod := func() *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd-1"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := newPod()
	observed := membership.Observation{Pods: []plan.Pod{{Name: "etcd-1", Ordinal: 1, Exists: true, UID: string(old.UID)}}}
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	replacement := newPod()
	if err := r.Act(ctx, c, observed, plan.Step{Kind: plan.DeletePod, Member: "etcd-1", Reason: v1alpha1.ReasonRollingOut}); err != nil {
		t.Fatalf("a pod replaced since the observation is no error: %v", err)
	}
	if err := getObject(ns, "etcd-1", &corev1.Pod{}); err != nil {
		t.Fatalf("the pod created after the observation was deleted: %v", err)
	}
	observed.Pods[0].UID = string(replacement.UID)
	if err := r.Act(ctx, c, observed, plan.Step{Kind: plan.DeletePod, Member: "etcd-1", Reason: v1alpha1.ReasonRollingOut}); err != nil {
		t.Fatal(err)
	}
	if err := getObject(ns, "etcd-1", &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the observed pod is still there: %v", err)
	}
	if len(kinds) != 2 || kinds[0] != string(plan.DeletePod) {
		t.Fatalf("AfterStep saw %v, want DeletePod twice", kinds)
	}
}

// TestIntentIsWrittenWithAnOptimisticLock (path 9): an intent decided from a stale read (a
// second operator replica during a hand-over) is not stored over what changed since.
func TestIntentIsWrittenWithAnOptimisticLock(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	c := newCluster(t, ns, nil)
	stale := c.DeepCopy()
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations["example.com/touched"] = "yes"
	})
	r := &controllers.EtcdClusterReconciler{Client: env.Client, Scheme: env.Client.Scheme(), Recorder: events.NewFakeRecorder(10)}
	err := r.SetIntent(ctx, stale, &plan.Intent{Op: plan.IntentAdd, Member: "etcd-3", Reason: v1alpha1.ReasonScaleOut})
	if !apierrors.IsConflict(err) {
		t.Fatalf("writing an intent from a stale read: %v, want a conflict", err)
	}
}

// TestTheBackupBeforeAnUpgradeIsTheWaitsWrite: the backup a minor upgrade waits for is
// created by the executor when that wait is the pass's step (after the arbiter and the gate),
// not while the planners decide; once, and a wait without one writes nothing.
func TestTheBackupBeforeAnUpgradeIsTheWaitsWrite(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	r := &controllers.EtcdClusterReconciler{Client: env.Client, Scheme: env.Client.Scheme(), Recorder: events.NewFakeRecorder(10)}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd"}}
	list := func() []v1alpha1.EtcdBackup {
		bs := &v1alpha1.EtcdBackupList{}
		if err := env.Client.List(ctx, bs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return bs.Items
	}
	if err := r.Act(ctx, c, membership.Observation{}, plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonWaitingForBackup}); err != nil {
		t.Fatal(err)
	}
	if bs := list(); len(bs) != 0 {
		t.Fatalf("a wait without a backup created %d", len(bs))
	}
	wait := backupplan.BeforeUpgrade("etcd", true, plan.Step{Kind: plan.DeletePod, Member: "etcd-2", Reason: v1alpha1.ReasonRollingOut},
		"3.6.16", "3.5.35", nil)
	if wait.Kind != plan.Wait || wait.Backup == nil {
		t.Fatalf("the upgrade's step was not held for its backup: %+v", wait)
	}
	for range 2 { // a second pass finds it created: no error, no second backup
		if err := r.Act(ctx, c, membership.Observation{}, wait); err != nil {
			t.Fatal(err)
		}
	}
	bs := list()
	if len(bs) != 1 || bs[0].Name != "etcd-before-3-6-16" || bs[0].Labels[v1alpha1.LabelBackupBeforeUpgrade] != "3.6.16" || bs[0].Spec.ClusterName != "etcd" {
		t.Fatalf("backups %+v", bs)
	}
}

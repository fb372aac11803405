package controllers_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Disaster recovery stops every member and replaces the cluster's data with a backup: it must
// act only on evidence, read in the pass, that quorum is lost and that a majority of the voters
// etcd last listed lost their data. These tests play the kubelet and etcd (a fake) around the
// real reconciler and API server: a formed three-member cluster whose member list the operator
// recorded, a Succeeded backup, disasterRecovery FromLatestBackup after 1 s; then a fault.

// drHarness is one disaster recovery test: the restore harness, the fake etcd, and whether
// the operator reaches it.
type drHarness struct {
	*restoreHarness
	fake *etcd.Fake
	// reachable is false while the operator cannot reach etcd at all (its dial fails).
	reachable bool
}

func (h *drHarness) url(k int) string {
	return fmt.Sprintf("http://etcd-%d.etcd.%s.svc:2379", k, h.ns)
}

// formedCluster creates a formed three-member cluster: pods running etcd, claims, a healthy
// fake etcd; passes run until the claims are stamped and the member list is recorded. It also
// creates a Succeeded backup of the cluster.
func formedCluster(t *testing.T, h *restoreHarness) *drHarness {
	t.Helper()
	d := &drHarness{restoreHarness: h, reachable: true, fake: &etcd.Fake{State: etcd.Cluster{ClusterID: 0xc1}, Statuses: map[string]etcd.MemberStatus{}}}
	for k := 0; k < 3; k++ {
		id := uint64(0xa0 + k)
		d.fake.State.Members = append(d.fake.State.Members, etcd.Member{ID: id, Name: fmt.Sprintf("etcd-%d", k), ClientURLs: []string{d.url(k)},
			PeerURLs: []string{fmt.Sprintf("http://etcd-%d.etcd.%s.svc:2380", k, h.ns)}})
		d.fake.Statuses[d.url(k)] = etcd.MemberStatus{ID: id, Version: "3.6.16", Leader: 0xa0, RaftIndex: 42, AppliedIndex: 42}
	}
	h.r.DialEtcd = func(context.Context, []string, *tls.Config) (etcd.Client, error) {
		if !d.reachable {
			return nil, errors.New("dial tcp: lookup etcd-0.etcd: no such host")
		}
		return d.fake, nil
	}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "etcd"}}
	c.Spec.Insecure = true // about disaster recovery, not TLS
	c.Spec.Replicas = ptr.To(int32(3))
	c.Spec.DisasterRecovery = v1alpha1.DisasterRecoverySpec{Policy: v1alpha1.DisasterRecoveryFromLatestBackup, After: &metav1.Duration{Duration: time.Second}}
	if err := h.env.Client.Create(h.ctx(), c); err != nil {
		t.Fatal(err)
	}
	var sts *appsv1.StatefulSet
	h.until(t, "the StatefulSet at 3 replicas", func() error {
		sts = &appsv1.StatefulSet{}
		if err := h.get("etcd", sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + h.ns}}
	if err := h.env.Client.Create(h.ctx(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.env.Client.Delete(context.Background(), node) })
	d.setNodeReady(t, true)
	for k := 0; k < 3; k++ {
		name := fmt.Sprintf("etcd-%d", k)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "data-" + name,
			Labels: map[string]string{v1alpha1.LabelCluster: "etcd"}}}
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		if err := h.env.Client.Create(h.ctx(), pvc); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: "etcd-1"}
		for k, v := range sts.Spec.Template.Labels {
			labels[k] = v
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Labels: labels}}
		pod.Spec.Containers = []corev1.Container{{Name: "etcd", Image: "etcd"}}
		pod.Spec.NodeName = node.Name
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}}}
		if err := h.env.Client.Create(h.ctx(), pod); err != nil {
			t.Fatal(err)
		}
		d.setEtcdContainer(t, name, true)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := h.get("etcd", sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
			CurrentReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "etcd-1", UpdateRevision: "etcd-1"}
		return h.env.Client.Status().Update(h.ctx(), sts)
	})
	if err != nil {
		t.Fatal(err)
	}
	h.until(t, "the cluster formed, its claims stamped and its member list recorded", func() error {
		if id := h.cluster(t).Status.ClusterID; id != "c1" {
			return fmt.Errorf("status.clusterID %q", id)
		}
		for k := 0; k < 3; k++ {
			pvc := &corev1.PersistentVolumeClaim{}
			if err := h.get(fmt.Sprintf("data-etcd-%d", k), pvc); err != nil {
				return err
			}
			if pvc.Annotations[observe.MemberIDAnnotation] != etcd.FormatID(uint64(0xa0+k)) {
				return fmt.Errorf("claim %s stamped %q", pvc.Name, pvc.Annotations[observe.MemberIDAnnotation])
			}
		}
		cm := &corev1.ConfigMap{}
		if err := h.get(values.MembershipConfigMapName("etcd"), cm); err != nil {
			return err
		}
		var rec plan.MemberRecord
		if err := json.Unmarshal([]byte(cm.Annotations[observe.MembersAnnotation]), &rec); err != nil {
			return fmt.Errorf("member record %q: %w", cm.Annotations[observe.MembersAnnotation], err)
		}
		if len(rec.Voters()) != 3 || rec.ClusterID != 0xc1 {
			return fmt.Errorf("member record %+v", rec)
		}
		return nil
	})
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "before-disaster"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "etcd", Destination: &v1alpha1.BackupDestination{S3: h.s3()}}}
	if err := h.env.Client.Create(h.ctx(), b); err != nil {
		t.Fatal(err)
	}
	done := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	b.Status = v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, StartTime: &done, CompletionTime: &done, Attempts: 1, Member: "etcd-0",
		SHA256: restoreSHA256, Revision: 4242, Size: 1 << 20, Location: "s3://etcd-backups/prod/main/before-disaster.db", ClusterID: "c1", EtcdVersion: "3.6.16"}
	if err := h.env.Client.Status().Update(h.ctx(), b); err != nil {
		t.Fatal(err)
	}
	return d
}

// setNodeReady sets the Ready condition of the test's node.
func (d *drHarness) setNodeReady(t *testing.T, ready bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := d.env.Client.Get(d.ctx(), client.ObjectKey{Name: "node-" + d.ns}, node); err != nil {
			return err
		}
		st := corev1.ConditionTrue
		if !ready {
			st = corev1.ConditionUnknown
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return d.env.Client.Status().Update(d.ctx(), node)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setEtcdContainer plays the kubelet: member pod name's etcd container runs and started, or
// waits in CrashLoopBackOff (its process killed and unable to start again).
func (d *drHarness) setEtcdContainer(t *testing.T, name string, running bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := d.get(name, pod); err != nil {
			return err
		}
		cs := corev1.ContainerStatus{Name: "etcd", Ready: running, Started: ptr.To(running), RestartCount: 3}
		ready := corev1.ConditionTrue
		if running {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Hour))}
		} else {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}
			ready = corev1.ConditionFalse
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{cs},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}
		return d.env.Client.Status().Update(d.ctx(), pod)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// loseQuorum plays etcd without a quorum: the members in answering answer without a leader,
// the others do not answer at all.
func (d *drHarness) loseQuorum(answering ...int) {
	d.fake.Edit(func(_ *etcd.Cluster, statuses map[string]etcd.MemberStatus) {
		for k := 0; k < 3; k++ {
			st := statuses[d.url(k)]
			st.Leader, st.Errors = 0, []string{plan.NoLeaderError}
			statuses[d.url(k)] = st
		}
	})
	d.fake.ErrStatus = map[string]error{}
	for k := 0; k < 3; k++ {
		up := false
		for _, a := range answering {
			up = up || a == k
		}
		if !up {
			d.fake.ErrStatus[d.url(k)] = fmt.Errorf("context deadline exceeded")
		}
	}
	d.fake.ErrMemberList = errors.New("etcdserver: request timed out")
}

// deleteObject deletes obj (a pod or claim of the cluster) at once.
func (d *drHarness) deleteObject(t *testing.T, obj client.Object) {
	t.Helper()
	if err := d.env.Client.Delete(d.ctx(), obj, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

// terminateHeldClaim deletes claim data-<name> while a finalizer (playing pvc-protection for
// the pod that still mounts it) keeps it: it is Terminating, its data intact.
func (d *drHarness) terminateHeldClaim(t *testing.T, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := d.get("data-"+name, pvc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pvc.Finalizers, pvcProtection) {
		pvc.Finalizers = append(pvc.Finalizers, pvcProtection)
		if err := d.env.Client.Update(d.ctx(), pvc); err != nil {
			t.Fatal(err)
		}
	}
	d.deleteObject(t, pvc)
	t.Cleanup(func() {
		// Let the namespace go.
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := &corev1.PersistentVolumeClaim{}
			if err := d.get("data-"+name, p); err != nil {
				return client.IgnoreNotFound(err)
			}
			p.Finalizers = nil
			return d.env.Client.Update(context.Background(), p)
		})
	})
}

// pvcProtection is the finalizer the API server puts on every claim; its controller (not run
// here) removes it once no pod uses the claim.
const pvcProtection = "kubernetes.io/pvc-protection"

// deleteClaim deletes claim data-<name> and plays the pvc-protection controller that lets it
// go: it is gone, and its data with it.
func (d *drHarness) deleteClaim(t *testing.T, name string) {
	t.Helper()
	d.deleteObject(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "data-" + name}})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.PersistentVolumeClaim{}
		if err := d.get("data-"+name, p); err != nil {
			return client.IgnoreNotFound(err)
		}
		p.Finalizers = nil
		return d.env.Client.Update(d.ctx(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// holdNoRecovery runs passes for 3 s (three times disasterRecovery.after) and fails when a
// recovery began or a member pod was deleted or the StatefulSet shrank; it returns the last
// Degraded condition.
func (d *drHarness) holdNoRecovery(t *testing.T) *metav1.Condition {
	t.Helper()
	var deg *metav1.Condition
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		d.pass(t)
		c := d.cluster(t)
		if c.Status.Restore != nil {
			t.Fatalf("disaster recovery began: %+v", c.Status.Restore)
		}
		sts := &appsv1.StatefulSet{}
		if err := d.get("etcd", sts); err != nil {
			t.Fatal(err)
		}
		if *sts.Spec.Replicas != 3 {
			t.Fatalf("the StatefulSet was scaled to %d", *sts.Spec.Replicas)
		}
		deg = meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
	}
	return deg
}

// untilRecoveryBegins runs passes until a disaster recovery began, for at most 15 s (1 s of
// disasterRecovery.after, passes slowed by a loaded machine).
func (d *drHarness) untilRecoveryBegins(t *testing.T) *v1alpha1.RestoreStatus {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		d.pass(t)
		if r := d.cluster(t).Status.Restore; r != nil {
			return r
		}
	}
	c := d.cluster(t)
	t.Fatalf("no disaster recovery began; conditions %+v", c.Status.Conditions)
	return nil
}

// testRecoveryCountsTheRecordedVoters: a scale-out to 4 recorded its intent (the StatefulSet
// has not grown), quorum is lost, and member 0's claim and pod are gone. Members 1 and 2 keep
// their data, a majority of the three voters etcd listed: no recovery. (Counting voters from
// the StatefulSet less the learner of the intent made 2 voters, of which 1 lost its data.)
func testRecoveryCountsTheRecordedVoters(t *testing.T, h *restoreHarness) {
	d := formedCluster(t, h)
	in := plan.Intent{Op: plan.IntentAdd, Member: "etcd-3", PeerURL: fmt.Sprintf("http://etcd-3.etcd.%s.svc:2380", h.ns),
		Reason: v1alpha1.ReasonScaleOut, StartedAt: time.Now()}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := d.cluster(t)
		c.Spec.Replicas = ptr.To(int32(4))
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[observe.IntentAnnotation] = string(raw)
		return d.env.Client.Update(d.ctx(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
	d.loseQuorum(1, 2)
	d.deleteObject(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "etcd-0"}})
	d.deleteClaim(t, "etcd-0")
	d.holdNoRecovery(t)
}

// testRecoveryKeepsTerminatingClaimsOfPods: the claims of members 1 and 2 are deleted while
// their pods run (Terminating, held by pvc-protection, data intact), then both stop serving
// (their etcd crash-loops) while member 0 answers without a leader. The data of all three is
// kept: no recovery, no member stopped.
func testRecoveryKeepsTerminatingClaimsOfPods(t *testing.T, h *restoreHarness) {
	d := formedCluster(t, h)
	for _, m := range []string{"etcd-1", "etcd-2"} {
		d.terminateHeldClaim(t, m)
		d.setEtcdContainer(t, m, false)
	}
	d.loseQuorum(0)
	d.holdNoRecovery(t)
}

// testRecoveryWaitsWhenEtcdIsUnreachable: the operator cannot reach etcd at all (a DNS,
// NetworkPolicy or certificate fault on its side) while every member's etcd runs, and two
// members' claims are gone. Quorum is not known to be lost: no recovery, and Degraded says
// EtcdUnreachable and why.
func testRecoveryWaitsWhenEtcdIsUnreachable(t *testing.T, h *restoreHarness) {
	d := formedCluster(t, h)
	d.reachable = false
	for _, m := range []string{"etcd-1", "etcd-2"} {
		d.deleteClaim(t, m)
	}
	deg := d.holdNoRecovery(t)
	if deg == nil || deg.Reason != v1alpha1.ReasonEtcdUnreachable {
		t.Fatalf("Degraded %+v, want reason %s", deg, v1alpha1.ReasonEtcdUnreachable)
	}
	for _, want := range []string{"not known to be lost", "etcd-1: its etcd container runs but did not answer", "no such host"} {
		if !strings.Contains(deg.Message, want) {
			t.Errorf("Degraded's message lacks %q: %s", want, deg.Message)
		}
	}
}

// testRecoveryBeginsOnEvidence: members 1 and 2 lose their pods and claims (the StatefulSet
// would re-create them empty; here they stay gone) and member 0 answers without a leader:
// quorum is provably lost and cannot come back, so the recovery begins. It is the control of
// the tests above: the same cluster, with evidence.
func testRecoveryBeginsOnEvidence(t *testing.T, h *restoreHarness) {
	d := formedCluster(t, h)
	d.loseQuorum(0)
	for _, m := range []string{"etcd-1", "etcd-2"} {
		d.deleteObject(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: m}})
		d.deleteClaim(t, m)
	}
	r := d.untilRecoveryBegins(t)
	if r.Cause != v1alpha1.RestoreCauseDisasterRecovery || r.Phase != v1alpha1.RestoreStopping || r.Backup != "before-disaster" {
		t.Fatalf("status.restore %+v", r)
	}
	for _, want := range []string{"2 of 3 voting members lost their data", "etcd-1 (its volume claim is gone)"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("the recovery's message lacks %q: %s", want, r.Message)
		}
	}
	// The members are stopped; etcd-0's pod stays Terminating on a node that stopped
	// reporting: the recovery waits for it and says which node and what to do.
	h.until(t, "the StatefulSet scaled to zero", func() error {
		sts := &appsv1.StatefulSet{}
		if err := d.get("etcd", sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 0 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	d.setNodeReady(t, false)
	pod := &corev1.Pod{}
	if err := d.get("etcd-0", pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = append(pod.Finalizers, "etcdpilot.io/test-kubelet-gone")
	if err := d.env.Client.Update(d.ctx(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := &corev1.Pod{}
			if err := d.get("etcd-0", p); err != nil {
				return client.IgnoreNotFound(err)
			}
			p.Finalizers = nil
			return d.env.Client.Update(context.Background(), p)
		})
	})
	if err := d.env.Client.Delete(d.ctx(), pod); err != nil {
		t.Fatal(err)
	}
	want := "etcd-0 (Terminating on node node-" + h.ns + ", which is not ready"
	h.until(t, "a condition naming the stuck pod's node", func() error {
		for _, cond := range d.cluster(t).Status.Conditions {
			if strings.Contains(cond.Message, want) && strings.Contains(cond.Message, "kubectl -n "+h.ns+" delete pod etcd-0 --force --grace-period=0") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", d.cluster(t).Status.Conditions)
	})
}

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
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// The restore tests run on a control plane of their own, one reconciler driven pass by pass.
// The suite's shared manager reconciles every EtcdCluster of its control plane and runs
// without an agent image (the API server refuses a restore pod whose prepare container has
// none); a second reconciler racing it over status.restore (attempts, phase) would make the
// outcome depend on timing.

const (
	restoreAgentImage = "registry.example.com/etcd-pilot:restore-test"
	restoreBackup     = "nightly"
	restoreSecret     = "s3-credentials"
	// Credential values that must never show up in a restore pod's spec.
	restoreAccessKey = "AKIA-RESTORE-TEST-ACCESS-KEY"
	restoreSecretKey = "restore-test-secret-access-key-value"
	restoreSHA256    = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// restoreMaxPasses bounds every "reconcile until": each step of the planner is one pass.
	restoreMaxPasses = 30
)

// restoreHarness is one test's reconciler, namespace and event recorder on the restore
// control plane.
type restoreHarness struct {
	env      *testenv.Env
	renderer *charts.Renderer
	r        *controllers.EtcdClusterReconciler
	recorder *events.FakeRecorder
	ns       string
}

func TestRestore(t *testing.T) {
	renv, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := renv.Stop(); err != nil {
			t.Error(err)
		}
	})
	renderer, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	harness := func(t *testing.T) *restoreHarness {
		h := &restoreHarness{env: renv, renderer: renderer, recorder: events.NewFakeRecorder(1000), ns: renv.Namespace(t)}
		h.r = &controllers.EtcdClusterReconciler{
			Client: renv.Client, Scheme: renv.Scheme, Renderer: renderer, Recorder: h.recorder,
			// No member ever runs in these tests: etcd is never reachable.
			DialEtcd: func(context.Context, []string, *tls.Config) (etcd.Client, error) {
				return nil, errors.New("no etcd in the restore tests")
			},
			EtcdTimeout: time.Second, AgentImage: restoreAgentImage, Egress: restoreEgress,
		}
		h.createCredentials(t)
		return h
	}
	t.Run("FromMissingBackupHoldsEverythingUntilTheBackupSucceeds", func(t *testing.T) { testRestoreFromMissingBackup(t, harness(t)) })
	t.Run("UnsupportedVersionPairCreatesNothing", func(t *testing.T) { testRestoreUnsupportedVersionPair(t, harness(t)) })
	t.Run("RefusedEndpointCreatesNothing", func(t *testing.T) { testRestoreRefusedEndpoint(t, harness(t)) })
	t.Run("BackupNotSucceededYetFoundersWait", func(t *testing.T) { testRestoreBackupNotSucceeded(t, harness(t)) })
	t.Run("SucceededPodsFinishTheRestoreThenTheStatefulSetIsApplied", func(t *testing.T) { testRestorePodsSucceed(t, harness(t)) })
	t.Run("ThreeFailedPodsFailTheRestore", func(t *testing.T) { testRestorePodsFail(t, harness(t)) })
	// Disaster recovery acts only on evidence (disasterrecovery_test.go).
	t.Run("RecoveryCountsTheRecordedVoters", func(t *testing.T) { testRecoveryCountsTheRecordedVoters(t, harness(t)) })
	t.Run("RecoveryKeepsTerminatingClaimsOfPods", func(t *testing.T) { testRecoveryKeepsTerminatingClaimsOfPods(t, harness(t)) })
	t.Run("RecoveryWaitsWhenEtcdIsUnreachable", func(t *testing.T) { testRecoveryWaitsWhenEtcdIsUnreachable(t, harness(t)) })
	t.Run("RecoveryBeginsOnEvidence", func(t *testing.T) { testRecoveryBeginsOnEvidence(t, harness(t)) })
}

// testRestoreFromMissingBackup: spec.bootstrap.fromBackup names no existing EtcdBackup.
// Nothing that could start a founder on an empty volume is created, and Degraded says which
// backup is missing. Once the backup exists and succeeded, the restore begins: status.restore,
// the founders' claims, then one restore pod per founder, built as the chart runs etcd.
func testRestoreFromMissingBackup(t *testing.T, h *restoreHarness) {
	h.createCluster(t, "")
	h.passes(t, 5)
	c := h.cluster(t)
	h.wantDegraded(t, c, v1alpha1.ReasonRestoreFailed, "EtcdBackup "+restoreBackup, "does not exist")
	if c.Status.Restore != nil {
		t.Fatalf("status.restore recorded without a backup: %+v", c.Status.Restore)
	}
	h.wantNothingCreated(t)

	h.createBackup(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, EtcdVersion: "3.6.16"})
	h.pass(t)
	c = h.cluster(t)
	rec := c.Status.Restore
	if rec == nil || rec.Phase != v1alpha1.RestoreRestoring || rec.Cause != v1alpha1.RestoreCauseBootstrap || rec.Backup != restoreBackup ||
		rec.SHA256 != restoreSHA256 || rec.EtcdVersion != "3.6.16" || rec.Revision != 4242 || rec.StartTime.IsZero() {
		t.Fatalf("status.restore after the backup succeeded: %+v", rec)
	}
	if want := restore.ID(string(c.UID), v1alpha1.RestoreCauseBootstrap, h.location(), ""); rec.ID != want {
		t.Fatalf("restore ID %q, want %q (derived from the cluster, the cause and the snapshot)", rec.ID, want)
	}
	if got := condition(c, v1alpha1.ConditionDegraded); strings.HasSuffix(got, v1alpha1.ReasonRestoreFailed) {
		t.Fatalf("Degraded still %s once the restore began", got)
	}

	pods := h.untilRestorePods(t, rec.ID)
	h.wantFounderClaims(t)
	h.wantRestorePods(t, rec.ID, pods)
	if err := h.get("etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet exists while the founders are restored (err %v)", err)
	}
	// Waiting for the pods changes nothing.
	h.passes(t, 3)
	if got := h.restorePods(t); len(got) != 3 {
		t.Fatalf("%d restore pods after more passes, want 3", len(got))
	}
}

// testRestoreUnsupportedVersionPair: a Succeeded backup of etcd 3.5 cannot be restored into
// 3.7 (etcd restores into the same minor or the next one); the operator says so before
// anything starts.
func testRestoreUnsupportedVersionPair(t *testing.T, h *restoreHarness) {
	h.createBackup(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, EtcdVersion: "3.5.35"})
	h.createCluster(t, "3.7.3")
	h.passes(t, 5)
	c := h.cluster(t)
	h.wantDegraded(t, c, v1alpha1.ReasonRestoreFailed, "a snapshot of etcd 3.5.35 cannot be restored into etcd 3.7.3",
		"same minor version or the next one")
	if c.Status.Restore != nil {
		t.Fatalf("status.restore recorded for an unsupported version pair: %+v", c.Status.Restore)
	}
	h.wantNothingCreated(t)
}

// testRestoreRefusedEndpoint: a snapshot on the metadata address (a spec.bootstrap.fromObject
// a tenant wrote) is refused by the operator's outbound policy before any claim or restore pod
// exists: the restore pods, which run under the same policy, would be refused it.
func testRestoreRefusedEndpoint(t *testing.T, h *restoreHarness) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "etcd"}}
	c.Spec.Insecure = true // about the outbound policy, not TLS
	s3 := h.s3()
	s3.Endpoint = "https://169.254.169.254"
	c.Spec.Bootstrap = &v1alpha1.BootstrapSpec{FromObject: &v1alpha1.SnapshotObject{S3: *s3, Key: h.key(), EtcdVersion: "3.6.16"}}
	if err := h.env.Client.Create(h.ctx(), c); err != nil {
		t.Fatal(err)
	}
	h.passes(t, 3)
	h.wantDegraded(t, h.cluster(t), v1alpha1.ReasonRestoreFailed, "https://169.254.169.254", "refused by the operator's outbound policy", "link-local")
	if rec := h.cluster(t).Status.Restore; rec != nil {
		t.Fatalf("status.restore recorded for a refused endpoint: %+v", rec)
	}
	h.wantNothingCreated(t)
}

// testRestoreBackupNotSucceeded: a backup still Running is not restored; the founders wait
// (Progressing Restoring, not degraded) and start restoring once it succeeded.
func testRestoreBackupNotSucceeded(t *testing.T, h *restoreHarness) {
	h.createBackup(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupRunning})
	h.createCluster(t, "")
	h.passes(t, 5)
	c := h.cluster(t)
	if d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Fatalf("a backup still running degrades the cluster: %+v", d)
	}
	if p := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionProgressing); p == nil || p.Reason != v1alpha1.ReasonRestoring ||
		!strings.Contains(p.Message, "EtcdBackup "+restoreBackup+" is Running, not Succeeded yet") || !strings.Contains(p.Message, "the founding members wait") {
		t.Fatalf("Progressing %+v, want Restoring saying the founders wait for the backup", p)
	}
	if c.Status.Restore != nil {
		t.Fatalf("status.restore recorded for a backup that has not succeeded: %+v", c.Status.Restore)
	}
	h.wantNothingCreated(t)

	h.setBackupStatus(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, EtcdVersion: "3.6.16"})
	h.pass(t)
	if rec := h.cluster(t).Status.Restore; rec == nil || rec.Phase != v1alpha1.RestoreRestoring {
		t.Fatalf("status.restore once the backup succeeded: %+v", rec)
	}
}

// testRestorePodsSucceed: once every founder's restore pod succeeded, the restore is Restored,
// and only then is the StatefulSet applied.
func testRestorePodsSucceed(t *testing.T, h *restoreHarness) {
	h.createBackup(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, EtcdVersion: "3.6.16"})
	h.createCluster(t, "")
	id := h.untilRestoreBegan(t)
	pods := h.untilRestorePods(t, id)

	// Two of three done: the restore waits, the StatefulSet stays back.
	h.setPodPhase(t, pods[0], corev1.PodSucceeded, "")
	h.setPodPhase(t, pods[1], corev1.PodSucceeded, "")
	h.passes(t, 3)
	if rec := h.cluster(t).Status.Restore; rec.Phase != v1alpha1.RestoreRestoring || rec.CompletionTime != nil {
		t.Fatalf("restore with a founder left: %+v", rec)
	}
	if err := h.get("etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet was applied before every founder was restored (err %v)", err)
	}

	h.setPodPhase(t, pods[2], corev1.PodSucceeded, "")
	h.untilRestorePhase(t, v1alpha1.RestoreRestored)
	c := h.cluster(t)
	if rec := c.Status.Restore; rec.ID != id || rec.CompletionTime == nil || rec.Attempts != 0 || !strings.Contains(rec.Message, h.location()) {
		t.Fatalf("status.restore once restored: %+v", rec)
	}
	// The pass that finished the restore applied what it rendered before deciding: the
	// StatefulSet comes with the next one.
	if err := h.get("etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet was applied in the pass that finished the restore (err %v)", err)
	}
	h.pass(t)
	sts := &appsv1.StatefulSet{}
	if err := h.get("etcd", sts); err != nil {
		t.Fatalf("no StatefulSet after the restore finished: %v", err)
	}
	c = h.cluster(t)
	if got := condition(c, v1alpha1.ConditionDegraded); strings.HasSuffix(got, v1alpha1.ReasonRestoreFailed) {
		t.Fatalf("Degraded %s after a successful restore", got)
	}
	// The restore pods stay until the cluster formed (they are cleaned up then), and are no
	// member pods of the StatefulSet.
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range h.restorePods(t) {
		if sel.Matches(labels.Set(p.Labels)) {
			t.Fatalf("restore pod %s matches the StatefulSet's selector %s", p.Name, sel)
		}
	}
	if h.event(corev1.EventTypeNormal, v1alpha1.ReasonRestored) == "" {
		t.Fatalf("no Normal %s event", v1alpha1.ReasonRestored)
	}
}

// testRestorePodsFail: a founder's restore pod that fails is deleted and run again; the third
// failure ends the restore (Failed, Degraded RestoreFailed naming the pod's report), and the
// operator then starts nothing more by itself.
func testRestorePodsFail(t *testing.T, h *restoreHarness) {
	h.createBackup(t, v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, EtcdVersion: "3.6.16"})
	h.createCluster(t, "")
	id := h.untilRestoreBegan(t)
	pods := h.untilRestorePods(t, id)
	failing := pods[0]
	report := func(n int) string { return fmt.Sprintf("the snapshot's sha256 does not match (try %d)", n) }

	for n := 1; n <= 2; n++ {
		h.setPodPhase(t, failing, corev1.PodFailed, report(n))
		h.pass(t)
		if err := h.get(failing.Name, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Fatalf("failure %d: the failed restore pod was not deleted (err %v)", n, err)
		}
		if rec := h.cluster(t).Status.Restore; rec.Phase != v1alpha1.RestoreRestoring || rec.Attempts != int32(n) {
			t.Fatalf("failure %d: status.restore %+v, want Restoring with %d attempts", n, rec, n)
		}
		h.pass(t)
		again := &corev1.Pod{}
		if err := h.get(failing.Name, again); err != nil {
			t.Fatalf("failure %d: the restore pod was not run again: %v", n, err)
		}
		if again.UID == failing.UID || again.Status.Phase == corev1.PodFailed {
			t.Fatalf("failure %d: the restore pod is the failed one", n)
		}
		failing = again
	}
	h.setPodPhase(t, failing, corev1.PodFailed, report(3))
	h.pass(t)
	c := h.cluster(t)
	rec := c.Status.Restore
	if rec.Phase != v1alpha1.RestoreFailed || rec.Attempts != 3 || !strings.Contains(rec.Message, "failed 3 times") ||
		!strings.Contains(rec.Message, "container prepare exited with code 1: "+report(3)) {
		t.Fatalf("status.restore after the third failure: %+v", rec)
	}
	h.wantDegraded(t, c, v1alpha1.ReasonRestoreFailed, "etcd-0 failed 3 times", report(3))
	if h.event(corev1.EventTypeWarning, v1alpha1.ReasonRestoreFailed) == "" {
		t.Fatalf("no Warning %s event", v1alpha1.ReasonRestoreFailed)
	}

	// A failed restore waits for the user: no new pod, no StatefulSet, the record as it was.
	h.passes(t, 5)
	c = h.cluster(t)
	if !equality.Semantic.DeepEqual(c.Status.Restore, rec) {
		t.Fatalf("status.restore changed after the restore failed:\n%+v\nwas\n%+v", c.Status.Restore, rec)
	}
	h.wantDegraded(t, c, v1alpha1.ReasonRestoreFailed, "etcd-0 failed 3 times")
	last := &corev1.Pod{}
	if err := h.get(failing.Name, last); err != nil || last.UID != failing.UID {
		t.Fatalf("the last failed restore pod was replaced or deleted (err %v)", err)
	}
	if got := h.restorePods(t); len(got) != 3 {
		t.Fatalf("%d restore pods after the restore failed, want 3", len(got))
	}
	if err := h.get("etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet was applied after the restore failed (err %v)", err)
	}
}

// --- harness ---

func (h *restoreHarness) ctx() context.Context { return context.Background() }

func (h *restoreHarness) get(name string, obj client.Object) error {
	return h.env.Client.Get(h.ctx(), types.NamespacedName{Namespace: h.ns, Name: name}, obj)
}

// pass runs one reconcile of the cluster; a pass that returns an error fails the test.
func (h *restoreHarness) pass(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := h.r.Reconcile(h.ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: h.ns, Name: "etcd"}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (h *restoreHarness) passes(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		h.pass(t)
	}
}

// until runs passes until cond holds, at most restoreMaxPasses.
func (h *restoreHarness) until(t *testing.T, what string, cond func() error) {
	t.Helper()
	var err error
	for i := 0; i < restoreMaxPasses; i++ {
		h.pass(t)
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("after %d passes, still waiting for %s: %v", restoreMaxPasses, what, err)
}

func (h *restoreHarness) cluster(t *testing.T) *v1alpha1.EtcdCluster {
	t.Helper()
	c := &v1alpha1.EtcdCluster{}
	if err := h.get("etcd", c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (h *restoreHarness) createCredentials(t *testing.T) {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: restoreSecret},
		StringData: map[string]string{backup.SecretKeyAccessKeyID: restoreAccessKey, backup.SecretKeySecretAccessKey: restoreSecretKey}}
	if err := h.env.Client.Create(h.ctx(), sec); err != nil {
		t.Fatal(err)
	}
}

// createCluster creates EtcdCluster etcd (3 members) restoring from the backup restoreBackup;
// version "" is the default.
func (h *restoreHarness) createCluster(t *testing.T, version string) {
	t.Helper()
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "etcd"}}
	c.Spec.Insecure = true // about restores, not TLS
	c.Spec.Version = version
	c.Spec.Bootstrap = &v1alpha1.BootstrapSpec{FromBackup: &v1alpha1.BackupReference{Name: restoreBackup}}
	if err := h.env.Client.Create(h.ctx(), c); err != nil {
		t.Fatalf("failed to create EtcdCluster: %v", err)
	}
}

// restoreEgress is the reconcilers' outbound policy; the restore pods get it as flags.
var restoreEgress = func() *egress.Policy {
	p, err := egress.New(egress.Config{Allowed: []string{"*.example.com", "10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	return p
}()

// s3 is the backup's destination: an explicit prefix, so the object key is prefix + name.
func (h *restoreHarness) s3() *v1alpha1.S3Destination {
	return &v1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd-backups", Prefix: "prod/main/",
		Region: "eu-west-1", CredentialsSecret: v1alpha1.SecretReference{Name: restoreSecret}}
}

func (h *restoreHarness) key() string      { return "prod/main/" + restoreBackup + ".db" }
func (h *restoreHarness) location() string { return "s3://etcd-backups/" + h.key() }

// createBackup creates EtcdBackup restoreBackup of another cluster (no EtcdBackup controller
// runs here) and gives it status st, filled in as a stored backup's.
func (h *restoreHarness) createBackup(t *testing.T, st v1alpha1.EtcdBackupStatus) {
	t.Helper()
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: restoreBackup},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "main", Destination: &v1alpha1.BackupDestination{S3: h.s3()}}}
	if err := h.env.Client.Create(h.ctx(), b); err != nil {
		t.Fatal(err)
	}
	h.setBackupStatus(t, st)
}

// setBackupStatus writes the backup's status through the status subresource.
func (h *restoreHarness) setBackupStatus(t *testing.T, st v1alpha1.EtcdBackupStatus) {
	t.Helper()
	start := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	st.StartTime, st.Attempts, st.Member = &start, 1, "etcd-0"
	if st.Phase == v1alpha1.BackupSucceeded {
		done := metav1.NewTime(start.Add(10 * time.Second))
		st.CompletionTime, st.SHA256, st.Revision, st.Size, st.Location = &done, restoreSHA256, 4242, 1<<20, h.location()
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &v1alpha1.EtcdBackup{}
		if err := h.get(restoreBackup, b); err != nil {
			return err
		}
		b.Status = st
		return h.env.Client.Status().Update(h.ctx(), b)
	})
	if err != nil {
		t.Fatalf("failed to set the status of EtcdBackup %s: %v", restoreBackup, err)
	}
}

func (h *restoreHarness) wantDegraded(t *testing.T, c *v1alpha1.EtcdCluster, reason string, msg ...string) {
	t.Helper()
	d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
	if d == nil || d.Status != metav1.ConditionTrue || d.Reason != reason {
		t.Fatalf("Degraded is %s, want True/%s (conditions %+v)", condition(c, v1alpha1.ConditionDegraded), reason, c.Status.Conditions)
	}
	for _, m := range msg {
		if !strings.Contains(d.Message, m) {
			t.Fatalf("Degraded message %q does not say %q", d.Message, m)
		}
	}
}

// wantNothingCreated: no StatefulSet, no claim and no pod exists in the namespace.
func (h *restoreHarness) wantNothingCreated(t *testing.T) {
	t.Helper()
	if err := h.get("etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet was created (err %v)", err)
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := h.env.Client.List(h.ctx(), claims, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := h.env.Client.List(h.ctx(), pods, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 0 || len(pods.Items) != 0 {
		t.Fatalf("%d claims and %d pods were created, want none", len(claims.Items), len(pods.Items))
	}
}

func (h *restoreHarness) untilRestoreBegan(t *testing.T) string {
	t.Helper()
	h.until(t, "the restore to begin", func() error {
		if rec := h.cluster(t).Status.Restore; rec == nil || rec.Phase != v1alpha1.RestoreRestoring {
			return fmt.Errorf("status.restore %+v", rec)
		}
		return nil
	})
	return h.cluster(t).Status.Restore.ID
}

func (h *restoreHarness) untilRestorePhase(t *testing.T, phase v1alpha1.RestorePhase) {
	t.Helper()
	h.until(t, "restore phase "+string(phase), func() error {
		if rec := h.cluster(t).Status.Restore; rec == nil || rec.Phase != phase {
			return fmt.Errorf("status.restore %+v", rec)
		}
		return nil
	})
}

// restorePods lists the namespace's restore pods, by name.
func (h *restoreHarness) restorePods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := h.env.Client.List(h.ctx(), pods, client.InNamespace(h.ns), client.HasLabels{execute.LabelRestore}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items
}

// untilRestorePods runs passes until the three founders' restore pods exist, and returns them
// in ordinal order.
func (h *restoreHarness) untilRestorePods(t *testing.T, id string) []*corev1.Pod {
	t.Helper()
	pods := make([]*corev1.Pod, 3)
	h.until(t, "three restore pods", func() error {
		for k := range pods {
			p := &corev1.Pod{}
			name := fmt.Sprintf("etcd-restore-%s-%d", id[:6], k)
			if err := h.get(name, p); err != nil {
				return fmt.Errorf("restore pod %s: %w", name, err)
			}
			pods[k] = p
		}
		return nil
	})
	return pods
}

// rendered is the StatefulSet the chart renders for the cluster now.
func (h *restoreHarness) rendered(t *testing.T) *appsv1.StatefulSet {
	t.Helper()
	cl := h.cluster(t)
	objs, err := render.Desired(h.renderer, cl, values.DefaultOperator(), memory.Of(cl))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" {
			sts := &appsv1.StatefulSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
				t.Fatal(err)
			}
			return sts
		}
	}
	t.Fatal("the chart rendered no StatefulSet")
	return nil
}

// wantFounderClaims: each founder's claim exists as the StatefulSet would create it, so the
// StatefulSet adopts it: its template's spec, the selector's labels and the cluster label.
func (h *restoreHarness) wantFounderClaims(t *testing.T) {
	t.Helper()
	sts := h.rendered(t)
	var tmpl *corev1.PersistentVolumeClaim
	for i := range sts.Spec.VolumeClaimTemplates {
		if sts.Spec.VolumeClaimTemplates[i].Name == "data" {
			tmpl = &sts.Spec.VolumeClaimTemplates[i]
		}
	}
	if tmpl == nil {
		t.Fatal("the rendered StatefulSet has no data claim template")
	}
	for k := 0; k < 3; k++ {
		pvc := &corev1.PersistentVolumeClaim{}
		name := fmt.Sprintf("data-etcd-%d", k)
		if err := h.get(name, pvc); err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
		for lk, lv := range sts.Spec.Selector.MatchLabels {
			if pvc.Labels[lk] != lv {
				t.Fatalf("claim %s lacks the selector label %s=%s: %v", name, lk, lv, pvc.Labels)
			}
		}
		if pvc.Labels[v1alpha1.LabelCluster] != "etcd" {
			t.Fatalf("claim %s lacks %s=etcd: %v", name, v1alpha1.LabelCluster, pvc.Labels)
		}
		if !equality.Semantic.DeepEqual(pvc.Spec.Resources, tmpl.Spec.Resources) || !slices.Equal(pvc.Spec.AccessModes, tmpl.Spec.AccessModes) {
			t.Fatalf("claim %s spec %+v, want the template's %+v", name, pvc.Spec, tmpl.Spec)
		}
	}
}

// wantRestorePods checks each founder's restore pod against the chart's etcd container: the
// operator's image fetches the snapshot, the cluster's etcd image restores it into the data
// directory etcd runs on, with every founder and the restore's cluster token; credentials come
// only from the Secret.
func (h *restoreHarness) wantRestorePods(t *testing.T, id string, pods []*corev1.Pod) {
	t.Helper()
	sts := h.rendered(t)
	var etcdCtr *corev1.Container
	for i := range sts.Spec.Template.Spec.Containers {
		if sts.Spec.Template.Spec.Containers[i].Name == "etcd" {
			etcdCtr = &sts.Spec.Template.Spec.Containers[i]
		}
	}
	if etcdCtr == nil {
		t.Fatal("the rendered StatefulSet has no etcd container")
	}
	etcdArg := func(name string) string {
		for _, a := range etcdCtr.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		t.Fatalf("the chart's etcd container has no --%s", name)
		return ""
	}
	dataMount := ""
	for _, m := range etcdCtr.VolumeMounts {
		if m.Name == "data" {
			dataMount = m.MountPath
		}
	}
	cm := &corev1.ConfigMap{}
	if err := h.get("etcd-membership", cm); err != nil {
		t.Fatal(err)
	}
	founders := cm.Annotations[observe.FoundersAnnotation]
	if strings.Count(founders, "=") != 3 {
		t.Fatalf("founding list %q", founders)
	}

	for k, p := range pods {
		member := fmt.Sprintf("etcd-%d", k)
		if p.Labels[v1alpha1.LabelCluster] != "etcd" || p.Labels[execute.LabelRestore] != id {
			t.Fatalf("%s labels %v", p.Name, p.Labels)
		}
		if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Fatalf("%s restart policy %s", p.Name, p.Spec.RestartPolicy)
		}
		if len(p.Spec.InitContainers) != 2 || p.Spec.InitContainers[0].Name != "prepare" || p.Spec.InitContainers[1].Name != "restore" {
			t.Fatalf("%s init containers %+v, want prepare then restore", p.Name, p.Spec.InitContainers)
		}
		claim := ""
		for _, v := range p.Spec.Volumes {
			if v.Name == "data" && v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
		if claim != "data-"+member {
			t.Fatalf("%s mounts claim %q, want data-%s", p.Name, claim, member)
		}

		prep := p.Spec.InitContainers[0]
		if prep.Image != restoreAgentImage {
			t.Fatalf("%s: prepare runs %q, want the operator's image %q", p.Name, prep.Image, restoreAgentImage)
		}
		// The pod reads the snapshot under the operator's outbound policy.
		for _, want := range append([]string{"restore-prepare", "--id=" + id, "--s3-key=" + h.key(), "--sha256=" + restoreSHA256,
			"--s3-bucket=etcd-backups", "--s3-endpoint=https://s3.example.com"}, restoreEgress.Args()...) {
			if !slices.Contains(prep.Args, want) {
				t.Fatalf("%s: prepare args %v lack %s", p.Name, prep.Args, want)
			}
		}

		rs := p.Spec.InitContainers[1]
		if rs.Image != etcdCtr.Image {
			t.Fatalf("%s: restore runs %q, want the cluster's etcd image %q", p.Name, rs.Image, etcdCtr.Image)
		}
		if !slices.Equal(rs.Command, []string{"/usr/local/bin/etcdutl"}) || len(rs.Args) < 2 || rs.Args[0] != "snapshot" || rs.Args[1] != "restore" {
			t.Fatalf("%s: restore runs %v %v, want etcdutl snapshot restore", p.Name, rs.Command, rs.Args)
		}
		peerURL := strings.ReplaceAll(etcdArg("initial-advertise-peer-urls"), "$(POD_NAME)", member)
		for _, want := range []string{
			"--initial-cluster=" + founders,
			"--initial-cluster-token=" + etcdArg("initial-cluster-token") + "-restore-" + id,
			"--name=" + member,
			"--data-dir=" + etcdArg("data-dir"),
			"--initial-advertise-peer-urls=" + peerURL,
		} {
			if !slices.Contains(rs.Args, want) {
				t.Fatalf("%s: restore args %v lack %s", p.Name, rs.Args, want)
			}
		}
		if !strings.Contains(founders, member+"="+peerURL) {
			t.Fatalf("%s: the founding list %q does not hold %s=%s, as etcd advertises it", p.Name, founders, member, peerURL)
		}
		for _, m := range rs.VolumeMounts {
			if m.Name == "data" && m.MountPath != dataMount {
				t.Fatalf("%s: restore mounts the claim at %s, etcd at %s", p.Name, m.MountPath, dataMount)
			}
		}

		// Credentials: only references to the Secret, never values.
		refs := 0
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, e := range ctr.Env {
				if e.Value != "" {
					t.Fatalf("%s: container %s has a literal env %s", p.Name, ctr.Name, e.Name)
				}
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != restoreSecret {
					t.Fatalf("%s: container %s env %s is not a reference to Secret %s: %+v", p.Name, ctr.Name, e.Name, restoreSecret, e.ValueFrom)
				}
				refs++
			}
		}
		if refs < 2 {
			t.Fatalf("%s: %d secret references, want the access key and the secret key", p.Name, refs)
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), restoreAccessKey) || strings.Contains(string(raw), restoreSecretKey) {
			t.Fatalf("%s carries a credential value", p.Name)
		}
	}
}

// setPodPhase plays the kubelet (envtest runs none): the pod ends with phase, a Failed one
// with its prepare container's report.
func (h *restoreHarness) setPodPhase(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, report string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.Pod{}
		if err := h.get(pod.Name, p); err != nil {
			return err
		}
		p.Status.Phase = phase
		if phase == corev1.PodFailed {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "prepare", Image: p.Spec.InitContainers[0].Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: report}}}}
		}
		return h.env.Client.Status().Update(h.ctx(), p)
	})
	if err != nil {
		t.Fatalf("failed to set pod %s %s: %v", pod.Name, phase, err)
	}
}

// event returns the first recorded event of type and reason, "" when none; it drains the
// recorder.
func (h *restoreHarness) event(typ, reason string) string {
	found := ""
	for {
		select {
		case e := <-h.recorder.Events:
			if found == "" && strings.HasPrefix(e, typ+" "+reason+" ") {
				found = e
			}
		default:
			return found
		}
	}
}

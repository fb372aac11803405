package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/controller-runtime/pkg/builder"

	ctrlruntime "sigs.k8s.io/controller-runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// BackupControllerName names the EtcdBackup controller in logs, metrics and events.
const BackupControllerName = "etcdbackup"

// Backup timing.
const (
	// backupMaxAttempts is how many times a backup is tried before it fails for good.
	backupMaxAttempts = 3
	// backupPendingTimeout is how long a backup may wait for its cluster or a healthy member.
	backupPendingTimeout = 10 * time.Minute
	// DefaultBackupTimeout bounds one attempt (streaming the snapshot to its destination).
	DefaultBackupTimeout = time.Hour
	// backupCatchUpTimeout is how long a pass waits for a voting member to apply the leader's
	// committed index read at the start, reading their status every backupCatchUpPoll; then
	// the backup stays Pending (NoHealthyMember, saying which member applied what) and the
	// next pass starts over.
	backupCatchUpTimeout = 5 * time.Second
	backupCatchUpPoll    = 200 * time.Millisecond
)

// EtcdBackupReconciler takes EtcdBackups: a snapshot streamed from a healthy, caught-up member
// through the integrity check to the destination. To S3 the operator streams it itself; to a
// claim, a short-lived pod of the operator's image that mounts the claim does (the
// `etcd-pilot snapshot` command) and reports the result in its termination message.
type EtcdBackupReconciler struct {
	Client ctrl.Client
	// APIReader reads the credentials Secret straight from the API server: the operator keeps
	// no Secret cache.
	APIReader ctrl.Reader
	Scheme    *runtime.Scheme
	Renderer  *charts.Renderer
	Recorder  events.EventRecorder
	DialEtcd  etcd.Dialer
	// OpenS3 opens S3 destinations; objstore.NewS3 when nil.
	OpenS3 execute.StoreOpener
	// Egress is the outbound policy S3 endpoints are held to (egress.Default when nil).
	Egress *egress.Policy
	// EtcdTimeout bounds each etcd call of an observation (default 3s).
	EtcdTimeout time.Duration
	// Timeout bounds one attempt (default DefaultBackupTimeout).
	Timeout time.Duration
	// AgentImage is the operator's image, run by the pods that write to claims.
	AgentImage string
	// Operator is where the operator runs (the render of a cluster's NetworkPolicy needs it).
	Operator values.Operator
}

// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdbackups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=create

// SetupWithManager registers the controller; it watches the pods it creates.
func (r *EtcdBackupReconciler) SetupWithManager(mgr ctrlruntime.Manager) error {
	if r.EtcdTimeout == 0 {
		r.EtcdTimeout = 3 * time.Second
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultBackupTimeout
	}
	return ctrlruntime.NewControllerManagedBy(mgr).
		Named(BackupControllerName).
		For(&v1alpha1.EtcdBackup{}).
		Owns(&corev1.Pod{}, builder.MatchEveryOwner).
		Complete(r)
}

// Reconcile moves one EtcdBackup forward: Pending until its cluster has a healthy member,
// Running while the snapshot streams, then Succeeded or Failed. Succeeded and Failed are
// final.
func (r *EtcdBackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	b := &v1alpha1.EtcdBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	before := b.DeepCopy()
	if b.Status.Phase == v1alpha1.BackupSucceeded || b.Status.Phase == v1alpha1.BackupFailed {
		return reconcile.Result{}, nil
	}
	// One status patch at the end of the pass, whatever take returns; take writes once more
	// itself, to record an attempt before it streams.
	defer func() {
		if !equality.Semantic.DeepEqual(before.Status, b.Status) {
			if perr := r.Client.Status().Patch(ctx, b, ctrl.MergeFrom(before)); perr != nil && err == nil {
				err = fmt.Errorf("failed to update the status of EtcdBackup %s: %w", req, perr)
			}
		}
		if err != nil {
			res = reconcile.Result{}
		}
	}()
	return r.take(ctx, before, b)
}

// take runs one pass of the backup b, changing only its status. before is b as read at the
// start of the pass, the base of the status patch that records an attempt before it streams.
func (r *EtcdBackupReconciler) take(ctx context.Context, before, b *v1alpha1.EtcdBackup) (reconcile.Result, error) {
	now := time.Now()
	if b.Status.Phase == "" {
		b.Status.Phase = v1alpha1.BackupPending
	}
	c := &v1alpha1.EtcdCluster{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.ClusterName}, c); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("failed to get EtcdCluster %s/%s: %w", b.Namespace, b.Spec.ClusterName, err)
		}
		return r.pending(b, now, v1alpha1.ReasonClusterNotFound,
			fmt.Sprintf("EtcdCluster %s/%s does not exist", b.Namespace, b.Spec.ClusterName))
	}
	// The cluster as its own controller acts on it: TLS under secure defaults (read only).
	c = values.Effective(c, r.Operator)
	dest := b.Spec.Destination
	if dest == nil && c.Spec.Backup != nil {
		dest = &c.Spec.Backup.Destination
	}
	if dest == nil || (dest.S3 == nil && dest.PersistentVolumeClaim == nil) {
		return r.fail(b, now, v1alpha1.ReasonNoDestination,
			fmt.Sprintf("neither this EtcdBackup's spec.destination nor EtcdCluster %s's spec.backup.destination names where to store the snapshot", c.Name))
	}
	if dest.PersistentVolumeClaim != nil {
		return r.takeToClaim(ctx, b, c, dest.PersistentVolumeClaim, now)
	}

	src, tlsCfg, why, err := r.source(ctx, c)
	if render.IsTLSError(err) {
		return r.pending(b, now, v1alpha1.ReasonNoHealthyMember, err.Error())
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if why != "" {
		return r.pending(b, now, v1alpha1.ReasonNoHealthyMember, why)
	}
	store, err := execute.OpenS3(ctx, r.apiReader(), r.OpenS3, r.Egress, c.Namespace, c.Name, dest.S3)
	if err != nil {
		var ce *execute.CredentialsError
		if errors.As(err, &ce) {
			return r.fail(b, now, v1alpha1.ReasonCredentialsInvalid, ce.Msg)
		}
		if egress.IsRefused(err) {
			return r.fail(b, now, v1alpha1.ReasonEndpointRefused, err.Error())
		}
		return r.retry(b, now, v1alpha1.ReasonUploadFailed, err.Error())
	}
	key := backup.ObjectKey(b.Name)
	// Record the attempt before streaming: a crash mid-stream shows as a Running backup that
	// the next pass tries again, overwriting the same key.
	r.running(b, now, src, store.Location(key))
	// With an optimistic lock: a pass that read the backup from a cache that had not seen it
	// succeed yet (the status write of the previous pass triggers this one) must not take a
	// second snapshot over the stored one.
	if err := r.Client.Status().Patch(ctx, b, ctrl.MergeFromWithOptions(before, ctrl.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			b.Status = *before.Status.DeepCopy() // nothing to write: the next pass reads it again
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, fmt.Errorf("failed to record the start of EtcdBackup %s/%s: %w", b.Namespace, b.Name, err)
	}

	actx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	cl, err := r.DialEtcd(actx, []string{src.Endpoint}, tlsCfg)
	if err != nil {
		return r.retry(b, now, v1alpha1.ReasonSnapshotFailed, err.Error())
	}
	defer cl.Close()
	taken, failure, err := backup.Take(actx, cl, src.Endpoint, backup.Expect{MemberID: src.Member.ID, AppliedIndex: src.Committed}, store, key)
	if egress.IsRefused(err) {
		// Refused at the dial (a name that resolves to an address the policy refuses): the
		// same answer every time.
		return r.fail(b, now, v1alpha1.ReasonEndpointRefused, err.Error())
	}
	if err != nil {
		return r.retry(b, now, failureReason(failure), err.Error())
	}
	r.succeed(b, taken.Report(src.Member.Name), c)
	return reconcile.Result{}, nil
}

// apiReader is APIReader, or Client when none is set.
func (r *EtcdBackupReconciler) apiReader() ctrl.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// source observes the cluster's members and picks the one to take the snapshot from.
func (r *EtcdBackupReconciler) source(ctx context.Context, c *v1alpha1.EtcdCluster) (backupplan.Source, *tls.Config, string, error) {
	desired, _ := render.Desired(r.Renderer, c, r.Operator, memory.Of(c))
	// The StatefulSet that runs, when there is one: a cluster's own chart (spec.chart.source)
	// or patches may name ports differently from the embedded chart.
	live := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: c.Namespace, Name: c.Name}, live); err == nil {
		if m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live); err == nil {
			u := &unstructured{Object: m}
			u.SetAPIVersion("apps/v1")
			u.SetKind("StatefulSet")
			desired = append(withoutKind(desired, "StatefulSet"), u)
		}
	}
	t := render.TopologyOf(c, desired)
	if render.ClientTLSEnabled(c) {
		cfg, err := observe.LoadClientTLS(ctx, r.Client, r.apiReader(), c)
		if err != nil {
			return backupplan.Source{}, nil, "", err
		}
		t.TLS = cfg
	}
	// During a switch of the client port between plain and TLS: the scheme every member
	// accepts.
	sw, err := observe.ReadClientSwitch(ctx, r.Client, r.DialEtcd, r.EtcdTimeout, c, t, t.TLS)
	if err != nil {
		return backupplan.Source{}, nil, "", err
	}
	t.ClientScheme = sw.Decision.Dial
	t.TLS = observe.DialTLS(ctx, r.Client, c, t.ClientScheme, t.TLS)
	o := observe.Observation{Memory: memory.Of(c)}
	if err := observe.Members(ctx, r.Client, r.DialEtcd, r.EtcdTimeout, c, t, &o); err != nil {
		return backupplan.Source{}, nil, "", err
	}
	if o.Etcd == nil {
		why := "no member of the cluster answered with a member list"
		if o.EtcdErr != nil {
			why += ": " + o.EtcdErr.Error()
		}
		return backupplan.Source{}, nil, why, nil
	}
	src, why, behind := backupplan.PickSource(*o.Etcd, 0)
	if behind {
		src, why = r.awaitApplied(ctx, *o.Etcd, t.TLS)
	}
	return src, t.TLS, why, nil
}

// awaitApplied waits up to backupCatchUpTimeout for a voting member of e to apply the leader's
// committed index as e reports it (read at the start of the backup), reading the answering
// voters' status again every backupCatchUpPoll, and returns the source PickSource chooses
// then, or why there is none.
func (r *EtcdBackupReconciler) awaitApplied(ctx context.Context, e etcd.Observed, tlsCfg *tls.Config) (backupplan.Source, string) {
	committed := e.Status[e.Leader()].RaftIndex
	_, why, _ := backupplan.PickSource(e, committed)
	cl, err := r.DialEtcd(ctx, observe.ClientURLs(&e), tlsCfg)
	if err != nil {
		return backupplan.Source{}, why + "; " + err.Error()
	}
	defer cl.Close()
	deadline := time.Now().Add(backupCatchUpTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return backupplan.Source{}, why + "; " + ctx.Err().Error()
		case <-time.After(backupCatchUpPoll):
		}
		next := etcd.Observed{Cluster: e.Cluster, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
		for _, m := range e.Cluster.Members {
			if _, ok := e.Status[m.ID]; !ok || m.IsLearner || len(m.ClientURLs) == 0 {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, r.EtcdTimeout)
			st, err := cl.Status(sctx, m.ClientURLs[0])
			cancel()
			if err != nil {
				next.StatusErr[m.ID] = err
				continue
			}
			next.Status[m.ID] = st
		}
		src, w, behind := backupplan.PickSource(next, committed)
		if w == "" {
			return src, ""
		}
		why = w
		if !behind {
			break
		}
	}
	return backupplan.Source{}, fmt.Sprintf("%s (after waiting up to %s)", why, backupCatchUpTimeout)
}

// failureReason is the reason of the Complete condition for a snapshot that failed with f.
// backup.Failure is the class Take returns and a backup pod reports in its termination
// message; the condition's reasons are the API's constants. The two are mapped here, not
// converted, so neither can drift into the other; a class this operator does not know (a pod
// of another version) or none counts as SnapshotFailed.
func failureReason(f backup.Failure) string {
	switch f {
	case backup.FailedIntegrity:
		return v1alpha1.ReasonIntegrityCheckFailed
	case backup.FailedUpload:
		return v1alpha1.ReasonUploadFailed
	default: // backup.FailedSnapshot, "", unknown
		return v1alpha1.ReasonSnapshotFailed
	}
}

// setComplete sets Complete, and Reconciling and Stalled from the phase, which the caller sets
// first: Reconciling is True while the backup is pending or running, Stalled once it failed
// for good (kstatus: InProgress, then Current or Failed). Both carry Complete's reason and
// message.
func setComplete(b *v1alpha1.EtcdBackup, status metav1.ConditionStatus, reason, msg string) {
	conds := []metav1.Condition{
		{Type: v1alpha1.ConditionComplete, Status: status, Reason: reason, Message: msg},
		{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: reason, Message: msg},
		{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotStalled, Message: "the backup did not fail"},
	}
	switch b.Status.Phase {
	case v1alpha1.BackupFailed:
		conds[2].Status, conds[2].Reason, conds[2].Message = metav1.ConditionTrue, reason, msg
	case v1alpha1.BackupSucceeded:
	default:
		conds[1].Status = metav1.ConditionTrue
	}
	for _, c := range conds {
		c.ObservedGeneration = b.Generation
		meta.SetStatusCondition(&b.Status.Conditions, c)
	}
}

// pending keeps the backup waiting, up to backupPendingTimeout after its creation.
func (r *EtcdBackupReconciler) pending(b *v1alpha1.EtcdBackup, now time.Time, reason, msg string) (reconcile.Result, error) {
	if now.Sub(b.CreationTimestamp.Time) > backupPendingTimeout {
		return r.fail(b, now, reason, fmt.Sprintf("%s, for more than %s", msg, backupPendingTimeout))
	}
	if b.Status.Phase != v1alpha1.BackupRunning {
		b.Status.Phase = v1alpha1.BackupPending
	}
	setComplete(b, metav1.ConditionFalse, reason, msg+"; waiting")
	return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
}

// retry records a failed attempt; after backupMaxAttempts the backup fails for good.
func (r *EtcdBackupReconciler) retry(b *v1alpha1.EtcdBackup, now time.Time, reason, msg string) (reconcile.Result, error) {
	if b.Status.Attempts >= backupMaxAttempts {
		return r.fail(b, now, reason, fmt.Sprintf("attempt %d of %d: %s", b.Status.Attempts, backupMaxAttempts, msg))
	}
	b.Status.Phase = v1alpha1.BackupPending
	setComplete(b, metav1.ConditionFalse, reason, fmt.Sprintf("attempt %d of %d failed, trying again: %s", b.Status.Attempts, backupMaxAttempts, msg))
	r.event(b, corev1.EventTypeWarning, reason, "attempt %d failed: %s", b.Status.Attempts, msg)
	return reconcile.Result{RequeueAfter: time.Duration(b.Status.Attempts) * 5 * time.Second}, nil
}

func (r *EtcdBackupReconciler) fail(b *v1alpha1.EtcdBackup, now time.Time, reason, msg string) (reconcile.Result, error) {
	b.Status.Phase = v1alpha1.BackupFailed
	b.Status.CompletionTime = &metav1.Time{Time: now}
	setComplete(b, metav1.ConditionFalse, reason, msg)
	r.event(b, corev1.EventTypeWarning, reason, "backup failed: %s", msg)
	return reconcile.Result{}, nil
}

// running records an attempt: now (read before etcd was) as its start, and the source member
// with the leader's committed index it has applied.
func (r *EtcdBackupReconciler) running(b *v1alpha1.EtcdBackup, now time.Time, src backupplan.Source, location string) {
	b.Status.Phase = v1alpha1.BackupRunning
	b.Status.Attempts++
	b.Status.StartTime = &metav1.Time{Time: now}
	b.Status.Member, b.Status.Location = src.Member.Name, location
	b.Status.MemberID, b.Status.CommittedIndex = etcd.FormatID(src.Member.ID), int64(src.Committed)
	setComplete(b, metav1.ConditionFalse, v1alpha1.ReasonBackupRunning,
		fmt.Sprintf("streaming the snapshot of %s (member %s, which applied the leader's committed index %d) to %s (attempt %d)",
			src.Member.Name, b.Status.MemberID, src.Committed, location, b.Status.Attempts))
}

func (r *EtcdBackupReconciler) succeed(b *v1alpha1.EtcdBackup, res backup.Report, c *v1alpha1.EtcdCluster) {
	now := metav1.Now()
	b.Status.Phase = v1alpha1.BackupSucceeded
	b.Status.CompletionTime = &now
	b.Status.Size, b.Status.SHA256, b.Status.Revision, b.Status.EtcdVersion = res.Size, res.SHA256, res.Revision, res.Version
	b.Status.ClusterID = c.Status.ClusterID
	if res.Member != "" {
		b.Status.Member = res.Member
	}
	if res.Location != "" {
		b.Status.Location = res.Location
	}
	msg := fmt.Sprintf("snapshot of %s at revision %d (%d bytes, sha256 %s) stored at %s and verified", b.Status.Member, res.Revision, res.Size, res.SHA256, b.Status.Location)
	setComplete(b, metav1.ConditionTrue, v1alpha1.ReasonSnapshotStored, msg)
	r.event(b, corev1.EventTypeNormal, v1alpha1.ReasonSnapshotStored, "%s", msg)
}

func (r *EtcdBackupReconciler) event(b *v1alpha1.EtcdBackup, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, typ, reason, "Backup", format, args...)
	}
}

// withoutKind returns objs without those of kind.
func withoutKind(objs []*unstructured, kind string) []*unstructured {
	var out []*unstructured
	for _, o := range objs {
		if o.GetKind() != kind {
			out = append(out, o)
		}
	}
	return out
}

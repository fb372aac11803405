package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdbackups,verbs=get;list;watch;create;delete

// clusterBackups lists the EtcdBackups of cluster c (spec.clusterName), oldest first.
func (r *EtcdClusterReconciler) clusterBackups(ctx context.Context, c *v1alpha1.EtcdCluster) ([]v1alpha1.EtcdBackup, error) {
	list := &v1alpha1.EtcdBackupList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list the EtcdBackups of %s/%s: %w", c.Namespace, c.Name, err)
	}
	var out []v1alpha1.EtcdBackup
	for _, b := range list.Items {
		if b.Spec.ClusterName == c.Name {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func records(bs []v1alpha1.EtcdBackup) []backupplan.Record {
	out := make([]backupplan.Record, 0, len(bs))
	for _, b := range bs {
		rec := backupplan.Record{Name: b.Name, Scheduled: b.Labels[v1alpha1.LabelBackupSchedule] == "true",
			Phase: backupplan.Phase(b.Status.Phase), Created: b.CreationTimestamp.Time}
		if b.Status.CompletionTime != nil {
			rec.Completed = b.Status.CompletionTime.Time
		}
		if rec.Phase == "" {
			rec.Phase = backupplan.Pending
		}
		out = append(out, rec)
	}
	return out
}

// reconcileBackups runs spec.backup: it creates the backup of every schedule time that came
// due, lets retention delete what it may (object first, then the EtcdBackup, so a crash in
// between deletes the object again, which is harmless), and fills status.backup and the
// BackupReady condition. It returns when the schedule next needs a pass (0 for none).
func (r *EtcdClusterReconciler) reconcileBackups(ctx context.Context, c *v1alpha1.EtcdCluster, o *observe.Observation) (time.Duration, error) {
	bs, err := r.clusterBackups(ctx, c)
	if err != nil {
		return 0, err
	}
	o.Backups = bs
	setLastBackup(c, bs)
	spec := c.Spec.Backup
	if spec == nil {
		meta.RemoveStatusCondition(&c.Status.Conditions, v1alpha1.ConditionBackupReady)
		if c.Status.Backup != nil {
			c.Status.Backup.NextScheduleTime = nil
		}
		return 0, nil
	}
	if c.Status.Backup == nil {
		c.Status.Backup = &v1alpha1.BackupStatus{}
	}
	sched, err := backupplan.ParseSchedule(spec.Schedule, spec.TimeZone)
	if err != nil {
		o.BackupCond = &metav1.Condition{Type: v1alpha1.ConditionBackupReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonInvalidSchedule, Message: err.Error() + "; fix spec.backup"}
		return 0, nil
	}
	now := o.Now
	next := sched.Next(now)
	c.Status.Backup.NextScheduleTime = &metav1.Time{Time: next}
	if !spec.Suspend {
		after := c.CreationTimestamp.Time
		if last := c.Status.Backup.LastScheduleTime; last != nil {
			after = last.Time
		}
		if t, due := sched.Due(after, now); due {
			if err := r.createBackup(ctx, c, backupplan.Name(c.Name, t), map[string]string{v1alpha1.LabelBackupSchedule: "true"}); err != nil {
				return 0, err
			}
			c.Status.Backup.LastScheduleTime = &metav1.Time{Time: t}
		}
	}
	if err := r.retain(ctx, c, bs, now); err != nil {
		return 0, err
	}
	o.BackupCond = backupCondition(spec, sched, bs, now)
	return next.Sub(now), nil
}

// createBackup creates an EtcdBackup of c; one that exists already is success.
func (r *EtcdClusterReconciler) createBackup(ctx context.Context, c *v1alpha1.EtcdCluster, name string, labels map[string]string) error {
	b := &v1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name,
			Labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: c.Name},
	}
	for k, v := range labels {
		b.Labels[k] = v
	}
	err := r.Client.Create(ctx, b)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to create EtcdBackup %s/%s: %w", c.Namespace, name, err)
	}
	why := "scheduled by spec.backup"
	if v := labels[v1alpha1.LabelBackupBeforeUpgrade]; v != "" {
		why = "before the upgrade to " + v
	}
	r.event(c, b, "Normal", "BackupCreated", "created EtcdBackup %s (%s)", name, why)
	return nil
}

// retain deletes the scheduled backups retention lets go, each only while the retention
// invariant (a newer backup succeeded) holds in this pass's list.
func (r *EtcdClusterReconciler) retain(ctx context.Context, c *v1alpha1.EtcdCluster, bs []v1alpha1.EtcdBackup, now time.Time) error {
	spec := c.Spec.Backup
	ret := backupplan.Retention{MaxCount: 7}
	if spec.Retention.MaxCount != nil {
		ret.MaxCount = int(*spec.Retention.MaxCount)
	}
	if spec.Retention.MaxAge != nil {
		ret.MaxAge = spec.Retention.MaxAge.Duration
	}
	recs := records(bs)
	expired := backupplan.Expired(recs, ret, now)
	if len(expired) == 0 {
		return nil
	}
	byName := map[string]*v1alpha1.EtcdBackup{}
	for i := range bs {
		byName[bs[i].Name] = &bs[i]
	}
	logger := log.FromContext(ctx)
	for _, name := range expired {
		if why := backupplan.MayDelete(name, recs); why != "" {
			logger.Info("retention refused to delete a backup", "backup", name, "why", why)
			continue
		}
		b := byName[name]
		if dest := b.Spec.Destination; (dest != nil && dest.PersistentVolumeClaim != nil) || (dest == nil && spec.Destination.PersistentVolumeClaim != nil) {
			// Files on a claim can only be deleted by a pod that mounts it; until retention runs
			// one, claim backups are kept (nothing is lost, the claim fills up).
			continue
		}
		if err := r.deleteBackupObject(ctx, c, b); err != nil {
			return err
		}
		if err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to delete EtcdBackup %s/%s: %w", b.Namespace, b.Name, err)
		}
		r.event(c, b, "Normal", "BackupDeleted", "retention deleted backup %s (%s)", b.Name, b.Status.Location)
	}
	return nil
}

// deleteBackupObject deletes the stored snapshot of b, if it has one.
func (r *EtcdClusterReconciler) deleteBackupObject(ctx context.Context, c *v1alpha1.EtcdCluster, b *v1alpha1.EtcdBackup) error {
	dest := b.Spec.Destination
	if dest == nil {
		dest = &c.Spec.Backup.Destination
	}
	switch {
	case b.Status.Location == "" || dest.S3 == nil:
		return nil
	default:
		store, err := openS3(ctx, r.apiReader(), r.OpenS3, c.Namespace, c.Name, dest.S3)
		if err != nil {
			return fmt.Errorf("failed to delete the snapshot of EtcdBackup %s: %w", b.Name, err)
		}
		if err := store.Delete(ctx, backup.ObjectKey(b.Name)); err != nil {
			return fmt.Errorf("failed to delete the snapshot of EtcdBackup %s: %w", b.Name, err)
		}
		return nil
	}
}

// setLastBackup fills status.backup's newest successful backup from bs.
func setLastBackup(c *v1alpha1.EtcdCluster, bs []v1alpha1.EtcdBackup) {
	var last *v1alpha1.EtcdBackup
	for i := range bs {
		b := &bs[i]
		if b.Status.Phase != v1alpha1.BackupSucceeded || b.Status.CompletionTime == nil {
			continue
		}
		if last == nil || b.Status.CompletionTime.After(last.Status.CompletionTime.Time) {
			last = b
		}
	}
	if last == nil {
		return
	}
	if c.Status.Backup == nil {
		c.Status.Backup = &v1alpha1.BackupStatus{}
	}
	c.Status.Backup.LastSuccessfulTime = last.Status.CompletionTime
	c.Status.Backup.LastSuccessfulName = last.Name
	c.Status.Backup.LastSuccessfulRevision = last.Status.Revision
}

// backupCondition is BackupReady: True while the newest finished scheduled backup succeeded
// and is not overdue.
func backupCondition(spec *v1alpha1.BackupSpec, sched backupplan.Schedule, bs []v1alpha1.EtcdBackup, now time.Time) *metav1.Condition {
	cond := &metav1.Condition{Type: v1alpha1.ConditionBackupReady}
	var newest, lastOK *v1alpha1.EtcdBackup
	running := 0
	for i := range bs {
		b := &bs[i]
		switch b.Status.Phase {
		case v1alpha1.BackupSucceeded:
			lastOK = b
			newest = b
		case v1alpha1.BackupFailed:
			newest = b
		default:
			running++
		}
	}
	switch {
	case spec.Suspend:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonBackupSuspended, "spec.backup.suspend is set: no scheduled backups are taken"
	case newest != nil && newest.Status.Phase == v1alpha1.BackupFailed:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonBackupFailed
		cond.Message = fmt.Sprintf("backup %s failed: %s", newest.Name, completeMessage(newest))
	case lastOK == nil && running > 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonBackupRunning, "the first backup is under way"
	case lastOK == nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonBackupPending
		cond.Message = "no backup has completed yet; the next is due at " + sched.Next(now).UTC().Format(time.RFC3339)
	case now.Sub(lastOK.Status.CompletionTime.Time) > 2*sched.Period(now)+time.Minute && running == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonBackupOverdue
		cond.Message = fmt.Sprintf("the newest successful backup, %s, completed at %s: more than two schedule periods ago",
			lastOK.Name, lastOK.Status.CompletionTime.UTC().Format(time.RFC3339))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonBackupSucceeded
		cond.Message = fmt.Sprintf("backup %s succeeded at %s: revision %d, %d bytes at %s", lastOK.Name,
			lastOK.Status.CompletionTime.UTC().Format(time.RFC3339), lastOK.Status.Revision, lastOK.Status.Size, lastOK.Status.Location)
	}
	return cond
}

func completeMessage(b *v1alpha1.EtcdBackup) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionComplete); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no reason recorded"
}

// beforeUpgrade holds a rollout step that disrupts a member until the backup taken before a
// minor-version upgrade succeeded, when spec.backup is set. It returns the step to take
// instead (a wait), or s unchanged.
func (r *EtcdClusterReconciler) beforeUpgrade(ctx context.Context, c *v1alpha1.EtcdCluster, o *observe.Observation, s plan.Step, stepVersion, running string) (plan.Step, error) {
	if c.Spec.Backup == nil || s.Kind == plan.None || s.Kind == plan.Wait || running == "" || stepVersion == "" {
		return s, nil
	}
	if !minorUpgrade(running, stepVersion) {
		return s, nil
	}
	var found *v1alpha1.EtcdBackup
	for i := range o.Backups {
		if o.Backups[i].Labels[v1alpha1.LabelBackupBeforeUpgrade] == stepVersion {
			found = &o.Backups[i]
		}
	}
	name := fmt.Sprintf("%s-before-%s", c.Name, strings.ReplaceAll(stepVersion, ".", "-"))
	switch {
	case found == nil:
		if err := r.createBackup(ctx, c, name, map[string]string{v1alpha1.LabelBackupBeforeUpgrade: stepVersion}); err != nil {
			return s, err
		}
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonWaitingForBackup,
			Message: fmt.Sprintf("upgrading from %s to %s: taking backup %s first", running, stepVersion, name), RequeueAfter: 2 * time.Second}, nil
	case found.Status.Phase == v1alpha1.BackupSucceeded:
		return s, nil
	case found.Status.Phase == v1alpha1.BackupFailed:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonBackupFailed,
			Message: fmt.Sprintf("the upgrade to %s waits for backup %s, which failed (%s); fix the destination and delete EtcdBackup %s to take it again",
				stepVersion, found.Name, completeMessage(found), found.Name)}, nil
	}
	return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonWaitingForBackup,
		Message: fmt.Sprintf("upgrading from %s to %s: waiting for backup %s (%s)", running, stepVersion, found.Name, strings.ToLower(string(found.Status.Phase))), RequeueAfter: 2 * time.Second}, nil
}

// minorUpgrade reports whether going from version a to b raises the minor version.
func minorUpgrade(a, b string) bool {
	va, err1 := versions.Parse(a)
	vb, err2 := versions.Parse(b)
	return err1 == nil && err2 == nil && va.Less(vb) && va.MinorString() != vb.MinorString()
}

// event records an event on c about the EtcdBackup b when a recorder is set (b is the related
// object, so each backup's event is its own; see memberPod).
func (r *EtcdClusterReconciler) event(c *v1alpha1.EtcdCluster, b *v1alpha1.EtcdBackup, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, b, typ, reason, "Backup", format, args...)
	}
}

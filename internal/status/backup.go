package status

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
)

// SetLastBackup fills status.backup's newest successful backup from bs.
func SetLastBackup(c *v1alpha1.EtcdCluster, bs []v1alpha1.EtcdBackup) {
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

// BackupCondition is BackupReady: True while the newest finished scheduled backup succeeded
// and is not overdue.
func BackupCondition(spec *v1alpha1.BackupSpec, sched backupplan.Schedule, bs []v1alpha1.EtcdBackup, now time.Time) *metav1.Condition {
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
		cond.Message = fmt.Sprintf("backup %s failed: %s", newest.Name, backupplan.CompleteMessage(newest))
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

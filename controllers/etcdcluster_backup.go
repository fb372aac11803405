package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
)

// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdbackups,verbs=get;list;watch;create;delete

// reconcileBackups runs spec.backup: it creates the backup of every schedule time that came
// due, lets retention delete what it may (object first, then the EtcdBackup, so a crash in
// between deletes the object again, which is harmless), and fills status.backup and the
// BackupReady condition. It returns when the schedule next needs a pass (0 for none).
func (r *EtcdClusterReconciler) reconcileBackups(ctx context.Context, c *v1alpha1.EtcdCluster, o *observe.Observation) (time.Duration, error) {
	bs, err := observe.ClusterBackups(ctx, r.Client, c)
	if err != nil {
		return 0, err
	}
	o.Backups = bs
	status.SetLastBackup(c, bs)
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
			if err := r.exec.CreateBackup(ctx, c, backupplan.Name(c.Name, t), map[string]string{v1alpha1.LabelBackupSchedule: "true"}); err != nil {
				return 0, err
			}
			c.Status.Backup.LastScheduleTime = &metav1.Time{Time: t}
		}
	}
	if err := r.exec.Retain(ctx, c, bs, now); err != nil {
		return 0, err
	}
	o.BackupCond = status.BackupCondition(spec, sched, bs, now)
	return next.Sub(now), nil
}

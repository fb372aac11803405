package execute

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
)

// CreateBackup creates an EtcdBackup of c; one that exists already is success.
func (x *Executor) CreateBackup(ctx context.Context, c *v1alpha1.EtcdCluster, name string, labels map[string]string) error {
	b := &v1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name,
			Labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: c.Name},
	}
	for k, v := range labels {
		b.Labels[k] = v
	}
	err := x.Client.Create(ctx, b)
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
	x.backupEvent(c, b, "Normal", "BackupCreated", "created EtcdBackup %s (%s)", name, why)
	return nil
}

// Retain deletes the scheduled backups retention lets go, each only while the retention
// invariant (a newer backup succeeded) holds in this pass's list.
func (x *Executor) Retain(ctx context.Context, c *v1alpha1.EtcdCluster, bs []v1alpha1.EtcdBackup, now time.Time) error {
	spec := c.Spec.Backup
	ret := backupplan.Retention{MaxCount: 7}
	if spec.Retention.MaxCount != nil {
		ret.MaxCount = int(*spec.Retention.MaxCount)
	}
	if spec.Retention.MaxAge != nil {
		ret.MaxAge = spec.Retention.MaxAge.Duration
	}
	recs := observe.Records(bs)
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
		if err := x.deleteBackupObject(ctx, c, b); err != nil {
			// The store cannot be reached or refuses (an endpoint the outbound policy
			// refuses, an outage): the backup is kept and tried again on a later pass. It
			// must not hold up the pass: membership, restores and rollouts come after the
			// backups in it.
			logger.Info("retention could not delete a backup's snapshot; it is kept for now", "backup", name, "error", err.Error())
			x.backupEvent(c, b, "Warning", "BackupNotDeleted", "retention could not delete the snapshot of %s; it is kept and tried again later: %v", b.Name, err)
			continue
		}
		if err := x.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to delete EtcdBackup %s/%s: %w", b.Namespace, b.Name, err)
		}
		x.backupEvent(c, b, "Normal", "BackupDeleted", "retention deleted backup %s (%s)", b.Name, b.Status.Location)
	}
	return nil
}

// deleteBackupObject deletes the stored snapshot of b, if it has one.
func (x *Executor) deleteBackupObject(ctx context.Context, c *v1alpha1.EtcdCluster, b *v1alpha1.EtcdBackup) error {
	dest := b.Spec.Destination
	if dest == nil {
		dest = &c.Spec.Backup.Destination
	}
	switch {
	case b.Status.Location == "" || dest.S3 == nil:
		return nil
	default:
		store, err := OpenS3(ctx, x.APIReader, x.OpenS3, x.Egress, c.Namespace, c.Name, dest.S3)
		if err != nil {
			return fmt.Errorf("failed to delete the snapshot of EtcdBackup %s: %w", b.Name, err)
		}
		if err := store.Delete(ctx, backup.ObjectKey(b.Name)); err != nil {
			return fmt.Errorf("failed to delete the snapshot of EtcdBackup %s: %w", b.Name, err)
		}
		return nil
	}
}

// backupEvent records an event on c about the EtcdBackup b when a recorder is set (b is the
// related object, so each backup's event is its own; see MemberPod).
func (x *Executor) backupEvent(c *v1alpha1.EtcdCluster, b *v1alpha1.EtcdBackup, typ, reason, format string, args ...any) {
	if x.Recorder != nil {
		x.Recorder.Eventf(c, b, typ, reason, "Backup", format, args...)
	}
}

package observe

import (
	"context"
	"fmt"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
)

// ClusterBackups lists the EtcdBackups of cluster c (spec.clusterName) through kc (the cache),
// oldest first.
func ClusterBackups(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster) ([]v1alpha1.EtcdBackup, error) {
	list := &v1alpha1.EtcdBackupList{}
	if err := kc.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
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

// Records are the backup planner's view of EtcdBackups bs.
func Records(bs []v1alpha1.EtcdBackup) []backupplan.Record {
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

package controllers

import (
	"context"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// Act runs the executor on one step, for the tests of package controllers_test.
func (r *EtcdClusterReconciler) Act(ctx context.Context, c *v1alpha1.EtcdCluster, mo membership.Observation, s plan.Step) error {
	r.init()
	return r.exec.ExecuteMembership(ctx, c, render.Topology{}, mo, s, &r.compacted)
}

// SetIntent stores an intent as the executor does, for the tests of package controllers_test.
func (r *EtcdClusterReconciler) SetIntent(ctx context.Context, c *v1alpha1.EtcdCluster, in *plan.Intent) error {
	r.init()
	return r.exec.SetIntent(ctx, c, in)
}

// BackupPodLabels are the labels of a backup pod, for the tests of package controllers_test.
var BackupPodLabels = backupPodLabels

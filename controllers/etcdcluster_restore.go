package controllers

import (
	"context"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// holdStatefulSet reports whether the StatefulSet is kept back this pass: a bootstrap restore
// has not finished, and founders must never start on empty volumes.
func holdStatefulSet(c *v1alpha1.EtcdCluster) bool {
	return restore.HoldStatefulSet(c.Spec.Bootstrap != nil, c.Status.ClusterID != "", c.Status.Restore)
}

// reconcileRestore observes, asks the restore planner, passes the gate and carries out one
// restore step. It returns a step of kind None when no restore is wanted or under way.
func (r *EtcdClusterReconciler) reconcileRestore(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, desired []*unstructured) (plan.Step, error) {
	ro, srcs, ev, err := observe.Restore(ctx, observe.RestoreReads{Client: r.Client, APIReader: r.apiReader(), QuorumLoss: &r.quorumLoss}, c, t, o)
	if err != nil {
		return plan.Step{}, err
	}
	a := restore.Decide(ro)
	if a.Kind == plan.None {
		return a.Step, nil
	}
	ev.Etcd, ev.Answers, ev.StatefulSet, ev.StsReplicas, ev.Desired = o.Etcd, o.Answers, t.StatefulSet, ro.StsReplicas, render.SpecReplicas(c)
	ev.Formed = c.Status.ClusterID != "" || (o.Etcd != nil && o.Etcd.Leader() != 0)
	ev.PeerURL, ev.MaxLag = t.PeerURL, membership.LearnerMaxLag
	gated := plan.Gate(a.Step, ev)
	if gated.Kind != a.Kind {
		return gated, nil
	}
	return a.Step, r.exec.Restore(ctx, c, t, ro, a, srcs, desired)
}

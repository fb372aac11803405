package controllers

import (
	"context"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// holdStatefulSet reports whether the StatefulSet is kept back this pass: a bootstrap restore
// has not finished, and founders must never start on empty volumes.
func holdStatefulSet(c *v1alpha1.EtcdCluster, m memory.Memory) bool {
	return restore.HoldStatefulSet(c.Spec.Bootstrap != nil, m.Formed(), m.Restore)
}

// restoreProposal is the restore planner's proposal for a pass (step, after the gate) and
// what carrying it out takes.
type restoreProposal struct {
	step        plan.Step
	action      restore.Action
	observation restore.Observation
	sources     observe.RestoreSources
}

// proposeRestore observes, asks the restore planner and passes its step through the gate.
// The step is of kind None when no restore is wanted or under way; when the gate refuses it,
// it is the gate's wait, and the executor does nothing.
func (r *EtcdClusterReconciler) proposeRestore(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation) (restoreProposal, error) {
	ro, srcs, ev, err := observe.Restore(ctx, observe.RestoreReads{Client: r.Client, APIReader: r.apiReader(), QuorumLoss: &r.quorumLoss, Egress: r.Egress}, c, t, o)
	if err != nil {
		return restoreProposal{}, err
	}
	a := restore.Decide(ro)
	if a.Kind == plan.None {
		return restoreProposal{step: a.Step}, nil
	}
	ev.Etcd, ev.Answers, ev.StatefulSet, ev.StsReplicas, ev.Desired = o.Etcd, o.Answers, t.StatefulSet, ro.StsReplicas, render.SpecReplicas(c)
	ev.Formed = o.Memory.Formed() || (o.Etcd != nil && o.Etcd.Leader() != 0)
	ev.PeerURL, ev.MaxLag = t.PeerURL, membership.LearnerMaxLag
	return restoreProposal{step: plan.Gate(a.Step, ev), action: a, observation: ro, sources: srcs}, nil
}

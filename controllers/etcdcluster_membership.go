package controllers

import (
	"context"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/maintenance"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/rollout"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
)

// requeueMembership is how soon the next step of a membership change is looked at.
const requeueMembership = 500 * time.Millisecond

// reconcileMembership observes pods, claims and etcd, keeps the membership ConfigMap and the
// StatefulSet's replicas, and carries out at most one membership step.
func (r *EtcdClusterReconciler) reconcileMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, ps *observe.PeerSwitch) (plan.Step, error) {
	mo, err := observe.Membership(ctx, r.Client, r.apiReader(), c, t, o, &r.missing)
	if err != nil {
		return plan.Step{}, err
	}
	a := membership.Decide(mo)
	// Once membership matches the spec (or only waits for an unhealthy member, which may be
	// one restarting or failing on a new template), the pod template may roll out.
	if o.StatefulSet != nil && (a.Kind == plan.None || a.Reason == v1alpha1.ReasonMemberUnhealthy) {
		step, target := versionTargets(c)
		ro := rollout.Observation{
			UpdateRevision: o.StatefulSet.Status.UpdateRevision,
			StsCaughtUp:    status.StsCaughtUp(*o),
			Pods:           rollout.PodsOf(mo.Pods), Etcd: mo.Etcd, Now: mo.Now,
			MemberTimeout: rollout.DefaultMemberTimeout, MaxLag: membership.LearnerMaxLag,
			StepVersion: step, TargetVersion: target,
			LegacyLogIndex: c.Status.LegacyLogIndex, SnapshotCount: snapshotCount(c),
			Missing: observe.MissingOf(mo.Pods),
		}
		if d := c.Spec.Upgrade.MemberTimeout; d != nil {
			ro.MemberTimeout = d.Duration
		}
		if ra := rollout.Decide(ro); ra.Kind != plan.None {
			running := ""
			if mo.Etcd != nil {
				_, _, _, running = status.MemberStatuses(*mo.Etcd)
			}
			// The backup taken before a minor-version upgrade holds a disruptive step; the
			// executor creates it when it does not exist.
			held, create := backupplan.BeforeUpgrade(c.Name, c.Spec.Backup != nil, ra, step, running, o.Backups)
			if create != nil {
				if err := r.exec.CreateBackup(ctx, c, create.Name, create.Labels); err != nil {
					return ra, err
				}
			}
			a = held
		}
		o.Upgrade, o.UpgradeKnown = rollout.Progress(ro, a), true
	}
	// A recorded defragmentation that etcd shows over goes before any planner decides.
	defrag, defragWait, over := observe.Defragmentation(c, mo.Etcd)
	if over {
		if err := r.exec.EndDefragmentation(ctx, c, defrag, defragWait); err != nil {
			return a, err
		}
		defrag, defragWait = nil, ""
	}
	if mo.Etcd != nil && maintenance.Asked(a, defrag != nil) {
		mob := observe.Maintenance(ctx, r.DialEtcd, r.EtcdTimeout, c, t, mo.Etcd, a.Kind != plan.None, mo.Now, defrag, defragWait, &r.compacted)
		a = maintenance.Over(a, mob)
	}
	// Authentication when nothing else is to do (a is None); the root user's Secret is
	// created before the root user.
	if a.Kind == plan.None {
		ao, asked, err := observe.Auth(ctx, r.DialEtcd, r.EtcdTimeout, c, t, mo.Etcd)
		if err != nil {
			return a, err
		}
		if asked {
			s := authplan.Decide(ao)
			if s.Kind == plan.EnsureRootUser && s.User == authplan.RootUser {
				if _, err := r.exec.RootPassword(ctx, c); err != nil {
					return a, err
				}
			}
			a = s
		}
	}
	a = peerswitch.Step(a, o.PeerSwitch, t.PeerPort, t.PeerTransitionPort)
	if err := r.exec.EnsureMembershipConfig(ctx, c, t, mo); err != nil {
		return a, err
	}
	if err := r.exec.StampClaims(ctx, c, mo); err != nil {
		return a, err
	}
	ev := mo.Evidence()
	ev.Defragmentation = defrag
	if a.Kind == plan.UpdatePeerURL && mo.Etcd != nil {
		// The gate's evidence that the member serves its new URL: ask it there, now.
		ev.PeerURLAnswers = map[string]string{a.PeerURL: observe.AskPeer(ctx, r.Client, r.apiReader(), r.EtcdTimeout, c, a.PeerURL, mo.Etcd.Cluster.ClusterID, ps.Secret(c))}
	}
	a = plan.Gate(a, ev)
	return a, r.exec.ExecuteMembership(ctx, c, t, mo, a, &r.compacted)
}

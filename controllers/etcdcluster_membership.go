package controllers

import (
	"context"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcdstate "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/maintenance"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/rollout"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/storage"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// requeueMembership is how soon the next step of a membership change is looked at.
const requeueMembership = 500 * time.Millisecond

// reconcileMembership observes pods, claims and etcd, asks every planner below the restore
// that plan.Next's priority table asks (membership, the rollout with the backup before a
// minor upgrade, maintenance, authentication, the peer URL move), lets plan.Next pick the one
// step, passes it through the gate, and has the executor carry it out. It also keeps the
// membership ConfigMap and the claims' stamps.
func (r *EtcdClusterReconciler) reconcileMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, ps *observe.PeerSwitch) (plan.Step, error) {
	mo, err := observe.Membership(ctx, r.cached(ctx), r.apiReader(), c, t, o, &r.missing)
	if err != nil {
		return plan.Step{}, err
	}
	p := plan.Proposals{Membership: membership.Decide(mo)}
	// soFar is the step the proposals made so far give: what a pass that fails reports.
	soFar := func() plan.Step { a, _ := plan.Next(p); return a }
	// Once membership matches the spec (or only waits for an unhealthy member, which may be
	// one restarting or failing on a new template), the pod template may roll out.
	if _, _, asked := plan.Above(p, plan.PlannerRollout); asked && o.StatefulSet != nil {
		step, target := versionTargets(c, o.Memory)
		ro := rollout.Observation{
			UpdateRevision: o.StatefulSet.Status.UpdateRevision,
			StsCaughtUp:    status.StsCaughtUp(*o),
			Pods:           rollout.PodsOf(mo.Pods), Etcd: mo.Etcd, Now: mo.Now,
			MemberTimeout: rollout.DefaultMemberTimeout, MaxLag: membership.LearnerMaxLag,
			StepVersion: step, TargetVersion: target,
			LegacyLogIndex: o.Memory.LegacyLogIndex, SnapshotCount: snapshotCount(c),
			Missing: observe.MissingOf(mo.Pods),
		}
		if d := c.Spec.Upgrade.MemberTimeout; d != nil {
			ro.MemberTimeout = d.Duration
		}
		if p.Rollout = rollout.Decide(ro); p.Rollout.Kind != plan.None {
			running := ""
			if mo.Etcd != nil {
				_, _, _, running = status.MemberStatuses(*mo.Etcd)
			}
			// The backup taken before a minor-version upgrade holds a disruptive step; when it
			// does not exist yet, the wait has the executor create it (after the arbiter and
			// the gate, as every write).
			if held := backupplan.BeforeUpgrade(c.Name, c.Spec.Backup != nil, p.Rollout, step, running, o.Backups); held.Kind == plan.Wait && p.Rollout.Kind != plan.Wait {
				p.PreUpgradeBackup = held
			}
		}
		upTo, _, _ := plan.Above(p, plan.PlannerMaintenance)
		o.Upgrade, o.UpgradeKnown = rollout.Progress(ro, upTo), true
	}
	// A recorded defragmentation that etcd shows over counts as none for the planners and the
	// gate; the executor removes its record after the gate, before the step.
	defrag, defragWait, over := observe.Defragmentation(c, mo.Etcd)
	var ended *plan.Defragmentation
	var endedWhy string
	if over {
		ended, endedWhy, defrag, defragWait = defrag, defragWait, nil, ""
	}
	p.Defragmenting = defrag != nil
	if above, _, asked := plan.Above(p, plan.PlannerMaintenance); asked && mo.Etcd != nil {
		mob := observe.Maintenance(ctx, r.DialEtcd, r.EtcdTimeout, c, t, mo.Etcd, above.Kind != plan.None, mo.Now, defrag, defragWait, &r.compacted)
		p.Maintenance, p.Alarms = maintenance.Decide(mob), len(mob.Alarms) > 0
	}
	// Authentication when nothing else is to do.
	var authRead *etcdstate.AuthState
	if _, _, asked := plan.Above(p, plan.PlannerAuth); asked {
		ao, answers, err := observe.Auth(ctx, r.DialEtcd, r.EtcdTimeout, c, t, mo.Etcd, o)
		if err != nil {
			return soFar(), err
		}
		if answers {
			// The root user's Secret is created by the executor, before the root user.
			p.Auth, p.AuthAnswered = authplan.Decide(ao), true
			if ao.OperatorUser != "" {
				authRead = &ao.State
			}
		}
	}
	if _, _, asked := plan.Above(p, plan.PlannerPeerSwitch); asked {
		p.PeerURL = peerswitch.Step(plan.Step{Kind: plan.None}, o.PeerSwitch, t.PeerPort, t.PeerTransitionPort)
	}
	// The members' volumes against spec.storage.size: read every pass for status; the planner
	// grows them only on a settled cluster.
	so := observe.Storage(ctx, r.apiReader(), c, o, mo)
	o.Storage = &so
	if _, _, asked := plan.Above(p, plan.PlannerStorage); asked {
		p.Storage = storage.Decide(so)
	}
	a, by := plan.Next(p)
	log.FromContext(ctx).V(1).Info("the planners proposed; one step is taken", "planner", by, "step", a.Kind, "reason", a.Reason)
	if err := r.exec.EnsureMembershipConfig(ctx, c, t, mo); err != nil {
		return a, err
	}
	if err := r.exec.StampClaims(ctx, c, mo); err != nil {
		return a, err
	}
	ev := mo.Evidence()
	ev.Defragmentation = defrag
	// What etcd said of its users in this pass, for the gate's check that the operator keeps
	// a root user.
	ev.Auth, ev.OperatorUser = authRead, o.OperatorUser
	if a.Kind == plan.UpdatePeerURL && mo.Etcd != nil {
		// The gate's evidence that the member serves its new URL: ask it there, now.
		ev.PeerURLAnswers = map[string]string{a.PeerURL: observe.AskPeer(ctx, r.Client, r.apiReader(), r.EtcdTimeout, c, a.PeerURL, mo.Etcd.Cluster.ClusterID, ps.Secret(c))}
	}
	a = plan.Gate(a, ev)
	if ended != nil {
		if err := r.exec.EndDefragmentation(ctx, c, ended, endedWhy); err != nil {
			return a, err
		}
	}
	return a, r.exec.ExecuteMembership(ctx, c, t, mo, a, &r.compacted)
}

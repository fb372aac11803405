package plan

import "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"

// The planners, by the names Next returns for the one whose step a pass takes.
const (
	PlannerRestore          = "restore"
	PlannerMembership       = "membership"
	PlannerRollout          = "rollout"
	PlannerPreUpgradeBackup = "pre-upgrade-backup"
	PlannerMaintenance      = "maintenance"
	PlannerAuth             = "auth"
	PlannerPeerSwitch       = "peerswitch"
	PlannerStorage          = "storage"
)

// Proposals is every planner's proposal for one pass: a Step of Kind None (or the zero
// Step) is no proposal. Errors are not proposals: a planner that fails ends the pass before
// Next is asked.
type Proposals struct {
	// Restore: the restore planner's step (spec.bootstrap, disaster recovery), already
	// passed through the gate as reconcileRestore does today.
	Restore Step
	// Membership: membership.Decide. Its None (Reason Reconciled) is the step of a pass no
	// planner below takes over.
	Membership Step
	// Rollout: rollout.Decide.
	Rollout Step
	// PreUpgradeBackup: the Wait the backup taken before a minor upgrade imposes on the
	// rollout's step (beforeUpgrade); None when it imposes none (no spec.backup, no minor
	// upgrade, the backup succeeded).
	PreUpgradeBackup Step
	// Maintenance: maintenance.Decide, asked with Busy set when the entries above it
	// decided anything but None (see Above).
	Maintenance Step
	// Auth: authplan.Decide, or the Wait for the operator's client certificate.
	Auth Step
	// PeerURL: the peer switch's next URL move (UpdatePeerURL), or the Wait when the URL
	// cannot be moved.
	PeerURL Step
	// Storage: storage.Decide (a grown spec.storage.size).
	Storage Step

	// Defragmenting: a recorded defragmentation stands (plan.Defragmentation).
	Defragmenting bool
	// Alarms: the maintenance planner was shown at least one alarm of etcd's alarm list.
	Alarms bool
	// AuthAnswered: the authentication planner answered (spec.auth set, etcd observed, and
	// the operator has a client certificate or spec.auth.enabled): Auth is its answer, even
	// a bare None.
	AuthAnswered bool
}

// decision is what the entries of the table decided so far: a step and the planner whose
// step it is ("" before any).
type decision struct {
	step Step
	by   string
}

// entry is one row of the priority table. A planner is asked only when asked holds for
// what the entries above it decided (today's controllers call it only then: some planners
// do I/O or write before they answer); its proposal then replaces that decision when takes
// holds. When final, the entries below it are not asked once it took over.
type entry struct {
	planner string
	when    string
	own     func(Proposals) Step
	asked   func(d decision, p Proposals) bool
	takes   func(d decision, own Step, p Proposals) bool
	final   bool
}

// priority is the one priority table: highest first. Each row says when the planner takes
// over from what the rows above it decided (d), with its own proposal (own).
//
//	planner             asked when                          takes over when
//	restore             always                              own is not None; nothing below is asked
//	membership          restore did not take over           always (its None is the base step)
//	rollout             d is membership's and is None,      own is not None
//	                    or has Reason MemberUnhealthy
//	pre-upgrade-backup  d is the rollout's and not a Wait   own is not None
//	maintenance         d is None or a Wait,                own is AdvanceLog while Defragmenting (over any d);
//	                    or Defragmenting                    else d is None or a Wait, own is not None, and
//	                                                        d is None or Alarms
//	auth                d is None                           AuthAnswered (its bare None too)
//	peerswitch          d is None                           own is not None
//	storage             d is None                           own is not None
//
// Today's behaviour, kept as found (controllers/etcdcluster_*.go), where it may surprise:
//   - rollout: the test is on Reason alone, whatever the Kind; membership gives
//     MemberUnhealthy only as a Wait, so this is "None, or Wait/MemberUnhealthy".
//   - maintenance: while a defragmentation is recorded, its AdvanceLog beats even an action
//     of membership, the rollout or the pre-upgrade backup: the only row below membership
//     that overrides an action. Over another planner's Wait it wins only when etcd listed an
//     alarm, and then with whatever it proposes. Its own proposal is not independent of the
//     rows above: Busy is "they decided anything but None".
//   - auth: its bare None replaces membership's None, dropping Reason Reconciled and its
//     message; the winner is then auth. Auth and the peer switch wait for exactly None:
//     any Wait above (a member starting, a backup) holds them off.
//   - restore: its Wait also beats everything; its step went through the gate before the
//     arbitration, the others' go through it after.
var priority = []entry{
	{
		planner: PlannerRestore, when: "its step is not None; then no planner below is asked",
		own:   func(p Proposals) Step { return p.Restore },
		asked: func(decision, Proposals) bool { return true },
		takes: func(_ decision, own Step, _ Proposals) bool { return proposes(own) },
		final: true,
	},
	{
		planner: PlannerMembership, when: "always, when restore did not take over: its None is the base step",
		own:   func(p Proposals) Step { return p.Membership },
		asked: func(d decision, _ Proposals) bool { return d.by == "" },
		takes: func(decision, Step, Proposals) bool { return true },
	},
	{
		planner: PlannerRollout, when: "membership's step is None or has Reason MemberUnhealthy, and the rollout's is not None",
		own: func(p Proposals) Step { return p.Rollout },
		asked: func(d decision, _ Proposals) bool {
			return d.by == PlannerMembership && (d.step.Kind == None || d.step.Reason == v1alpha1.ReasonMemberUnhealthy)
		},
		takes: func(_ decision, own Step, _ Proposals) bool { return proposes(own) },
	},
	{
		planner: PlannerPreUpgradeBackup, when: "the rollout's step is not a Wait, and the backup imposes a wait",
		own:   func(p Proposals) Step { return p.PreUpgradeBackup },
		asked: func(d decision, _ Proposals) bool { return d.by == PlannerRollout && d.step.Kind != Wait },
		takes: func(_ decision, own Step, _ Proposals) bool { return proposes(own) },
	},
	{
		planner: PlannerMaintenance, when: "its AdvanceLog while a defragmentation is recorded, over anything; else over None, or over a Wait when etcd lists an alarm",
		own:   func(p Proposals) Step { return p.Maintenance },
		asked: func(d decision, p Proposals) bool { return !acts(d.step) || p.Defragmenting },
		takes: func(d decision, own Step, p Proposals) bool {
			if p.Defragmenting && own.Kind == AdvanceLog {
				return true
			}
			return !acts(d.step) && proposes(own) && (d.step.Kind != Wait || p.Alarms)
		},
	},
	{
		planner: PlannerAuth, when: "the step so far is None and the auth planner answered (its bare None too)",
		own:   func(p Proposals) Step { return p.Auth },
		asked: func(d decision, _ Proposals) bool { return d.step.Kind == None },
		takes: func(_ decision, _ Step, p Proposals) bool { return p.AuthAnswered },
	},
	{
		planner: PlannerPeerSwitch, when: "the step so far is None and the peer switch proposes a move",
		own:   func(p Proposals) Step { return p.PeerURL },
		asked: func(d decision, _ Proposals) bool { return d.step.Kind == None },
		takes: func(_ decision, own Step, _ Proposals) bool { return proposes(own) },
	},
	{
		// Volumes grow on a settled cluster: no membership change, rollout, maintenance,
		// authentication change or peer URL move is under way or waiting.
		planner: PlannerStorage, when: "the step so far is None and the storage planner proposes a step or a wait",
		own:   func(p Proposals) Step { return p.Storage },
		asked: func(d decision, _ Proposals) bool { return d.step.Kind == None },
		takes: func(_ decision, own Step, _ Proposals) bool { return proposes(own) },
	},
}

// proposes: s is a proposal (neither None nor the zero Step).
func proposes(s Step) bool { return s.Kind != None && s.Kind != "" }

// acts: s is neither None nor a Wait, as the controllers test it today.
func acts(s Step) bool { return s.Kind != None && s.Kind != Wait }

// Next returns the one step a pass takes, and the planner whose step it is (membership's,
// at least: its None is the base step), by the priority table. The gate comes after it.
func Next(p Proposals) (Step, string) {
	d, _ := decide(p, "")
	return d.step, d.by
}

// Above returns what the rows above planner decide from p (the step and the planner whose
// it is), and whether planner is asked at all. A controller asks a planner that does I/O or
// writes only when asked, and builds the maintenance planner's Busy from the step (Kind not
// None). Only the fields of the rows above planner are read. An unknown planner is not
// asked.
func Above(p Proposals, planner string) (Step, string, bool) {
	d, asked := decide(p, planner)
	return d.step, d.by, asked
}

// decide runs the table down to stop ("" for all of it), and says whether stop is asked.
func decide(p Proposals, stop string) (decision, bool) {
	var d decision
	for _, e := range priority {
		asked := e.asked(d, p)
		if e.planner == stop {
			return d, asked
		}
		if !asked {
			continue
		}
		if own := e.own(p); e.takes(d, own, p) {
			d = decision{step: own, by: e.planner}
			if e.final {
				break
			}
		}
	}
	if stop != "" {
		// Past a final row, or an unknown planner: not asked.
		return d, false
	}
	return d, true
}

// Rule is one row of the priority table, for tests and documentation.
type Rule struct {
	// Planner is the planner's name, as Next returns it.
	Planner string
	// TakesOver says when its proposal replaces what the rows above it decided.
	TakesOver string
}

// Priority returns the priority table, highest first.
func Priority() []Rule {
	out := make([]Rule, len(priority))
	for i, e := range priority {
		out[i] = Rule{Planner: e.planner, TakesOver: e.when}
	}
	return out
}

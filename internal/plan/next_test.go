package plan

import (
	"fmt"
	"slices"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Proposals of the fixture: one a planner could give, by what they are.
var (
	nReconciled   = Step{Kind: None, Reason: v1alpha1.ReasonReconciled, Message: "3 voting members, as spec.replicas asks"}
	nBare         = Step{Kind: None} // authplan.Decide's None
	wRestoring    = Waiting(v1alpha1.ReasonRestoring, "restoring")
	aRestorePod   = Step{Kind: DeletePod, Member: "etc-0", Reason: v1alpha1.ReasonRestoring}
	wUnhealthy    = Waiting(v1alpha1.ReasonMemberUnhealthy, "unhealthy members: etc-1")
	wStarting     = Waiting(v1alpha1.ReasonMemberStarting, "voting members not started yet: etc-2")
	aScaleOut     = Step{Kind: AddLearner, Member: "etc-3", Reason: v1alpha1.ReasonScaleOut}
	aRestart      = Step{Kind: DeletePod, Member: "etc-2", Reason: v1alpha1.ReasonRollingOut}
	wRollout      = Waiting(v1alpha1.ReasonRolloutWaiting, "etc-2 restarting")
	wBackup       = Waiting(v1alpha1.ReasonWaitingForBackup, "taking backup etc-before-3-6 first")
	aDefrag       = Step{Kind: Defragment, Member: "etc-1", ID: 0x101, Reason: v1alpha1.ReasonDefragmenting}
	aAdvance      = Step{Kind: AdvanceLog, Entries: 2, Reason: v1alpha1.ReasonDefragmenting}
	aDisarm       = Step{Kind: DisarmAlarm, Alarm: AlarmNoSpace, Reason: v1alpha1.ReasonDisarmingAlarm}
	wCorrupt      = Waiting(v1alpha1.ReasonCorruptAlarm, "etc-1 reports CORRUPT")
	aEnableAuth   = Step{Kind: EnableAuth, Reason: v1alpha1.ReasonEnablingAuth}
	wAuthNoCert   = Waiting(v1alpha1.ReasonEnablingAuth, "spec.auth needs the operator's client certificate")
	aPeerURL      = Step{Kind: UpdatePeerURL, Member: "etc-1", ID: 0x101, PeerURL: "https://etc-1.etc.ns.svc:2380", Reason: v1alpha1.ReasonSwitchingPeerTLS}
	wPeerURL      = Step{Kind: Wait, Member: "etc-1", Reason: v1alpha1.ReasonSwitchingPeerTLS, Message: "no port to move to"}
	aExpand       = Step{Kind: ExpandClaim, Member: "etc-0", Size: "2Gi", Reason: v1alpha1.ReasonExpandingVolumes}
	wExpand       = Step{Kind: Wait, Reason: v1alpha1.ReasonExpandingVolumes, Message: "etc-0 resizing"}
	aRemoveMember = Step{Kind: RemoveMember, Member: "etc-3", ID: 0x103, Reason: v1alpha1.ReasonScaleIn}
)

func TestNext(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Proposals
		want Step
		by   string
	}{
		// restore (controllers/etcdcluster_controller.go, reconcileNormal)
		{"restore's step beats everything", Proposals{Restore: aRestorePod, Membership: aScaleOut, Rollout: aRestart,
			Maintenance: aAdvance, Defragmenting: true, Auth: aEnableAuth, AuthAnswered: true, PeerURL: aPeerURL}, aRestorePod, PlannerRestore},
		{"restore's wait beats everything too", Proposals{Restore: wRestoring, Membership: nReconciled, Maintenance: aDisarm,
			Alarms: true, Auth: aEnableAuth, AuthAnswered: true, PeerURL: aPeerURL}, wRestoring, PlannerRestore},
		{"restore's None leaves the pass to membership", Proposals{Restore: nBare, Membership: aScaleOut}, aScaleOut, PlannerMembership},

		// membership
		{"membership's None is the base step", Proposals{Membership: nReconciled}, nReconciled, PlannerMembership},
		{"membership's wait stands with nothing below", Proposals{Membership: wStarting}, wStarting, PlannerMembership},

		// rollout (controllers/etcdcluster_membership.go, reconcileMembership)
		{"rollout over membership's None", Proposals{Membership: nReconciled, Rollout: aRestart}, aRestart, PlannerRollout},
		{"rollout over membership's Wait/MemberUnhealthy", Proposals{Membership: wUnhealthy, Rollout: aRestart}, aRestart, PlannerRollout},
		{"rollout's wait over membership's None", Proposals{Membership: nReconciled, Rollout: wRollout}, wRollout, PlannerRollout},
		{"rollout's None keeps membership's wait", Proposals{Membership: wUnhealthy, Rollout: nBare}, wUnhealthy, PlannerMembership},
		{"no rollout over another membership wait", Proposals{Membership: wStarting, Rollout: aRestart}, wStarting, PlannerMembership},
		{"no rollout over a membership action", Proposals{Membership: aScaleOut, Rollout: aRestart}, aScaleOut, PlannerMembership},
		{"rollout on Reason alone, whatever the Kind (kept as found)", Proposals{Membership: Step{Kind: DeletePod, Reason: v1alpha1.ReasonMemberUnhealthy},
			Rollout: aRestart}, aRestart, PlannerRollout},

		// pre-upgrade backup (controllers/etcdcluster_backup.go, beforeUpgrade)
		{"backup's wait over the rollout's action", Proposals{Membership: nReconciled, Rollout: aRestart, PreUpgradeBackup: wBackup}, wBackup, PlannerPreUpgradeBackup},
		{"no backup wait over the rollout's wait", Proposals{Membership: nReconciled, Rollout: wRollout, PreUpgradeBackup: wBackup}, wRollout, PlannerRollout},
		{"no backup wait without a rollout step", Proposals{Membership: nReconciled, PreUpgradeBackup: wBackup}, nReconciled, PlannerMembership},
		{"no backup wait over membership", Proposals{Membership: aScaleOut, Rollout: aRestart, PreUpgradeBackup: wBackup}, aScaleOut, PlannerMembership},
		{"the backup imposes nothing", Proposals{Membership: nReconciled, Rollout: aRestart, PreUpgradeBackup: nBare}, aRestart, PlannerRollout},

		// maintenance (controllers/etcdcluster_maintenance.go, maintenanceStep)
		{"maintenance over None", Proposals{Membership: nReconciled, Maintenance: aDefrag}, aDefrag, PlannerMaintenance},
		{"maintenance's None keeps None", Proposals{Membership: nReconciled, Maintenance: nBare}, nReconciled, PlannerMembership},
		{"the zero Step is no proposal", Proposals{Membership: nReconciled}, nReconciled, PlannerMembership},
		{"no maintenance over a wait without alarms", Proposals{Membership: wStarting, Maintenance: aDefrag}, wStarting, PlannerMembership},
		{"maintenance over a wait when etcd lists an alarm", Proposals{Membership: wStarting, Maintenance: aDisarm, Alarms: true}, aDisarm, PlannerMaintenance},
		{"maintenance's corrupt wait over a wait when etcd lists an alarm", Proposals{Membership: wUnhealthy, Maintenance: wCorrupt, Alarms: true}, wCorrupt, PlannerMaintenance},
		{"maintenance over the backup's wait when etcd lists an alarm", Proposals{Membership: nReconciled, Rollout: aRestart, PreUpgradeBackup: wBackup,
			Maintenance: aDisarm, Alarms: true}, aDisarm, PlannerMaintenance},
		{"no maintenance over an action, alarms or not", Proposals{Membership: aScaleOut, Maintenance: aDisarm, Alarms: true}, aScaleOut, PlannerMembership},
		{"AdvanceLog over an action while defragmenting (kept as found)", Proposals{Membership: aScaleOut, Maintenance: aAdvance, Defragmenting: true},
			aAdvance, PlannerMaintenance},
		{"AdvanceLog over the rollout while defragmenting", Proposals{Membership: nReconciled, Rollout: aRestart, Maintenance: aAdvance, Defragmenting: true},
			aAdvance, PlannerMaintenance},
		{"AdvanceLog over a wait while defragmenting, without alarms", Proposals{Membership: wStarting, Maintenance: aAdvance, Defragmenting: true},
			aAdvance, PlannerMaintenance},
		{"another step while defragmenting yields to an action", Proposals{Membership: aScaleOut, Maintenance: aDisarm, Defragmenting: true, Alarms: true},
			aScaleOut, PlannerMembership},
		{"AdvanceLog over an action only while defragmenting", Proposals{Membership: aScaleOut, Maintenance: aAdvance}, aScaleOut, PlannerMembership},

		// auth (controllers/etcdcluster_auth.go, authStep)
		{"auth over None", Proposals{Membership: nReconciled, Auth: aEnableAuth, AuthAnswered: true}, aEnableAuth, PlannerAuth},
		{"auth's wait for a certificate over None", Proposals{Membership: nReconciled, Auth: wAuthNoCert, AuthAnswered: true}, wAuthNoCert, PlannerAuth},
		{"auth's bare None replaces membership's None (kept as found)", Proposals{Membership: nReconciled, Auth: nBare, AuthAnswered: true}, nBare, PlannerAuth},
		{"auth not answering leaves None", Proposals{Membership: nReconciled, Auth: aEnableAuth}, nReconciled, PlannerMembership},
		{"no auth over a wait", Proposals{Membership: wStarting, Auth: aEnableAuth, AuthAnswered: true}, wStarting, PlannerMembership},
		{"no auth over an action", Proposals{Membership: aRemoveMember, Auth: aEnableAuth, AuthAnswered: true}, aRemoveMember, PlannerMembership},

		// peer switch (controllers/etcdcluster_peerswitch.go, peerStep)
		{"peer URL move over None", Proposals{Membership: nReconciled, PeerURL: aPeerURL}, aPeerURL, PlannerPeerSwitch},
		{"peer switch's wait over None", Proposals{Membership: nReconciled, PeerURL: wPeerURL}, wPeerURL, PlannerPeerSwitch},
		{"no peer URL move over a wait", Proposals{Membership: wUnhealthy, PeerURL: aPeerURL}, wUnhealthy, PlannerMembership},
		{"no peer URL move over an action", Proposals{Membership: aScaleOut, PeerURL: aPeerURL}, aScaleOut, PlannerMembership},
		{"peer URL move after auth's bare None", Proposals{Membership: nReconciled, Auth: nBare, AuthAnswered: true, PeerURL: aPeerURL}, aPeerURL, PlannerPeerSwitch},

		// storage (a grown spec.storage.size): only on a settled cluster
		{"volume expansion over None", Proposals{Membership: nReconciled, Storage: aExpand}, aExpand, PlannerStorage},
		{"volume expansion's wait over None", Proposals{Membership: nReconciled, Storage: wExpand}, wExpand, PlannerStorage},
		{"volume expansion after auth's bare None", Proposals{Membership: nReconciled, Auth: nBare, AuthAnswered: true, Storage: aExpand}, aExpand, PlannerStorage},
		{"no volume expansion over a wait", Proposals{Membership: wStarting, Storage: aExpand}, wStarting, PlannerMembership},
		{"no volume expansion over the peer switch", Proposals{Membership: nReconciled, PeerURL: wPeerURL, Storage: aExpand}, wPeerURL, PlannerPeerSwitch},
		{"no volume expansion over a rollout", Proposals{Membership: nReconciled, Rollout: aRestart, Storage: aExpand}, aRestart, PlannerRollout},

		// the order among simultaneous proposals
		{"membership before the rollout", Proposals{Membership: aScaleOut, Rollout: aRestart, Maintenance: aDefrag, Auth: aEnableAuth, AuthAnswered: true,
			PeerURL: aPeerURL}, aScaleOut, PlannerMembership},
		{"rollout before maintenance", Proposals{Membership: nReconciled, Rollout: aRestart, Maintenance: aDefrag, Auth: aEnableAuth, AuthAnswered: true,
			PeerURL: aPeerURL}, aRestart, PlannerRollout},
		{"maintenance before auth", Proposals{Membership: nReconciled, Maintenance: aDefrag, Auth: aEnableAuth, AuthAnswered: true, PeerURL: aPeerURL},
			aDefrag, PlannerMaintenance},
		{"auth before the peer switch", Proposals{Membership: nReconciled, Auth: aEnableAuth, AuthAnswered: true, PeerURL: aPeerURL}, aEnableAuth, PlannerAuth},
		{"a rollout wait holds off maintenance, auth and peer switch", Proposals{Membership: nReconciled, Rollout: wRollout, Maintenance: aDefrag,
			Auth: aEnableAuth, AuthAnswered: true, PeerURL: aPeerURL}, wRollout, PlannerRollout},
		{"a maintenance wait holds off auth and peer switch", Proposals{Membership: nReconciled, Maintenance: wCorrupt, Alarms: true, Auth: aEnableAuth,
			AuthAnswered: true, PeerURL: aPeerURL}, wCorrupt, PlannerMaintenance},
	} {
		got, by := Next(tt.p)
		if got != tt.want || by != tt.by {
			t.Errorf("%s: %s %+v, want %s %+v", tt.name, by, got, tt.by, tt.want)
		}
	}
}

// todaysChain is the decision of controllers/ before Next, transcribed line by line with
// each planner's answer replaced by its proposal: reconcileNormal (restore first), then
// reconcileMembership (rollout, beforeUpgrade), maintenanceStep, authStep and peerStep.
func todaysChain(p Proposals) (Step, string) {
	if p.Restore.Kind != None {
		return p.Restore, PlannerRestore
	}
	a, by := p.Membership, PlannerMembership
	if a.Kind == None || a.Reason == v1alpha1.ReasonMemberUnhealthy {
		if ra, rb := p.Rollout, PlannerRollout; ra.Kind != None {
			if ra.Kind != Wait && p.PreUpgradeBackup.Kind != None {
				ra, rb = p.PreUpgradeBackup, PlannerPreUpgradeBackup
			}
			a, by = ra, rb
		}
	}
	if !(a.Kind != None && a.Kind != Wait && !p.Defragmenting) {
		m := p.Maintenance
		switch {
		case p.Defragmenting && m.Kind == AdvanceLog:
			a, by = m, PlannerMaintenance
		case a.Kind != None && a.Kind != Wait:
		case m.Kind == None || (a.Kind == Wait && !p.Alarms):
		default:
			a, by = m, PlannerMaintenance
		}
	}
	if a.Kind == None && p.AuthAnswered {
		a, by = p.Auth, PlannerAuth
	}
	if a.Kind == None && p.PeerURL.Kind != None {
		a, by = p.PeerURL, PlannerPeerSwitch
	}
	if a.Kind == None && p.Storage.Kind != None && p.Storage.Kind != "" {
		a, by = p.Storage, PlannerStorage
	}
	return a, by
}

// TestNextIsTodaysChain: over every combination of a few proposals of each planner, Next
// picks the step today's controllers pick.
func TestNextIsTodaysChain(t *testing.T) {
	restores := []Step{nBare, wRestoring, aRestorePod}
	memberships := []Step{nReconciled, wUnhealthy, wStarting, aScaleOut}
	rollouts := []Step{nBare, wRollout, aRestart}
	backups := []Step{nBare, wBackup}
	maintenances := []Step{nBare, aDefrag, aAdvance, aDisarm, wCorrupt}
	auths := []Step{nBare, wAuthNoCert, aEnableAuth}
	peers := []Step{nBare, aPeerURL, wPeerURL}
	storages := []Step{nBare, aExpand, wExpand}
	n := 0
	for _, r := range restores {
		for _, m := range memberships {
			for _, ro := range rollouts {
				for _, b := range backups {
					for _, mt := range maintenances {
						for _, au := range auths {
							for _, pe := range peers {
								for _, st := range storages {
									for flags := range 8 {
										p := Proposals{Restore: r, Membership: m, Rollout: ro, PreUpgradeBackup: b, Maintenance: mt, Auth: au, PeerURL: pe, Storage: st,
											Defragmenting: flags&1 != 0, Alarms: flags&2 != 0, AuthAnswered: flags&4 != 0}
										got, by := Next(p)
										want, wantBy := todaysChain(p)
										if got != want || by != wantBy {
											t.Fatalf("%+v: Next %s %+v, today %s %+v", p, by, got, wantBy, want)
										}
										n++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d combinations", n)
}

func TestAbove(t *testing.T) {
	for _, tt := range []struct {
		name    string
		p       Proposals
		planner string
		want    Step
		by      string
		asked   bool
	}{
		{"membership is asked after restore's None", Proposals{Restore: nBare}, PlannerMembership, Step{}, "", true},
		{"nothing below restore's step is asked", Proposals{Restore: wRestoring}, PlannerMembership, wRestoring, PlannerRestore, false},
		{"nothing below restore's step is asked, maintenance neither", Proposals{Restore: wRestoring, Defragmenting: true}, PlannerMaintenance,
			wRestoring, PlannerRestore, false},
		{"the rollout is asked after membership's None", Proposals{Membership: nReconciled}, PlannerRollout, nReconciled, PlannerMembership, true},
		{"the rollout is asked after Wait/MemberUnhealthy", Proposals{Membership: wUnhealthy}, PlannerRollout, wUnhealthy, PlannerMembership, true},
		{"the rollout is not asked after another wait", Proposals{Membership: wStarting}, PlannerRollout, wStarting, PlannerMembership, false},
		{"the backup is asked for the rollout's action", Proposals{Membership: nReconciled, Rollout: aRestart}, PlannerPreUpgradeBackup, aRestart, PlannerRollout, true},
		{"the backup is not asked for the rollout's wait", Proposals{Membership: nReconciled, Rollout: wRollout}, PlannerPreUpgradeBackup, wRollout, PlannerRollout, false},
		{"the backup is not asked without a rollout step", Proposals{Membership: nReconciled}, PlannerPreUpgradeBackup, nReconciled, PlannerMembership, false},
		{"maintenance is asked, not busy, after None", Proposals{Membership: nReconciled}, PlannerMaintenance, nReconciled, PlannerMembership, true},
		{"maintenance is asked, busy, after a wait", Proposals{Membership: nReconciled, Rollout: aRestart, PreUpgradeBackup: wBackup}, PlannerMaintenance,
			wBackup, PlannerPreUpgradeBackup, true},
		{"maintenance is not asked after an action", Proposals{Membership: aScaleOut}, PlannerMaintenance, aScaleOut, PlannerMembership, false},
		{"maintenance is asked after an action while defragmenting", Proposals{Membership: aScaleOut, Defragmenting: true}, PlannerMaintenance,
			aScaleOut, PlannerMembership, true},
		{"auth is asked after None", Proposals{Membership: nReconciled, Maintenance: nBare}, PlannerAuth, nReconciled, PlannerMembership, true},
		{"auth is not asked after maintenance's step", Proposals{Membership: nReconciled, Maintenance: aDefrag}, PlannerAuth, aDefrag, PlannerMaintenance, false},
		{"the peer switch is asked after auth's bare None", Proposals{Membership: nReconciled, Auth: nBare, AuthAnswered: true}, PlannerPeerSwitch,
			nBare, PlannerAuth, true},
		{"the peer switch is not asked after auth's step", Proposals{Membership: nReconciled, Auth: aEnableAuth, AuthAnswered: true}, PlannerPeerSwitch,
			aEnableAuth, PlannerAuth, false},
		{"an unknown planner is not asked", Proposals{Membership: nReconciled}, "nobody", nReconciled, PlannerMembership, false},
	} {
		got, by, asked := Above(tt.p, tt.planner)
		if got != tt.want || by != tt.by || asked != tt.asked {
			t.Errorf("%s: %s %+v asked %v, want %s %+v asked %v", tt.name, by, got, asked, tt.by, tt.want, tt.asked)
		}
	}
}

// TestAboveIsNextDownToThePlanner: what the rows above a planner decide, with the planners
// below it proposing nothing, is Next's.
func TestAboveIsNextDownToThePlanner(t *testing.T) {
	p := Proposals{Membership: nReconciled, Rollout: aRestart, PreUpgradeBackup: wBackup}
	got, by, _ := Above(p, PlannerMaintenance)
	want, wantBy := Next(p)
	if got != want || by != wantBy {
		t.Fatalf("Above %s %+v, Next %s %+v", by, got, wantBy, want)
	}
}

func TestPriority(t *testing.T) {
	var order []string
	for _, r := range Priority() {
		if r.TakesOver == "" {
			t.Errorf("%s: no rule", r.Planner)
		}
		order = append(order, r.Planner)
	}
	want := []string{PlannerRestore, PlannerMembership, PlannerRollout, PlannerPreUpgradeBackup, PlannerMaintenance, PlannerAuth, PlannerPeerSwitch, PlannerStorage}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	// Every proposal field is some row's.
	for i, name := range want {
		s := Step{Kind: Wait, Reason: fmt.Sprintf("r%d", i)}
		var p Proposals
		switch name {
		case PlannerRestore:
			p.Restore = s
		case PlannerMembership:
			p.Membership = s
		case PlannerRollout:
			p.Rollout = s
		case PlannerPreUpgradeBackup:
			p.PreUpgradeBackup = s
		case PlannerMaintenance:
			p.Maintenance = s
		case PlannerAuth:
			p.Auth = s
		case PlannerPeerSwitch:
			p.PeerURL = s
		case PlannerStorage:
			p.Storage = s
		}
		if got := priority[i].own(p); got != s {
			t.Errorf("row %s reads %+v, want its own proposal", name, got)
		}
	}
}

package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// The fixture: a StatefulSet "etc" whose member of ordinal k has ID mdID(k), a claim
// "uid-k", and a running, ready pod on a ready node.

var mdT0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

const mdTimeout = 5 * time.Minute

func mdID(k int32) uint64          { return 0x100 + uint64(k) }
func mdName(k int32) string        { return fmt.Sprintf("etc-%d", k) }
func mdPeerURL(name string) string { return "http://" + name + ".etc.ns.svc:2380" }

type mdFix struct {
	desired, sts   int32
	members        []etcd.Member
	status         map[uint64]etcd.MemberStatus
	leader         uint64
	pods           map[int32]*podInfo
	intent         *membershipIntent
	splitBrain     bool
	notBootstrap   bool
	noEtcd         bool
	keepPVCOnScale bool
	founders       int32
	firstFormed    bool // formed now, not in a pass before
}

// cluster is n started, healthy voting members at ordinals 0..n-1, led by ordinal 0, with
// spec.replicas n.
func cluster3(n int32) *mdFix {
	f := &mdFix{desired: n, sts: n, status: map[uint64]etcd.MemberStatus{}, leader: mdID(0), pods: map[int32]*podInfo{}}
	for k := int32(0); k < n; k++ {
		f.addMember(k, false, true)
		f.addPod(k)
	}
	return f
}

func (f *mdFix) addMember(k int32, learner, started bool) {
	m := etcd.Member{ID: mdID(k), PeerURLs: []string{mdPeerURL(mdName(k))}, IsLearner: learner}
	if started {
		m.Name = mdName(k)
		m.ClientURLs = []string{"http://" + mdName(k) + ".etc.ns.svc:2379"}
		f.status[m.ID] = etcd.MemberStatus{ID: m.ID, RaftIndex: 1000, IsLearner: learner}
	}
	f.members = append(f.members, m)
}

func (f *mdFix) addPod(k int32) {
	f.pods[k] = &podInfo{Name: mdName(k), Ordinal: k, Exists: true, Running: true, Ready: true, NodeReady: true,
		PVCExists: true, PVCUID: fmt.Sprintf("uid-%d", k)}
}

func (f *mdFix) want(d int32) *mdFix        { f.desired = d; return f }
func (f *mdFix) stsReplicas(n int32) *mdFix { f.sts = n; return f }
func (f *mdFix) keepPVC() *mdFix            { f.keepPVCOnScale = true; return f }
func (f *mdFix) leaderAt(k int32) *mdFix    { f.leader = mdID(k); return f }
func (f *mdFix) withIntent(in membershipIntent) *mdFix {
	if in.PeerURL == "" {
		in.PeerURL = mdPeerURL(in.Member)
	}
	in.StartedAt = mdT0.Add(-time.Minute)
	f.intent = &in
	return f
}

// down: member k does not answer.
func (f *mdFix) down(k int32) *mdFix { delete(f.status, mdID(k)); return f }

// pod edits the pod info of ordinal k (created when missing, as a claim-only entry).
func (f *mdFix) pod(k int32, edit func(p *podInfo)) *mdFix {
	p, ok := f.pods[k]
	if !ok {
		p = &podInfo{Name: mdName(k), Ordinal: k, NodeReady: true}
		f.pods[k] = p
	}
	edit(p)
	return f
}

func (f *mdFix) noPod(k int32) *mdFix {
	return f.pod(k, func(p *podInfo) { p.Exists, p.Running, p.Ready = false, false, false })
}

func (f *mdFix) noClaim(k int32) *mdFix {
	return f.pod(k, func(p *podInfo) { p.PVCExists, p.PVCUID = false, "" })
}

func (f *mdFix) gone(k int32) *mdFix { delete(f.pods, k); return f }

// ephemeral: emptyDir storage; the pod plays the claim (its UID is the claim's).
func (f *mdFix) ephemeral() *mdFix {
	for _, p := range f.pods {
		p.Ephemeral, p.PVCExists, p.PVCDeleting = true, p.Exists, p.Deleting
	}
	return f
}

func (f *mdFix) removeMember(k int32) *mdFix {
	for i, m := range f.members {
		if m.ID == mdID(k) {
			f.members = append(f.members[:i], f.members[i+1:]...)
			break
		}
	}
	delete(f.status, mdID(k))
	return f
}

// learner adds ordinal k as a learner; started learners trail the leader by lag.
func (f *mdFix) learner(k int32, started bool, lag uint64) *mdFix {
	f.addMember(k, true, started)
	if started {
		f.status[mdID(k)] = etcd.MemberStatus{ID: mdID(k), RaftIndex: 1000 - lag, IsLearner: true}
	}
	return f
}

func (f *mdFix) lagOf(k int32, lag uint64) *mdFix {
	st := f.status[mdID(k)]
	st.RaftIndex = 1000 - lag
	f.status[mdID(k)] = st
	return f
}

func (f *mdFix) obs() Observation {
	o := Observation{
		Desired: f.desired, StatefulSet: "etc", StsReplicas: f.sts, SplitBrain: f.splitBrain, Bootstrapped: !f.notBootstrap,
		Intent: f.intent, PeerURL: mdPeerURL, LearnerMaxLag: 100, LostMemberTimeout: mdTimeout,
		DeletePVCOnScaleIn: !f.keepPVCOnScale, Now: mdT0, Founders: f.founders, FormedBefore: !f.notBootstrap && !f.firstFormed,
	}
	ords := make([]int32, 0, len(f.pods))
	for k := range f.pods {
		ords = append(ords, k)
	}
	sort.Slice(ords, func(i, j int) bool { return ords[i] < ords[j] })
	for _, k := range ords {
		o.Pods = append(o.Pods, *f.pods[k])
	}
	if f.noEtcd {
		return o
	}
	obs := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7, Members: append([]etcd.Member(nil), f.members...)},
		Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for _, m := range f.members {
		st, ok := f.status[m.ID]
		if !ok {
			obs.StatusErr[m.ID] = errors.New("connection refused")
			continue
		}
		st.Leader = f.leader
		obs.Status[m.ID] = st
	}
	o.Etcd = obs
	return o
}

func TestDecideMembership(t *testing.T) {
	ago := func(d time.Duration) time.Time { return mdT0.Add(-d) }
	nodeLost := func(d time.Duration) func(*podInfo) {
		return func(p *podInfo) { p.NodeReady, p.NodeNotReadySince, p.Ready = false, ago(d), false }
	}
	crashLoop := func(d time.Duration) func(*podInfo) {
		return func(p *podInfo) {
			p.CrashLooping, p.FailingSince, p.Ready, p.Running, p.RestartCount = true, ago(d), false, false, 9
		}
	}
	fresh := func(p *podInfo) { p.PVCFresh = true }
	addIntent := func(k int32) membershipIntent {
		return membershipIntent{Op: intentAdd, Member: mdName(k), Reason: reasonScaleOut}
	}
	removeIntent := func(k int32) membershipIntent {
		return membershipIntent{Op: intentRemove, Member: mdName(k), ID: mdID(k), Reason: reasonScaleIn}
	}
	replaceIntent := func(k int32) membershipIntent {
		return membershipIntent{Op: intentReplace, Member: mdName(k), ID: mdID(k), ClaimUID: fmt.Sprintf("uid-%d", k), Reason: reasonReplaceMember}
	}
	// replaced: ordinal 1 of three was removed and re-added as a learner (ID 0x901).
	replaced := func(started bool, lag uint64) *mdFix {
		f := cluster3(3).removeMember(1).withIntent(replaceIntent(1))
		f.members = append(f.members, etcd.Member{ID: 0x901, PeerURLs: []string{mdPeerURL("etc-1")}, IsLearner: true})
		if started {
			f.members[len(f.members)-1].Name = "etc-1"
			f.status[0x901] = etcd.MemberStatus{ID: 0x901, RaftIndex: 1000 - lag, IsLearner: true}
		}
		return f
	}

	tests := []struct {
		name   string
		fix    *mdFix
		kind   actionKind
		member string
		id     uint64
		reason string
		check  func(t *testing.T, a membershipAction)
	}{
		// Safety rails: no action without a member list, a leader, a quorum and one cluster ID.
		{name: "members disagree on the cluster ID", fix: func() *mdFix { f := cluster3(3); f.splitBrain = true; return f }(),
			kind: actWait, reason: reasonSplitBrain},
		// First formation (path 4 of issue 9): the founders recorded at the first render, and
		// only they, whatever spec.replicas says meanwhile.
		{name: "formation: the StatefulSet grows to the founders", fix: func() *mdFix {
			f := cluster3(3).want(5).stsReplicas(1)
			f.noEtcd, f.notBootstrap, f.founders = true, true, 3
			return f
		}(), kind: actScaleStatefulSet, reason: reasonBootstrapping, check: wantReplicas(3)},
		{name: "formation: a resize waits for the founders to form", fix: func() *mdFix {
			f := cluster3(3).want(5)
			f.noEtcd, f.notBootstrap, f.founders = true, true, 3
			return f
		}(), kind: actWait, reason: reasonBootstrapping},
		{name: "formation: shrinking waits too", fix: func() *mdFix {
			f := cluster3(3).want(1)
			f.notBootstrap, f.founders = true, 3
			f.leader = 0
			return f
		}(), kind: actWait, reason: reasonBootstrapping},
		{name: "formation: the first pass that sees the cluster formed, founders still starting", fix: func() *mdFix {
			f := cluster3(3).down(1).down(2)
			f.firstFormed = true
			return f
		}(), kind: actWait, reason: reasonBootstrapping},
		{name: "no member answered and the cluster never formed", fix: func() *mdFix { f := cluster3(3); f.noEtcd, f.notBootstrap = true, true; return f }(),
			kind: actWait, reason: reasonBootstrapping},
		{name: "no member answered after the cluster formed", fix: func() *mdFix { f := cluster3(3); f.noEtcd = true; return f }(),
			kind: actWait, reason: reasonEtcdUnreachable},
		{name: "first members started but no leader yet", fix: func() *mdFix { f := cluster3(3); f.leader, f.notBootstrap = 0, true; return f }(),
			kind: actWait, reason: reasonBootstrapping},
		{name: "no leader after the cluster formed", fix: func() *mdFix { f := cluster3(3); f.leader = 0; return f }(),
			kind: actWait, reason: reasonNoLeader},
		{name: "two of three members down", fix: cluster3(3).down(1).down(2), kind: actWait, reason: reasonQuorumLost,
			check: wantMessage("restore")},
		{name: "two of three members lost their data", fix: cluster3(3).pod(1, fresh).pod(2, fresh), kind: actWait, reason: reasonQuorumLost},
		{name: "the only member lost its data", fix: cluster3(1).pod(0, fresh), kind: actWait, reason: reasonQuorumLost},
		{name: "quorum lost with a recorded intent: the intent waits", fix: cluster3(3).down(1).down(2).withIntent(removeIntent(2)),
			kind: actWait, reason: reasonQuorumLost},
		{name: "a member that is no pod of the StatefulSet",
			fix: func() *mdFix {
				f := cluster3(3)
				f.members = append(f.members, etcd.Member{ID: 0x999, Name: "other-0", PeerURLs: []string{"http://other:2380"}})
				return f
			}(), kind: actWait, reason: reasonUnknownMember},
		{name: "an unstarted member with a foreign peer URL",
			fix: func() *mdFix {
				f := cluster3(3)
				f.members = append(f.members, etcd.Member{ID: 0x999, PeerURLs: []string{"http://elsewhere:2380"}, IsLearner: true})
				return f
			}(), kind: actWait, reason: reasonUnknownMember},

		// Settled and bootstrap.
		{name: "three healthy members as asked", fix: cluster3(3), kind: actNone, reason: reasonReconciled},
		{name: "bootstrap: a voting member has not started, its pod is starting",
			fix: func() *mdFix {
				f := cluster3(2).want(3).stsReplicas(3)
				f.addMember(2, false, false)
				return f.pod(2, func(p *podInfo) { p.Exists, p.PVCExists, p.PVCUID = true, true, "uid-2" })
			}(), kind: actWait, reason: reasonMemberStarting},
		{name: "unstarted voting member whose pod crash loops past the timeout is replaced",
			fix: func() *mdFix {
				f := cluster3(2).want(3).stsReplicas(3)
				f.addMember(2, false, false)
				return f.pod(2, func(p *podInfo) { p.Exists, p.PVCExists, p.PVCUID = true, true, "uid-2" }).pod(2, crashLoop(6*time.Minute))
			}(), kind: actRecordIntent, member: "etc-2", id: mdID(2), reason: reasonReplaceMember},

		// Scale out, step by step.
		{name: "scale out 1 to 3: record intent to add ordinal 1", fix: cluster3(1).want(3), kind: actRecordIntent, member: "etc-1", reason: reasonScaleOut,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent == nil || a.Intent.Op != intentAdd || a.Intent.PeerURL != mdPeerURL("etc-1") || a.Intent.ClaimUID != "" || !a.Intent.StartedAt.Equal(mdT0) {
					t.Errorf("intent = %+v", a.Intent)
				}
			}},
		{name: "scale out: intent recorded, no learner yet", fix: cluster3(1).want(3).withIntent(addIntent(1)),
			kind: actAddLearner, member: "etc-1", reason: reasonScaleOut,
			check: func(t *testing.T, a membershipAction) {
				if a.PeerURL != mdPeerURL("etc-1") {
					t.Errorf("peer URL %q", a.PeerURL)
				}
			}},
		{name: "scale out: learner added, StatefulSet not grown", fix: cluster3(1).want(3).withIntent(addIntent(1)).learner(1, false, 0),
			kind: actScaleStatefulSet, member: "etc-1", reason: reasonScaleOut, check: wantReplicas(2)},
		{name: "scale out: StatefulSet grown, pod not created yet", fix: cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, false, 0),
			kind: actWait, reason: reasonWaitingForPod},
		{name: "scale out: pod created, learner not started",
			fix: cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, false, 0).pod(1, func(p *podInfo) {
				*p = podInfo{Name: "etc-1", Ordinal: 1, Exists: true, NodeReady: true, PVCExists: true, PVCUID: "new"}
			}),
			kind: actWait, reason: reasonLearnerStarting},
		{name: "scale out: learner started, far behind the leader",
			fix: func() *mdFix {
				f := cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, true, 900)
				f.addPod(1)
				return f
			}(),
			kind: actWait, reason: reasonLearnerCatchingUp, check: wantMessage("900 raft entries behind")},
		{name: "scale out: learner started but does not answer",
			fix: func() *mdFix {
				f := cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, true, 0).down(1)
				f.addPod(1)
				return f
			}(),
			kind: actWait, reason: reasonLearnerCatchingUp},
		{name: "scale out: learner caught up", fix: func() *mdFix {
			f := cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, true, 50)
			f.addPod(1)
			return f
		}(),
			kind: actPromoteLearner, member: "etc-1", id: mdID(1), reason: reasonScaleOut},
		{name: "scale out: learner caught up, its claim not yet recorded as its own",
			fix: func() *mdFix {
				f := cluster3(1).want(3).stsReplicas(2).withIntent(addIntent(1)).learner(1, true, 0)
				f.addPod(1)
				return f.pod(1, fresh)
			}(),
			kind: actWait, reason: reasonLearnerStarting, check: wantMessage("recorded")},
		{name: "scale out: learner promoted, intent still recorded", fix: cluster3(2).want(3).withIntent(addIntent(1)),
			kind: actClearIntent, member: "etc-1", reason: reasonScaleOut},
		{name: "scale out: next member after the first is done", fix: cluster3(2).want(3), kind: actRecordIntent, member: "etc-2", reason: reasonScaleOut},
		{name: "scale out onto a claim left by a removed member (delete policy)",
			fix:  cluster3(1).want(3).pod(1, func(p *podInfo) { p.PVCExists, p.PVCUID = true, "old-1" }),
			kind: actRecordIntent, member: "etc-1", reason: reasonScaleOut,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.ClaimUID != "old-1" {
					t.Errorf("claim UID %q, want old-1", a.Intent.ClaimUID)
				}
			}},
		{name: "scale out: learner added, stale claim still there",
			fix:  cluster3(1).want(3).withIntent(membershipIntent{Op: intentAdd, Member: "etc-1", ClaimUID: "old-1"}).learner(1, false, 0).pod(1, func(p *podInfo) { p.PVCExists, p.PVCUID = true, "old-1" }),
			kind: actDeletePVC, member: "etc-1", reason: reasonScaleOut},
		{name: "scale out onto a claim the retention policy keeps", fix: cluster3(1).want(3).keepPVC().pod(1, func(p *podInfo) { p.PVCExists, p.PVCUID = true, "old-1" }),
			kind: actWait, reason: reasonStaleVolume},
		{name: "scale out abandoned: spec shrank before the learner was added", fix: cluster3(1).want(1).withIntent(addIntent(1)),
			kind: actClearIntent, member: "etc-1", reason: reasonScaleOut},
		{name: "scale out abandoned: spec shrank after the learner was added", fix: cluster3(1).want(1).withIntent(addIntent(1)).learner(1, false, 0),
			kind: actRemoveMember, member: "etc-1", id: mdID(1), reason: reasonScaleOut},
		{name: "scale out: another learner exists that this intent did not add", fix: cluster3(2).want(4).withIntent(addIntent(3)).learner(2, false, 0),
			kind: actClearIntent, member: "etc-3", reason: reasonScaleOut},
		{name: "learner with no intent is adopted", fix: cluster3(2).want(3).learner(2, false, 0), kind: actRecordIntent, member: "etc-2", reason: reasonAdoptLearner,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.Op != intentAdd || a.Intent.ID != 0 {
					t.Errorf("intent = %+v", a.Intent)
				}
			}},
		{name: "adopted learner beyond spec.replicas is removed", fix: cluster3(2).want(2).learner(2, false, 0).withIntent(membershipIntent{Op: intentAdd, Member: "etc-2", Reason: reasonAdoptLearner}),
			kind: actRemoveMember, member: "etc-2", id: mdID(2), reason: reasonAdoptLearner},
		{name: "learner whose pod crash loops past the timeout gets a fresh volume",
			fix: func() *mdFix {
				f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
				f.addPod(2)
				return f.pod(2, crashLoop(6*time.Minute))
			}(),
			kind: actDeletePVC, member: "etc-2", reason: reasonScaleOut},
		{name: "learner on a dead node, claim already deleting: force-delete the pod",
			fix: func() *mdFix {
				f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
				f.addPod(2)
				return f.pod(2, nodeLost(6*time.Minute)).pod(2, func(p *podInfo) { p.PVCDeleting = true })
			}(),
			kind: actDeletePod, member: "etc-2", reason: reasonScaleOut, check: wantForce(true)},
		{name: "learner pod exists without a claim and is not running",
			fix: func() *mdFix {
				f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
				f.addPod(2)
				return f.noClaim(2).pod(2, func(p *podInfo) { p.Running, p.Ready = false, false })
			}(),
			kind: actDeletePod, member: "etc-2", reason: reasonScaleOut, check: wantForce(false)},

		// Scale in.
		{name: "scale in 3 to 1: highest ordinal first", fix: cluster3(3).want(1), kind: actRecordIntent, member: "etc-2", id: mdID(2), reason: reasonScaleIn,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.Op != intentRemove || a.Intent.ID != mdID(2) {
					t.Errorf("intent = %+v", a.Intent)
				}
			}},
		{name: "scale in: an unhealthy member goes first, even a low ordinal", fix: cluster3(3).want(2).down(0).leaderAt(1),
			kind: actRecordIntent, member: "etc-0", id: mdID(0), reason: reasonScaleIn},
		{name: "scale in: the member to remove leads", fix: cluster3(3).want(2).leaderAt(2).lagOf(0, 5).lagOf(1, 1),
			kind: actMoveLeader, member: "etc-2", id: mdID(2), reason: reasonScaleIn,
			check: func(t *testing.T, a membershipAction) {
				if a.Target != mdID(1) {
					t.Errorf("target %x, want the most caught-up member %x", a.Target, mdID(1))
				}
			}},
		{name: "scale in: intent recorded, member still present", fix: cluster3(3).want(2).withIntent(removeIntent(2)),
			kind: actRemoveMember, member: "etc-2", id: mdID(2), reason: reasonScaleIn},
		{name: "scale in: intent recorded, member became leader meanwhile", fix: cluster3(3).want(2).withIntent(removeIntent(2)).leaderAt(2),
			kind: actMoveLeader, member: "etc-2", id: mdID(2), reason: reasonScaleIn},
		{name: "scale in: intent recorded, removal would now cost quorum", fix: cluster3(3).want(2).withIntent(removeIntent(2)).down(0).leaderAt(1),
			kind: actWait, reason: reasonQuorumAtRisk},
		{name: "scale in: spec rose again before the removal", fix: cluster3(3).want(3).withIntent(removeIntent(2)),
			kind: actClearIntent, member: "etc-2", id: mdID(2), reason: reasonScaleIn},
		{name: "scale in: member removed, StatefulSet not shrunk", fix: cluster3(3).want(2).withIntent(removeIntent(2)).removeMember(2),
			kind: actScaleStatefulSet, member: "etc-2", reason: reasonScaleIn, check: wantReplicas(2)},
		{name: "scale in: StatefulSet shrunk, claim left (delete policy)", fix: cluster3(3).want(2).stsReplicas(2).withIntent(removeIntent(2)).removeMember(2).noPod(2),
			kind: actDeletePVC, member: "etc-2", reason: reasonScaleIn},
		{name: "scale in: StatefulSet shrunk, claim kept (keep policy)", fix: cluster3(3).want(2).stsReplicas(2).keepPVC().withIntent(removeIntent(2)).removeMember(2).noPod(2),
			kind: actClearIntent, member: "etc-2", reason: reasonScaleIn},
		{name: "scale in: claim deleting", fix: cluster3(3).want(2).stsReplicas(2).withIntent(removeIntent(2)).removeMember(2).noPod(2).pod(2, func(p *podInfo) { p.PVCDeleting = true }),
			kind: actClearIntent, member: "etc-2", reason: reasonScaleIn},
		{name: "scale in: all done, intent cleared", fix: cluster3(2).want(2), kind: actNone, reason: reasonReconciled},
		{name: "scale in of a middle ordinal: member gone, StatefulSet stays", fix: cluster3(3).want(2).withIntent(removeIntent(0)).removeMember(0).leaderAt(1).pod(0, crashLoop(time.Minute)),
			kind: actClearIntent, member: "etc-0", reason: reasonScaleIn},
		{name: "after a middle removal: the pod without a member is re-added on a fresh volume",
			fix:  cluster3(3).want(2).removeMember(0).leaderAt(1).pod(0, crashLoop(time.Minute)),
			kind: actRecordIntent, member: "etc-0", reason: reasonReaddPod,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.ClaimUID != "uid-0" {
					t.Errorf("claim UID %q, want uid-0 (the removed member's claim must not be reused)", a.Intent.ClaimUID)
				}
			}},
		{name: "a pod serving but not a member (may have bootstrapped alone)", fix: cluster3(3).removeMember(2),
			kind: actWait, reason: reasonPodNotMember},
		// Found on real nodes: five members, two on a node that stopped. The first was removed
		// for its replacement; its pod still showed the ready container its kubelet last
		// reported, and the cluster stood Stalled (PodNotMember) with four members. The
		// observation clears Ready on a node that is not ready; the stamp on the volume shows
		// the data is the removed member's.
		{name: "a removed member's pod on a lost node, its volume stamped by that member",
			fix: cluster3(3).removeMember(2).pod(2, func(p *podInfo) {
				p.NodeReady, p.NodeNotReadySince, p.Ready, p.DataStamp = false, ago(time.Minute), false, etcd.FormatID(mdID(2))
			}),
			kind: actRecordIntent, member: "etc-2", reason: reasonReaddPod,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.Op != intentAdd || a.Intent.ClaimUID != "uid-2" {
					t.Errorf("intent = %+v, want an add that does not start on claim uid-2", a.Intent)
				}
			}},
		{name: "a pod on a lost node that is not a member and whose volume no member stamped",
			fix:  cluster3(3).removeMember(2).pod(2, func(p *podInfo) { p.NodeReady, p.NodeNotReadySince, p.Ready = false, ago(time.Minute), false }),
			kind: actWait, reason: reasonPodNotMember},

		// Replace a lost member.
		{name: "a member restarted on a re-created claim", fix: cluster3(3).pod(1, fresh), kind: actRecordIntent, member: "etc-1", id: mdID(1), reason: reasonReplaceMember,
			check: func(t *testing.T, a membershipAction) {
				if a.Intent.Op != intentReplace || a.Intent.ClaimUID != "uid-1" {
					t.Errorf("intent = %+v", a.Intent)
				}
			}},
		{name: "a started member whose claim and pod are gone", fix: cluster3(3).down(1).gone(1), kind: actRecordIntent, member: "etc-1", id: mdID(1), reason: reasonReplaceMember},
		{name: "a member whose claim is being deleted", fix: cluster3(3).pod(1, func(p *podInfo) { p.PVCDeleting = true }),
			kind: actRecordIntent, member: "etc-1", id: mdID(1), reason: reasonReplaceMember},
		{name: "a member on a node NotReady past the timeout", fix: cluster3(3).down(2).pod(2, nodeLost(6*time.Minute)),
			kind: actRecordIntent, member: "etc-2", id: mdID(2), reason: reasonReplaceMember},
		{name: "a member on a node NotReady within the timeout", fix: cluster3(3).down(2).pod(2, nodeLost(2*time.Minute)),
			kind: actWait, reason: reasonMemberUnhealthy,
			check: func(t *testing.T, a membershipAction) {
				if a.RequeueAfter != 3*time.Minute {
					t.Errorf("requeue after %s, want 3m", a.RequeueAfter)
				}
			}},
		{name: "a member on a NotReady node that still answers is kept", fix: cluster3(3).pod(2, nodeLost(time.Hour)), kind: actNone, reason: reasonReconciled},
		{name: "a member crash looping past the timeout", fix: cluster3(3).down(1).pod(1, crashLoop(6*time.Minute)),
			kind: actRecordIntent, member: "etc-1", id: mdID(1), reason: reasonReplaceMember},
		{name: "the leader lost its data: leadership moves first", fix: cluster3(3).pod(0, fresh),
			kind: actMoveLeader, member: "etc-0", id: mdID(0), reason: reasonReplaceMember},
		{name: "replace: intent recorded, old member present", fix: cluster3(3).down(1).pod(1, crashLoop(6*time.Minute)).withIntent(replaceIntent(1)),
			kind: actRemoveMember, member: "etc-1", id: mdID(1), reason: reasonReplaceMember},
		{name: "replace: old member recovered before its removal", fix: cluster3(3).withIntent(replaceIntent(1)),
			kind: actClearIntent, member: "etc-1", id: mdID(1), reason: reasonReplaceMember},
		{name: "replace: removal would cost quorum now", fix: cluster3(3).down(1).pod(1, crashLoop(6*time.Minute)).withIntent(replaceIntent(1)).down(2).pod(2, crashLoop(time.Second)),
			kind: actWait, reason: reasonQuorumLost},
		{name: "replace of 5: removal would cost quorum now", fix: cluster3(5).down(1).pod(1, crashLoop(6*time.Minute)).pod(1, fresh).withIntent(replaceIntent(1)).down(2).down(3),
			kind: actWait, reason: reasonQuorumLost},
		{name: "replace: old member removed, no learner yet", fix: cluster3(3).removeMember(1).withIntent(replaceIntent(1)),
			kind: actAddLearner, member: "etc-1", reason: reasonReplaceMember},
		{name: "replace: learner added, old claim still in place", fix: replaced(false, 0), kind: actDeletePVC, member: "etc-1", reason: reasonReplaceMember},
		// Bounded waits (path 5 of issue 9): a learner whose pod never starts is removed past
		// spec.membership.replaceAfter, and the change starts over.
		{name: "learner whose pod was never created, within the deadline", fix: cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3).noPod(2),
			kind: actWait, reason: reasonWaitingForPod},
		{name: "learner whose pod was never created, past the deadline", fix: func() *mdFix {
			f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3).noPod(2)
			f.intent.StartedAt = mdT0.Add(-6 * time.Minute)
			return f
		}(), kind: actRemoveMember, member: "etc-2", id: mdID(2), reason: reasonLearnerNeverStarted},
		{name: "learner whose pod cannot pull its image, past the deadline", fix: func() *mdFix {
			f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
			f.addPod(2)
			f.pod(2, func(p *podInfo) { p.Running, p.Ready, p.Problem = false, false, "ImagePullBackOff: not found" })
			f.intent.StartedAt = mdT0.Add(-6 * time.Minute)
			return f
		}(), kind: actRemoveMember, member: "etc-2", id: mdID(2), reason: reasonLearnerNeverStarted,
			check: func(t *testing.T, a membershipAction) {
				if !strings.Contains(a.Message, "ImagePullBackOff") {
					t.Errorf("the message does not say why: %s", a.Message)
				}
			}},
		// Found on real nodes: the change passed its deadline while it replaced the member
		// (slow passes with two members on a lost node); the learner's pod, re-created on a
		// fresh volume a second before, was removed as "never started".
		{name: "learner whose pod was re-created just now, the change older than the deadline", fix: func() *mdFix {
			f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
			f.addPod(2)
			f.pod(2, func(p *podInfo) { p.Running, p.Ready, p.CreatedAt = false, false, mdT0.Add(-time.Second) })
			f.intent.StartedAt = mdT0.Add(-6 * time.Minute)
			return f
		}(), kind: actWait, reason: reasonLearnerStarting},
		{name: "the learner that never started is gone: the change starts over", fix: func() *mdFix {
			f := cluster3(2).want(3).withIntent(addIntent(2)).stsReplicas(3).noPod(2)
			f.intent.StartedAt = mdT0.Add(-6 * time.Minute)
			return f
		}(), kind: actClearIntent, member: "etc-2", reason: reasonLearnerNeverStarted},
		// A member whose pod is not re-created (admission, quota): a new member would need a
		// pod too, so it is not replaced; past replaceAfter the wait degrades and says why.
		{name: "member without a pod, within replaceAfter", fix: cluster3(3).down(2).noPod(2).pod(2, func(p *podInfo) { p.MissingSince = mdT0.Add(-time.Minute) }),
			kind: actWait, reason: reasonMemberUnhealthy, check: func(t *testing.T, a membershipAction) {
				if a.RequeueAfter != 4*time.Minute {
					t.Errorf("requeue after %s, want 4m (when replaceAfter runs out)", a.RequeueAfter)
				}
			}},
		{name: "member without a pod past replaceAfter", fix: cluster3(3).down(2).noPod(2).pod(2, func(p *podInfo) { p.MissingSince = mdT0.Add(-6 * time.Minute) }),
			kind: actWait, reason: reasonPodNotCreated},
		// emptyDir storage (path 3 of issue 9): the pod plays the claim; there is never a claim
		// to delete, so a fresh volume is a new pod.
		{name: "emptyDir: replace, learner added, old pod still in place", fix: replaced(false, 0).ephemeral(),
			kind: actDeletePod, member: "etc-1", reason: reasonReplaceMember},
		{name: "emptyDir: learner whose pod crash loops past the timeout gets a new pod",
			fix: func() *mdFix {
				f := cluster3(2).want(3).withIntent(addIntent(2)).learner(2, false, 0).stsReplicas(3)
				f.addPod(2)
				return f.pod(2, crashLoop(6*time.Minute)).ephemeral()
			}(),
			kind: actDeletePod, member: "etc-2", reason: reasonScaleOut},
		{name: "emptyDir: scale in, StatefulSet shrunk, pod still terminating", fix: cluster3(3).want(2).stsReplicas(2).withIntent(removeIntent(2)).removeMember(2).
			pod(2, func(p *podInfo) { p.Deleting = true }).ephemeral(),
			kind: actClearIntent, member: "etc-2", reason: reasonScaleIn},
		{name: "emptyDir: a member whose container restarted with its data is left alone", fix: cluster3(3).ephemeral().pod(2, func(p *podInfo) { p.RestartCount = 1 }),
			kind: actNone, reason: reasonReconciled},
		{name: "replace: old claim deleting, old pod on a dead node", fix: replaced(false, 0).pod(1, nodeLost(10*time.Minute)).pod(1, func(p *podInfo) { p.PVCDeleting = true }),
			kind: actDeletePod, member: "etc-1", reason: reasonReplaceMember, check: wantForce(true)},
		{name: "replace: old pod terminating on a ready node", fix: replaced(false, 0).pod(1, func(p *podInfo) { p.PVCDeleting, p.Deleting = true, true }),
			kind: actWait, reason: reasonPodTerminating},
		{name: "replace: old pod gone, old claim not yet", fix: replaced(false, 0).noPod(1).pod(1, func(p *podInfo) { p.PVCDeleting = true }),
			kind: actWait, reason: reasonVolumeDeleting},
		{name: "replace: new pod on a new claim, learner caught up", fix: replaced(true, 0).pod(1, func(p *podInfo) { p.PVCUID = "new-1" }),
			kind: actPromoteLearner, member: "etc-1", id: 0x901, reason: reasonReplaceMember},
		{name: "replace: promoted, intent still recorded",
			fix: func() *mdFix {
				f := replaced(true, 0).pod(1, func(p *podInfo) { p.PVCUID = "new-1" })
				f.members[len(f.members)-1].IsLearner = false
				return f
			}(), kind: actClearIntent, member: "etc-1", id: 0x901, reason: reasonReplaceMember},

		// The StatefulSet follows the member list.
		{name: "a member has no pod: the StatefulSet is too small", fix: cluster3(3).stsReplicas(2).down(2).noPod(2),
			kind: actScaleStatefulSet, member: "etc-2", reason: reasonScaleOut, check: wantReplicas(3)},
		{name: "pods above the members: the StatefulSet is too big", fix: func() *mdFix { f := cluster3(3).stsReplicas(4); f.addPod(3); return f }(),
			kind: actScaleStatefulSet, member: "etc-3", reason: reasonScaleIn, check: wantReplicas(3)},

		// Intents that make no sense.
		{name: "intent naming no member pod", fix: cluster3(3).withIntent(membershipIntent{Op: intentAdd, Member: "zzz"}),
			kind: actClearIntent, reason: reasonInvalidIntent},
		{name: "intent with an unknown operation", fix: cluster3(3).withIntent(membershipIntent{Op: "merge", Member: "etc-1"}),
			kind: actClearIntent, reason: reasonInvalidIntent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.fix.obs()
			a := Decide(o)
			if a.Kind != tt.kind || a.Reason != tt.reason || (tt.member != "" && a.Member != tt.member) || (tt.id != 0 && a.ID != tt.id) {
				t.Fatalf("got %s member=%q id=%x reason=%s (%s)\nwant %s member=%q id=%x reason=%s",
					a.Kind, a.Member, a.ID, a.Reason, a.Message, tt.kind, tt.member, tt.id, tt.reason)
			}
			if a.Message == "" {
				t.Error("empty message")
			}
			if tt.check != nil {
				tt.check(t, a)
			}
			// Pure: the same observation gives the same action.
			if b := Decide(tt.fix.obs()); !reflect.DeepEqual(a, b) {
				t.Errorf("second call gave %+v", b)
			}
		})
	}
}

func TestMembershipIntentJSON(t *testing.T) {
	in := membershipIntent{Op: intentReplace, Member: "etc-1", ID: 0x8e9e05c52164694d, PeerURL: mdPeerURL("etc-1"),
		ClaimUID: "uid-1", Reason: reasonReplaceMember, StartedAt: mdT0,
		RunBeforeAdd: &plan.PodRun{PodUID: "pod-1", StartedAt: mdT0.Add(3 * time.Second)}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"id":"8e9e05c52164694d"`) {
		t.Errorf("ID not in hexadecimal: %s", b)
	}
	var out membershipIntent
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: %+v, want %+v", out, in)
	}
	add, _ := json.Marshal(membershipIntent{Op: intentAdd, Member: "etc-2"})
	if strings.Contains(string(add), `"id"`) || strings.Contains(string(add), `"runBeforeAdd"`) {
		t.Errorf("add intent carries an ID or an add time: %s", add)
	}
	if err := json.Unmarshal([]byte(`{"op":"remove","member":"etc-1","id":"xyz"}`), &out); err == nil {
		t.Error("a malformed ID parsed")
	}
}

func wantReplicas(n int32) func(*testing.T, membershipAction) {
	return func(t *testing.T, a membershipAction) {
		if a.Replicas != n {
			t.Errorf("replicas %d, want %d", a.Replicas, n)
		}
	}
}

func wantForce(f bool) func(*testing.T, membershipAction) {
	return func(t *testing.T, a membershipAction) {
		if a.Force != f {
			t.Errorf("force %v, want %v", a.Force, f)
		}
	}
}

func wantMessage(sub string) func(*testing.T, membershipAction) {
	return func(t *testing.T, a membershipAction) {
		if !strings.Contains(a.Message, sub) {
			t.Errorf("message %q does not mention %q", a.Message, sub)
		}
	}
}

// --- A tiny world: etcd, a StatefulSet with Parallel pod management, pods and claims. ---

type simMember struct {
	id      uint64
	peerURL string
	name    string // empty until started
	learner bool
	index   uint64
}

type simPod struct {
	claimUID      string // the claim the pod mounts
	deleting      bool
	nodeReady     bool
	notReadySince time.Time
	serves        uint64 // member ID its etcd runs as; 0 when it fails
	failingSince  time.Time
	restarts      int32
	age           int    // passes since creation: etcd starts from the second
	bootList      string // the founding list it started with, waiting for a quorum
}

type simClaim struct {
	uid      string
	deleting bool
	data     uint64 // the member whose WAL it holds; 0 when empty
	stamp    uint64 // the controller's record of the member it belongs to (set for learners)
}

type simWorld struct {
	t         *testing.T
	now       time.Time
	desired   int32
	deletePVC bool
	members   []*simMember
	leader    uint64
	index     uint64
	nextID    uint64
	sts       int32
	stsSeen   int32 // the replicas the StatefulSet controller acts on: one pass behind
	pods      map[int32]*simPod
	claims    map[int32]*simClaim
	// refused counts the passes for which the StatefulSet controller's creation of an
	// ordinal's pod is refused (admission, a quota): the pod is not re-created.
	refused map[int32]int
	// ephemeral: emptyDir storage; a pod's data lives and dies with it.
	ephemeral bool
	// rejoinEmpty models the membership ConfigMap before issue 9: a started voter finds its
	// name during a join and starts on an empty data directory (the check must catch it).
	rejoinEmpty bool
	// Formation: formed once a quorum of founders started with the same founding list;
	// formedBefore once a pass saw it (status.clusterID); founders is the list the controller
	// recorded at the first pass; formedList the list the cluster formed with; cm the
	// membership ConfigMap's environment as the controller last wrote it.
	formed, formedBefore bool
	founders             []string
	formedList           string
	cm                   map[string]string
	// oldFormation emulates the controller before issue 9: during formation the founding list
	// and the StatefulSet follow spec.replicas.
	oldFormation bool
	// secondCluster lists pods that started a cluster of their own (another founding list).
	secondCluster []string
	// sidecar: every pod runs a crash-looping sidecar listed after the etcd container.
	sidecar bool
	// missingSince records when each ordinal's member was first seen without a pod.
	missingSince map[int32]time.Time
	// removedVoters counts RemoveMember steps on voting members (a scenario may forbid them).
	removedVoters int
	// forgot lists voting members that started again on an empty data directory under their
	// old identity: they may vote without writes they acknowledged.
	forgot  []string
	intent  *membershipIntent
	nextUID int
	log     []string
}

const simTimeout = 30 * time.Second

// newSimWorld is a formed cluster of one member, etc-0.
func newSimWorld(t *testing.T) *simWorld {
	w := &simWorld{t: t, now: mdT0, desired: 1, deletePVC: true, index: 5000, nextID: 1, sts: 1, stsSeen: 1,
		pods: map[int32]*simPod{}, claims: map[int32]*simClaim{}, refused: map[int32]int{}, missingSince: map[int32]time.Time{}}
	w.members = []*simMember{{id: 1, peerURL: mdPeerURL("etc-0"), name: "etc-0", index: 5000}}
	w.nextID = 2
	w.leader = 1
	w.claims[0] = &simClaim{uid: w.uid(), data: 1, stamp: 1}
	w.pods[0] = &simPod{claimUID: w.claims[0].uid, nodeReady: true, serves: 1, age: 1}
	w.formed, w.formedBefore, w.founders = true, true, []string{"etc-0=" + mdPeerURL("etc-0")}
	return w
}

// form forms the cluster once a quorum of the founders of one list started with it. Founders
// that started with another list wait; with a quorum of their own they form a second cluster.
func (w *simWorld) form() {
	byList := map[string][]int32{}
	for k, p := range w.pods {
		if p.bootList != "" && p.serves == 0 && w.claims[k] != nil && w.claims[k].data == 0 {
			byList[p.bootList] = append(byList[p.bootList], k)
		}
	}
	for list, ords := range byList {
		n := int32(len(strings.Split(list, ",")))
		if int32(len(ords)) < plan.Quorum(n) || w.formed {
			if w.formed && list != w.formedList && int32(len(ords)) >= plan.Quorum(n) {
				w.secondCluster = append(w.secondCluster, fmt.Sprintf("founders %v formed a second cluster with %q", ords, list))
			}
			continue
		}
		w.formed, w.formedList = true, list
		for _, entry := range strings.Split(list, ",") {
			name, url, _ := strings.Cut(entry, "=")
			w.members = append(w.members, &simMember{id: w.nextID, peerURL: url, index: w.index})
			w.nextID++
			_ = name
		}
		for _, k := range ords {
			m := w.memberAt(k)
			m.name = mdName(k)
			// The controller stamps the claim of a member it sees running (the next pass).
			w.claims[k].data, w.claims[k].stamp, w.pods[k].serves = m.id, m.id, m.id
		}
	}
}

// newFormingWorld is a cluster just created with spec.replicas desired: nothing runs yet; the
// StatefulSet starts with one replica (the chart leaves replicas to the operator).
func newFormingWorld(t *testing.T, desired int32) *simWorld {
	return &simWorld{t: t, now: mdT0, desired: desired, deletePVC: true, index: 1, nextID: 1, sts: 1, stsSeen: 1,
		pods: map[int32]*simPod{}, claims: map[int32]*simClaim{}, refused: map[int32]int{}, missingSince: map[int32]time.Time{}}
}

func simList(n int32) []string {
	var out []string
	for k := int32(0); k < n; k++ {
		out = append(out, mdName(k)+"="+mdPeerURL(mdName(k)))
	}
	return out
}

func (w *simWorld) uid() string { w.nextUID++; return fmt.Sprintf("claim-%d", w.nextUID) }

func (w *simWorld) member(id uint64) *simMember {
	for _, m := range w.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (w *simWorld) memberAt(k int32) *simMember {
	for _, m := range w.members {
		if m.peerURL == mdPeerURL(mdName(k)) {
			return m
		}
	}
	return nil
}

func simOrd(name string) int32 {
	var k int32
	fmt.Sscanf(name, "etc-%d", &k)
	return k
}

// intact: a started voting member served by a pod on its own data.
func (w *simWorld) intact(m *simMember) bool {
	if m.learner || m.name == "" {
		return false
	}
	k := simOrd(m.name)
	p, c := w.pods[k], w.claims[k]
	return p != nil && p.serves == m.id && c != nil && c.uid == p.claimUID && c.data == m.id && c.stamp == m.id
}

func (w *simWorld) serving(id uint64) bool {
	for _, p := range w.pods {
		if p.serves == id {
			return true
		}
	}
	return false
}

// settle runs the StatefulSet controller, the kubelets and etcd until the next pass.
func (w *simWorld) settle() {
	// Claims marked for deletion go once no pod mounts them.
	for k, c := range w.claims {
		if p := w.pods[k]; c.deleting && (p == nil || p.claimUID != c.uid) {
			delete(w.claims, k)
		}
	}
	// The StatefulSet controller: Parallel, creates missing claims with the pod, and acts on
	// the replicas it saw one pass ago.
	for k := range w.pods {
		if k >= w.stsSeen {
			if w.pods[k].nodeReady {
				delete(w.pods, k)
			} else {
				w.pods[k].deleting = true
			}
		}
	}
	for k := int32(0); k < w.stsSeen; k++ {
		if w.pods[k] != nil {
			continue
		}
		if w.refused[k] != 0 {
			w.refused[k]--
			continue
		}
		if w.claims[k] == nil || w.ephemeral {
			// emptyDir: a new pod has new, empty storage.
			w.claims[k] = &simClaim{uid: w.uid()}
		}
		w.pods[k] = &simPod{claimUID: w.claims[k].uid, nodeReady: true}
	}
	if w.ephemeral {
		// emptyDir: the storage goes with the pod.
		for k := range w.claims {
			if w.pods[k] == nil {
				delete(w.claims, k)
			}
		}
	}
	// etcd in each pod.
	for k, p := range w.pods {
		p.serves = 0
		c := w.claims[k]
		m := w.memberAt(k)
		p.age++
		switch {
		case p.age < 2:
			// Created this pass: the container is not up yet.
		case !p.nodeReady || p.deleting || c == nil || c.uid != p.claimUID:
			// Unreachable, or (the model keeps it simple) pending on a claim that is not its own.
		case c.data == 0 && (p.bootList != "" || w.cm["ETCD_INITIAL_CLUSTER_STATE"] == "new"):
			// First formation: a founder named by the list it started with (the environment
			// is read once, at the container's start) waits for a quorum of founders with the
			// same list; a late founder joins the cluster its list formed.
			list := p.bootList
			if list == "" {
				list = w.cm["ETCD_INITIAL_CLUSTER"]
				if !slices.Contains(strings.Split(list, ","), mdName(k)+"="+mdPeerURL(mdName(k))) {
					break // "couldn't find local name"
				}
				p.bootList = list
			}
			if w.formedList != "" && list != w.formedList {
				w.secondCluster = append(w.secondCluster, fmt.Sprintf("%s started with the founding list %q; the cluster formed with %q", mdName(k), list, w.formedList))
				break
			}
			if m != nil && m.name == "" {
				m.name, c.data, p.serves = mdName(k), m.id, m.id
			}
		case c.data != 0:
			// etcd restarts as the member its WAL names; a removed member exits.
			if dm := w.member(c.data); dm != nil && dm == m {
				p.serves = m.id
			}
		case m != nil && MayStartEmpty(etcd.Member{Name: m.name, IsLearner: m.learner}):
			// Empty data dir: etcd joins as the member listed with its peer URL; the membership
			// ConfigMap names only learners and members that never started.
			if m.name == "" {
				m.name = mdName(k)
			}
			m.index = 0
			c.data = m.id
			p.serves = m.id
		case m != nil && !m.learner && w.member(m.id) != nil && m.name != "" && w.rejoinEmpty:
			// The old ConfigMap (every member by name during a join): it rejoins empty.
			w.forgot = append(w.forgot, m.name)
			c.data = m.id
			p.serves = m.id
		case m != nil:
			// Empty data dir of a voting member that started before: the ConfigMap knows it
			// only by an alias, so etcd refuses to start ("couldn't find local name").
		}
		if m != nil && p.serves == m.id && (m.learner || c.stamp == 0) {
			c.stamp = m.id // the controller records the claim a member runs on
		}
		if p.serves == 0 && p.nodeReady && p.age >= 2 {
			if p.failingSince.IsZero() {
				p.failingSince = w.now
			}
			p.restarts++
		} else if p.serves != 0 {
			p.failingSince = time.Time{}
		}
	}
	w.form()
	// Raft: the leader must be a serving voter with a quorum of serving voters behind it.
	voters, up := 0, 0
	for _, m := range w.members {
		if !m.learner {
			voters++
			if w.serving(m.id) {
				up++
			}
		}
	}
	if w.leader != 0 && (w.member(w.leader) == nil || !w.serving(w.leader) || up < voters/2+1) {
		w.leader = 0
	}
	if w.leader == 0 && voters > 0 && up >= voters/2+1 {
		for _, m := range w.members {
			if !m.learner && w.serving(m.id) && (w.leader == 0 || m.id < w.leader) {
				w.leader = m.id
			}
		}
	}
	w.stsSeen = w.sts
	if w.leader != 0 {
		w.index += 10
		for _, m := range w.members {
			if !w.serving(m.id) {
				continue
			}
			if m.learner {
				m.index = min(w.index, m.index+1500) // a learner needs a few passes to catch up
			} else {
				m.index = w.index
			}
		}
	}
}

func (w *simWorld) observe() Observation {
	o := Observation{Desired: w.desired, StatefulSet: "etc", StsReplicas: w.sts, Bootstrapped: w.formedBefore || (w.formed && w.leader != 0),
		FormedBefore: w.formedBefore, Founders: int32(len(w.founders)), FoundingList: w.founders, PeerURL: mdPeerURL,
		LearnerMaxLag: 100, LostMemberTimeout: simTimeout, DeletePVCOnScaleIn: w.deletePVC, Now: w.now}
	if w.intent != nil {
		in := *w.intent
		o.Intent = &in
	}
	ords := map[int32]bool{}
	for k := range w.pods {
		ords[k] = true
	}
	for k := range w.claims {
		ords[k] = true
	}
	keys := make([]int32, 0, len(ords))
	for k := range ords {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		pi := podInfo{Name: mdName(k), Ordinal: k, NodeReady: true}
		if m := w.memberAt(k); m != nil && m.name != "" && w.pods[k] == nil {
			if _, ok := w.missingSince[k]; !ok {
				w.missingSince[k] = w.now
			}
			pi.MissingSince = w.missingSince[k]
		} else {
			delete(w.missingSince, k)
		}
		if p := w.pods[k]; p != nil {
			plan.PodState(&pi, w.corePod(k, p))
			pi.NodeReady, pi.NodeNotReadySince, pi.FailingSince = p.nodeReady, p.notReadySince, p.failingSince
		}
		if c := w.claims[k]; c != nil {
			pi.PVCExists, pi.PVCUID, pi.PVCDeleting = true, c.uid, c.deleting
			if w.ephemeral {
				pi.Ephemeral, pi.PVCDeleting = true, pi.Deleting
			}
			if m := w.memberAt(k); m != nil && m.name != "" {
				pi.PVCFresh = c.stamp != m.id
			}
		}
		o.Pods = append(o.Pods, pi)
	}
	if w.leader == 0 {
		return o
	}
	obs := &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for _, m := range w.members {
		em := etcd.Member{ID: m.id, Name: m.name, PeerURLs: []string{m.peerURL}, IsLearner: m.learner}
		if m.name != "" {
			em.ClientURLs = []string{"http://" + m.name + ":2379"}
		}
		obs.Cluster.Members = append(obs.Cluster.Members, em)
		if w.serving(m.id) {
			obs.Status[m.id] = etcd.MemberStatus{ID: m.id, Leader: w.leader, RaftIndex: m.index, IsLearner: m.learner}
		} else {
			obs.StatusErr[m.id] = errors.New("unreachable")
		}
	}
	o.Etcd = obs
	return o
}

// corePod is the pod object the kubelet would report for p: the etcd container's state, and
// a crash-looping sidecar after it when the world has one.
func (w *simWorld) corePod(k int32, p *simPod) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: mdName(k), UID: types.UID("pod-" + p.claimUID)}}
	if p.deleting {
		pod.DeletionTimestamp = &metav1.Time{Time: w.now}
	}
	cs := corev1.ContainerStatus{Name: "etcd", RestartCount: p.restarts}
	switch {
	case p.serves != 0:
		cs.State.Running, cs.Ready = &corev1.ContainerStateRunning{}, true
	case p.nodeReady && !p.failingSince.IsZero():
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	ready := cs.Ready
	if w.sidecar {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: "zz-sidecar", RestartCount: 40,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}})
		ready = false
	}
	cond := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse}
	if ready {
		cond.Status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{cond}
	return pod
}

// apply carries out a, failing the test on any step a careful operator must never take.
func (w *simWorld) apply(a membershipAction) {
	t := w.t
	t.Helper()
	switch a.Kind {
	case actRecordIntent:
		in := *a.Intent
		w.intent = &in
	case actClearIntent:
		w.intent = nil
	case actAddLearner:
		for _, m := range w.members {
			if m.learner {
				t.Fatalf("AddLearner %s while learner %x exists", a.Member, m.id)
			}
			if m.peerURL == a.PeerURL {
				t.Fatalf("AddLearner %s: peer URL already a member", a.Member)
			}
		}
		w.members = append(w.members, &simMember{id: w.nextID, peerURL: a.PeerURL, learner: true})
		w.nextID++
		if a.Intent != nil { // stored before etcd is called, as the controller does
			in := *a.Intent
			w.intent = &in
		}
	case actPromoteLearner:
		m := w.member(a.ID)
		if m == nil || !m.learner || m.name == "" || w.index-m.index > 100 {
			t.Fatalf("PromoteLearner %x: not a caught-up learner", a.ID)
		}
		m.learner = false
	case actRemoveMember:
		if m := w.member(a.ID); m != nil && !m.learner {
			w.removedVoters++
		}
		for i, m := range w.members {
			if m.id == a.ID {
				w.members = append(w.members[:i], w.members[i+1:]...)
				break
			}
		}
		if a.ID == w.leader {
			w.leader = 0
		}
	case actMoveLeader:
		if a.ID != w.leader || w.member(a.Target) == nil || w.member(a.Target).learner || !w.serving(a.Target) {
			t.Fatalf("MoveLeader %x -> %x: leader is %x", a.ID, a.Target, w.leader)
		}
		w.leader = a.Target
	case actScaleStatefulSet:
		w.sts = a.Replicas
	case actDeletePVC:
		if w.ephemeral {
			t.Fatalf("DeletePVC %s under emptyDir storage", a.Member)
		}
		k := simOrd(a.Member)
		if m := w.memberAt(k); m != nil && w.intact(m) {
			t.Fatalf("DeletePVC %s: the data of a voting member", a.Member)
		}
		if c := w.claims[k]; c != nil {
			c.deleting = true
		}
	case actDeletePod:
		k := simOrd(a.Member)
		if m := w.memberAt(k); m != nil && !m.learner && w.serving(m.id) {
			t.Fatalf("DeletePod %s: the pod of a voting member", a.Member)
		}
		if p := w.pods[k]; p != nil {
			if p.nodeReady || a.Force {
				delete(w.pods, k)
			} else {
				p.deleting = true
			}
		}
	case actWait, actNone:
	default:
		t.Fatalf("unknown action %s", a.Kind)
	}
}

// check asserts the invariants after each step: quorum of voting members on their own data,
// at most one learner.
func (w *simWorld) check(step int, a membershipAction) {
	w.t.Helper()
	voters, intact, learners := 0, 0, 0
	for _, m := range w.members {
		if m.learner {
			learners++
			continue
		}
		voters++
		if w.intact(m) {
			intact++
		}
	}
	if len(w.secondCluster) > 0 {
		w.t.Fatalf("step %d (%s %s): a second cluster: %s\n%s", step, a.Kind, a.Member, w.secondCluster[0], strings.Join(w.log, "\n"))
	}
	if !w.formed {
		return // nothing to keep before the first formation
	}
	if len(w.forgot) > 0 {
		w.t.Fatalf("step %d (%s %s): voting member %s started again on an empty data directory under its old identity\n%s",
			step, a.Kind, a.Member, w.forgot[0], strings.Join(w.log, "\n"))
	}
	if learners > 1 {
		w.t.Fatalf("step %d (%s %s): %d learners\n%s", step, a.Kind, a.Member, learners, strings.Join(w.log, "\n"))
	}
	if voters == 0 || intact < voters/2+1 {
		w.t.Fatalf("step %d (%s %s): quorum lost: %d of %d voting members intact\n%s", step, a.Kind, a.Member, intact, voters, strings.Join(w.log, "\n"))
	}
}

// converged: etcd-0..desired-1 vote on their own data, the StatefulSet matches, no intent,
// and (delete policy) no claim above the StatefulSet.
func (w *simWorld) converged() bool {
	if w.intent != nil || w.sts != w.desired || int32(len(w.members)) != w.desired {
		return false
	}
	for k := int32(0); k < w.desired; k++ {
		if m := w.memberAt(k); m == nil || !w.intact(m) {
			return false
		}
	}
	for k := range w.claims {
		if k >= w.desired && w.deletePVC {
			return false
		}
	}
	return true
}

// pass is one pass of the controller: record the founders at the first pass, observe, decide
// and gate, and write the membership ConfigMap from the same observation.
func (w *simWorld) pass() (Observation, membershipAction) {
	if w.founders == nil || (w.oldFormation && !w.formedBefore) {
		w.founders = simList(w.desired)
	}
	o := w.observe()
	a := plan.Gate(Decide(o), o.Evidence())
	w.cm = InitialCluster(o)
	if w.oldFormation && !o.Bootstrapped {
		// Before issue 9: the list and the StatefulSet follow spec.replicas until formation.
		a = membershipAction{Kind: actScaleStatefulSet, Replicas: w.desired, Reason: reasonBootstrapping}
		if w.sts == w.desired {
			a = wait(reasonBootstrapping, "forming")
		}
	}
	if w.formed && w.leader != 0 {
		w.formedBefore = true
	}
	return o, a
}

// run passes until the decision is None and the world converged, within limit passes. Each
// action's effect is dropped with probability drop (the operator crashed before it took
// effect; a recorded intent stays).
func (w *simWorld) run(limit int, rng *rand.Rand, drop float64) int {
	w.t.Helper()
	for step := 1; step <= limit; step++ {
		_, a := w.pass()
		dropped := rng != nil && a.Kind != actWait && a.Kind != actNone && rng.Float64() < drop
		w.log = append(w.log, fmt.Sprintf("%3d %-16s %-6s %x r=%d force=%v %-14s dropped=%v %s", step, a.Kind, a.Member, a.ID, a.Replicas, a.Force, a.Reason, dropped, a.Message))
		if a.Kind == actNone {
			if !w.converged() {
				w.t.Fatalf("step %d: None but not converged\n%s", step, strings.Join(w.log, "\n"))
			}
			return step
		}
		if !dropped {
			w.apply(a)
		}
		w.now = w.now.Add(time.Second)
		w.settle()
		w.check(step, a)
	}
	w.t.Fatalf("no convergence within %d passes\n%s", limit, strings.Join(w.log, "\n"))
	return 0
}

func simScale(t *testing.T, rng *rand.Rand, drop float64, limit int) {
	w := newSimWorld(t)
	for _, n := range []int32{3, 5, 3, 1} {
		w.desired = n
		w.log = append(w.log, fmt.Sprintf("--- spec.replicas = %d", n))
		w.run(limit, rng, drop)
	}
}

// simReplace starts from three members and breaks one with fault.
func simReplace(t *testing.T, rng *rand.Rand, drop float64, limit int, fault func(w *simWorld)) {
	w := newSimWorld(t)
	w.desired = 3
	w.run(limit, nil, 0)
	fault(w)
	w.log = append(w.log, "--- fault")
	w.settle()
	w.run(limit, rng, drop)
}

var simFaults = map[string]func(w *simWorld){
	// etc-1's pod is deleted and the StatefulSet controller's re-creation is refused for a
	// while (admission, a quota): its member is down, with its data on the claim.
	"pod not re-created": func(w *simWorld) {
		delete(w.pods, 1)
		w.refused[1] = 60
	},
	// etc-1's data is wiped in place: same pod, same claim, empty data directory.
	"wiped in place": func(w *simWorld) {
		w.claims[1].data = 0
		w.pods[1].age = 0
	},
	// The member's claim and pod are deleted: the StatefulSet re-creates both, etcd starts
	// on an empty volume under the old member ID.
	"wiped data": func(w *simWorld) {
		w.claims[1] = &simClaim{uid: w.uid()}
		w.pods[1] = &simPod{claimUID: w.claims[1].uid, nodeReady: true}
	},
	// The node of etc-2 stops: its pod stays, unreachable.
	"dead node": func(w *simWorld) {
		p := w.pods[2]
		p.nodeReady, p.notReadySince = false, w.now
	},
	// The leader's node stops.
	"dead leader node": func(w *simWorld) {
		p := w.pods[0]
		p.nodeReady, p.notReadySince = false, w.now
	},
}

func TestDecideMembershipSimulatedScale(t *testing.T) {
	simScale(t, nil, 0, 60)
}

func TestDecideMembershipSimulatedReplace(t *testing.T) {
	for name, fault := range simFaults {
		t.Run(name, func(t *testing.T) { simReplace(t, nil, 0, 100, fault) })
	}
}

// Scale in from five with a broken middle member: the broken one goes first, its ordinal is
// re-added on a fresh volume, and the cluster ends on etc-0..2, all healthy.
func TestDecideMembershipSimulatedScaleInBrokenMiddle(t *testing.T) {
	w := newSimWorld(t)
	w.desired = 5
	w.run(100, nil, 0)
	p := w.pods[1]
	p.nodeReady, p.notReadySince = false, w.now
	w.settle()
	w.desired = 3
	w.run(200, nil, 0)
}

// Crashes: drop the effect of random steps; every run must still converge, never lose quorum
// and never hold two learners.
func TestDecideMembershipSimulatedCrashes(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprintf("scale seed %d", seed), func(t *testing.T) {
			simScale(t, rand.New(rand.NewSource(seed)), 0.35, 400)
		})
		for name, fault := range simFaults {
			t.Run(fmt.Sprintf("%s seed %d", name, seed), func(t *testing.T) {
				simReplace(t, rand.New(rand.NewSource(seed)), 0.35, 400, fault)
			})
		}
	}
}

// TestCrashLoopOnNewTemplateIsNotReplaced: a member that crash loops on the new pod template
// while the others still run the old one failed an upgrade; replacing it would lose its data
// and start a fresh member on the same failing template.
func TestCrashLoopOnNewTemplateIsNotReplaced(t *testing.T) {
	crash := func(p *podInfo) {
		p.CrashLooping, p.FailingSince, p.Ready, p.Running, p.RestartCount = true, mdT0.Add(-time.Hour), false, false, 9
	}
	rev := func(r string) func(*podInfo) { return func(p *podInfo) { p.Revision = r } }
	f := cluster3(3).down(2).pod(0, rev("old")).pod(1, rev("old")).pod(2, rev("new")).pod(2, crash)
	o := f.obs()
	o.UpdateRevision = "new"
	if a := Decide(o); a.Kind != actWait || a.Reason != reasonMemberUnhealthy {
		t.Fatalf("during a rollout: got %s %s (%s), want a wait for the unhealthy member", a.Kind, a.Reason, a.Message)
	}
	f = cluster3(3).down(2).pod(0, rev("new")).pod(1, rev("new")).pod(2, rev("new")).pod(2, crash)
	o = f.obs()
	o.UpdateRevision = "new"
	if a := Decide(o); a.Kind != actRecordIntent || a.Member != "etc-2" {
		t.Fatalf("without a rollout: got %s %s (%s), want the replacement to start", a.Kind, a.Member, a.Message)
	}
}

// A voting member whose volume is wiped while a learner joins (path 2 of issue 9): it must
// not rejoin under its old identity; it is replaced after the join.
func TestDecideMembershipSimulatedWipeDuringJoin(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			w := wipeDuringJoin(t, false)
			w.run(600, rand.New(rand.NewSource(seed)), 0.2)
		})
	}
}

// The check above can fail: with the ConfigMap of before issue 9 (every member named during a
// join) the wiped voter rejoins empty under its old identity, and the simulation sees it.
func TestSimulationCatchesAVoterRejoiningEmpty(t *testing.T) {
	w := wipeDuringJoin(t, true)
	for step := 0; step < 20 && len(w.forgot) == 0; step++ {
		_, a := w.pass()
		w.apply(a)
		w.now = w.now.Add(time.Second)
		w.settle()
	}
	if len(w.forgot) == 0 {
		t.Fatalf("a voter wiped during a join under the old ConfigMap was not seen rejoining empty\n%s", strings.Join(w.log, "\n"))
	}
}

// wipeDuringJoin forms three members, starts a scale-out to four and, once the learner is in
// etcd's member list, wipes etc-0 (its claim and pod are re-created empty).
func wipeDuringJoin(t *testing.T, rejoinEmpty bool) *simWorld {
	w := newSimWorld(t)
	w.rejoinEmpty = rejoinEmpty
	w.desired = 3
	w.run(100, nil, 0)
	w.desired = 4
	for step := 0; step < 200 && w.learnerMember() == nil; step++ {
		_, a := w.pass()
		w.apply(a)
		w.now = w.now.Add(time.Second)
		w.settle()
	}
	if w.learnerMember() == nil {
		t.Fatalf("no learner was added\n%s", strings.Join(w.log, "\n"))
	}
	w.claims[0] = &simClaim{uid: w.uid()}
	w.pods[0] = &simPod{claimUID: w.claims[0].uid, nodeReady: true}
	w.log = append(w.log, "--- etc-0 wiped while a learner joins")
	w.settle()
	return w
}

// A learner whose pod cannot be created for a long time (path 5): it is removed past the
// deadline, nothing else is blocked for good, and the cluster converges once pods can start.
func TestDecideMembershipSimulatedLearnerNeverStarts(t *testing.T) {
	w := newSimWorld(t)
	w.desired = 3
	w.run(100, nil, 0)
	w.refused[3] = 150
	w.desired = 4
	w.run(600, nil, 0)
	if w.removedVoters != 0 {
		t.Fatalf("%d voting members removed", w.removedVoters)
	}
}

// emptyDir storage (path 3): container restarts keep the data and replace no one; a pod that
// is re-created starts empty and its member is replaced, never rejoined empty.
func TestDecideMembershipSimulatedEmptyDir(t *testing.T) {
	w := newSimWorld(t)
	w.ephemeral = true
	w.desired = 3
	w.run(100, nil, 0)
	// Container restarts in place: the pod and its emptyDir stay.
	for _, k := range []int32{0, 1, 2} {
		w.pods[k].restarts++
		w.pods[k].age = 0
	}
	w.settle()
	w.run(100, nil, 0)
	if w.removedVoters != 0 {
		t.Fatalf("container restarts with their data replaced %d members\n%s", w.removedVoters, strings.Join(w.log, "\n"))
	}
	// A pod deleted: the StatefulSet re-creates it with an empty emptyDir.
	delete(w.pods, 2)
	w.settle()
	w.run(200, nil, 0)
	if w.removedVoters != 1 {
		t.Fatalf("a re-created emptyDir pod: %d members replaced, want 1\n%s", w.removedVoters, strings.Join(w.log, "\n"))
	}
}

func (w *simWorld) learnerMember() *simMember {
	for _, m := range w.members {
		if m.learner {
			return m
		}
	}
	return nil
}

// steps runs n passes (not expecting convergence), checking the invariants after each.
func (w *simWorld) steps(n int) {
	w.t.Helper()
	for i := 0; i < n; i++ {
		_, a := w.pass()
		w.log = append(w.log, fmt.Sprintf("  - %-16s %-6s r=%d %-14s %s", a.Kind, a.Member, a.Replicas, a.Reason, a.Message))
		w.apply(a)
		w.now = w.now.Add(time.Second)
		w.settle()
		w.check(i, a)
	}
}

// A resize during the first formation (path 4 of issue 9), at every pass of it: the founders
// form one cluster and the others join it; never a second founding list, never a cluster
// that cannot reach its quorum.
func TestDecideMembershipSimulatedResizeDuringFormation(t *testing.T) {
	for _, to := range []int32{5, 1, 4, 2} {
		// The first pass records the founders; the resize comes after it.
		for at := 1; at <= 6; at++ {
			t.Run(fmt.Sprintf("3 to %d after %d passes", to, at), func(t *testing.T) {
				w := newFormingWorld(t, 3)
				w.steps(at)
				w.desired = to
				w.log = append(w.log, fmt.Sprintf("--- spec.replicas = %d", to))
				w.run(400, nil, 0)
				if w.formedList != strings.Join(simList(3), ",") {
					t.Fatalf("formed with %q, want the three founders", w.formedList)
				}
			})
		}
	}
}

// The check above can fail: with the formation of before issue 9 (the founding list and the
// StatefulSet follow spec.replicas until formation), some resize forms a second cluster or
// none, and the simulation sees it.
func TestSimulationCatchesTheFormationOfBefore(t *testing.T) {
	caught := 0
	for at := 1; at <= 6; at++ {
		w := newFormingWorld(&testing.T{}, 3)
		w.oldFormation = true
		for i := 0; i < at; i++ {
			_, a := w.pass()
			w.apply(a)
			w.now = w.now.Add(time.Second)
			w.settle()
		}
		w.desired = 5
		for i := 0; i < 100 && len(w.secondCluster) == 0; i++ {
			_, a := w.pass()
			w.apply(a)
			w.now = w.now.Add(time.Second)
			w.settle()
		}
		if len(w.secondCluster) > 0 {
			caught++
		}
	}
	if caught == 0 {
		t.Fatalf("no resize during the formation of before formed a second cluster in the simulation")
	}
}

// A crash-looping sidecar in every pod (path 7): the member's state is its etcd container's,
// so scaling and replacing go as without it, and nothing is replaced for the sidecar's sake.
func TestDecideMembershipSimulatedSidecar(t *testing.T) {
	w := newSimWorld(t)
	w.sidecar = true
	for _, n := range []int32{3, 5, 3} {
		w.desired = n
		w.run(200, nil, 0)
	}
	if w.removedVoters != 2 {
		t.Fatalf("%d voting members removed, want the two of the scale-in", w.removedVoters)
	}
	w.steps(int(2 * simTimeout / time.Second))
	if w.removedVoters != 2 {
		t.Fatalf("a member was removed for its sidecar's sake\n%s", strings.Join(w.log, "\n"))
	}
	simFaults["dead node"](w)
	w.settle()
	w.run(200, nil, 0)
}

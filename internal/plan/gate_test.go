package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// The fixture: StatefulSet "etc"; ordinal k is member ID 0x100+k, on claim "uid-k", up and
// at raft index 1000, led by etc-0.

func gID(k int32) uint64          { return 0x100 + uint64(k) }
func gName(k int32) string        { return fmt.Sprintf("etc-%d", k) }
func gPeerURL(name string) string { return "http://" + name + ".etc.ns.svc:2380" }

type gFix struct{ e Evidence }

func gCluster(n int32) *gFix {
	f := &gFix{e: Evidence{StatefulSet: "etc", StsReplicas: n, Desired: n, Formed: true, PeerURL: gPeerURL, MaxLag: 100,
		Etcd: &etcd.Observed{Cluster: etcd.Cluster{ClusterID: 7}, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}}}
	for k := int32(0); k < n; k++ {
		f.member(k, false)
		f.e.Pods = append(f.e.Pods, Pod{Name: gName(k), Ordinal: k, Exists: true, Running: true, Ready: true, NodeReady: true,
			PVCExists: true, PVCUID: fmt.Sprintf("uid-%d", k)})
	}
	return f
}

func (f *gFix) member(k int32, learner bool) *gFix {
	f.e.Etcd.Cluster.Members = append(f.e.Etcd.Cluster.Members, etcd.Member{ID: gID(k), Name: gName(k),
		PeerURLs: []string{gPeerURL(gName(k))}, ClientURLs: []string{"http://" + gName(k) + ":2379"}, IsLearner: learner})
	f.e.Etcd.Status[gID(k)] = etcd.MemberStatus{ID: gID(k), Leader: gID(0), RaftIndex: 1000, IsLearner: learner}
	return f
}

func (f *gFix) noMembers() *gFix { f.e.Etcd = nil; return f }

func (f *gFix) unformed() *gFix { f.e.Etcd, f.e.Formed = nil, false; return f }

func (f *gFix) down(k int32) *gFix {
	delete(f.e.Etcd.Status, gID(k))
	f.e.Etcd.StatusErr[gID(k)] = errors.New("connection refused")
	return f
}

func (f *gFix) lag(k int32, n uint64) *gFix {
	st := f.e.Etcd.Status[gID(k)]
	st.RaftIndex = 1000 - n
	f.e.Etcd.Status[gID(k)] = st
	return f
}

// alarm puts err in every member's status, as etcd reports every active alarm of the cluster.
func (f *gFix) alarm(err string) *gFix {
	for id, st := range f.e.Etcd.Status {
		st.Errors = append(st.Errors, err)
		f.e.Etcd.Status[id] = st
	}
	return f
}

// noLeader: an election is under way; no member knows a leader.
func (f *gFix) noLeader() *gFix {
	for id, st := range f.e.Etcd.Status {
		st.Leader = 0
		f.e.Etcd.Status[id] = st
	}
	return f
}

func (f *gFix) pod(k int32, edit func(p *Pod)) *gFix {
	for i := range f.e.Pods {
		if f.e.Pods[i].Ordinal == k {
			edit(&f.e.Pods[i])
			return f
		}
	}
	p := Pod{Name: gName(k), Ordinal: k, NodeReady: true}
	edit(&p)
	f.e.Pods = append(f.e.Pods, p)
	return f
}

func (f *gFix) noPod(k int32) *gFix {
	return f.pod(k, func(p *Pod) { p.Exists, p.Running, p.Ready = false, false, false })
}

func (f *gFix) with(edit func(e *Evidence)) *gFix { edit(&f.e); return f }

// recorded keeps etcd's member list of the fixture as the operator's record (read with a
// quorum) and stamps every claim with its member's ID, as the operator does once members ran.
func (f *gFix) recorded() *gFix {
	rec := RecordOf(*f.e.Etcd, "etc", gPeerURL, f.e.StsReplicas, time.Time{})
	f.e.Record = &rec
	for i := range f.e.Pods {
		if f.e.Pods[i].PVCExists {
			f.e.Pods[i].DataStamp = etcd.FormatID(gID(f.e.Pods[i].Ordinal))
		}
	}
	return f
}

// quorumLost: no member can read the member list; the members in answering answer without a
// leader, the others not at all.
func (f *gFix) quorumLost(answering ...int32) *gFix {
	f.e.Etcd, f.e.Answers = nil, map[uint64]etcd.MemberStatus{}
	for _, k := range answering {
		f.e.Answers[gID(k)] = etcd.MemberStatus{ID: gID(k), Errors: []string{NoLeaderError}}
	}
	return f
}

// crashing: member k's etcd container waits in CrashLoopBackOff.
func (f *gFix) crashing(k int32) *gFix {
	return f.pod(k, func(p *Pod) { p.Running, p.Started, p.Ready, p.Problem = false, false, false, "CrashLoopBackOff" })
}

// claimGone: member k's claim no longer exists.
func (f *gFix) claimGone(k int32) *gFix {
	return f.pod(k, func(p *Pod) { p.PVCExists, p.PVCDeleting, p.PVCUID, p.DataStamp = false, false, "", "" })
}

// intent sets the membership change in flight.
func (f *gFix) intent(op IntentOp, k int32) *gFix {
	f.e.Intent = &Intent{Op: op, Member: gName(k), PeerURL: gPeerURL(gName(k))}
	if op != IntentAdd {
		f.e.Intent.ID = gID(k)
	}
	return f
}

// defragging records a defragmentation of etc-k started when every member had applied index
// 1000 and a 100 MiB database; since then the cluster committed up to 1200, which every
// member knows (so etc-k passes the lag check on its committed index) and every member but
// etc-k applied: its apply loop is blocked, its index frozen.
func (f *gFix) defragging(k int32) *gFix {
	for id, st := range f.e.Etcd.Status {
		st.RaftIndex, st.AppliedIndex, st.DBSize = 1200, 1200, 100<<20
		if id == gID(k) {
			st.AppliedIndex = 1000
		}
		f.e.Etcd.Status[id] = st
	}
	f.e.Defragmentation = &Defragmentation{Member: gName(k), ID: gID(k), AppliedIndex: 1000, RaftIndex: 1000, DBSize: 100 << 20}
	return f
}

// read records member k's answer to a read of its database in this pass (nil: served).
func (f *gFix) read(k int32, err error) *gFix {
	if f.e.Etcd.Reads == nil {
		f.e.Etcd.Reads = map[uint64]error{}
	}
	f.e.Etcd.Reads[gID(k)] = err
	return f
}

func (f *gFix) status(k int32, edit func(st *etcd.MemberStatus)) *gFix {
	st := f.e.Etcd.Status[gID(k)]
	edit(&st)
	f.e.Etcd.Status[gID(k)] = st
	return f
}

func TestGate(t *testing.T) {
	del := func(k int32) Step { return Step{Kind: DeletePod, Member: gName(k), Reason: v1alpha1.ReasonRollingOut} }
	defrag := func(k int32) Step {
		return Step{Kind: Defragment, Member: gName(k), ID: gID(k), Reason: v1alpha1.ReasonDefragmenting}
	}
	disarm := func(k int32, alarm string) Step {
		return Step{Kind: DisarmAlarm, Member: gName(k), ID: gID(k), Alarm: alarm, Reason: v1alpha1.ReasonDisarmingAlarm}
	}
	stopAll := Step{Kind: ScaleStatefulSet, Replicas: 0, Reason: v1alpha1.ReasonRecoveringFromBackup}
	beginDR := Step{Kind: "BeginRestore", Reason: v1alpha1.ReasonRecoveringFromBackup}
	remove := func(k int32, reason string) Step {
		return Step{Kind: RemoveMember, Member: gName(k), ID: gID(k), Reason: reason}
	}
	tests := []struct {
		name      string
		fix       *gFix
		step      Step
		invariant string // "" when the step passes
		why       string // a part of the refusal
	}{
		{"waits always pass", gCluster(3).with(func(e *Evidence) { e.SplitBrain = true }), Step{Kind: Wait}, "", ""},
		{"intents always pass", gCluster(3).with(func(e *Evidence) { e.Etcd = nil }), Step{Kind: RecordIntent}, "", ""},
		{"nothing during a split brain", gCluster(3).with(func(e *Evidence) { e.SplitBrain = true }), del(2), "OneClusterID", "cluster IDs"},
		{"nothing without etcd's member list", gCluster(3).with(func(e *Evidence) { e.Etcd = nil }), del(2), "EtcdIsTheTruth", "did not answer"},
		{"nothing without a leader", gCluster(3).with(func(e *Evidence) {
			for id, st := range e.Etcd.Status {
				st.Leader = 0
				e.Etcd.Status[id] = st
			}
		}), Step{Kind: AddLearner, Member: "etc-3"}, "EtcdIsTheTruth", "no leader"},

		// Path 1: a rollout must not restart a second member while one is missing.
		{"restart a follower of a healthy cluster", gCluster(3), del(2), "", ""},
		{"restart while a voter's pod was not re-created", gCluster(3).down(2).noPod(2), del(1), "VotersUpBeforeDisruption", "etc-2: it does not answer"},
		{"restart while a voter lags", gCluster(3).lag(2, 500), del(1), "VotersUpBeforeDisruption", "trails the leader by 500"},
		{"restart while a voter reports an alarm", gCluster(3).with(func(e *Evidence) {
			st := e.Etcd.Status[gID(2)]
			st.Errors = []string{"NOSPACE"}
			e.Etcd.Status[gID(2)] = st
		}), del(1), "VotersUpBeforeDisruption", "NOSPACE"},
		{"restart while a voter's data is gone", gCluster(3).pod(2, func(p *Pod) { p.PVCFresh = true }), del(1), "VotersUpBeforeDisruption", "re-created"},
		{"an election in progress is no alarm", gCluster(3).with(func(e *Evidence) {
			st := e.Etcd.Status[gID(2)]
			st.Errors = []string{NoLeaderError}
			e.Etcd.Status[gID(2)] = st
		}), del(1), "", ""},
		{"restart a member that is down anyway", gCluster(3).down(2), del(2), "", ""},
		{"restart a down member when a second is down", gCluster(3).down(1).down(2), del(2), "VotersUpBeforeDisruption", "quorum of 3 needs 2"},
		{"restart the only member", gCluster(1), del(0), "", ""},
		{"delete the pod of a learner", gCluster(3).member(3, true).down(1), del(3), "", ""},

		{"remove a lost member, the rest healthy", gCluster(3).down(2), remove(2, v1alpha1.ReasonReplaceMember), "", ""},
		{"remove a lost member of five with two lost", gCluster(5).down(3).down(4), remove(4, v1alpha1.ReasonReplaceMember), "", ""},
		{"remove a lost member when quorum would not remain", gCluster(3).down(1).down(2), remove(2, v1alpha1.ReasonReplaceMember), "VotersUpBeforeDisruption", "needs 2"},
		{"remove the last member", gCluster(1).down(0), remove(0, v1alpha1.ReasonReplaceMember), "EtcdIsTheTruth", "no leader"},
		{"replace a healthy voter", gCluster(3), remove(2, v1alpha1.ReasonReplaceMember), "NoHealthyVoterRemoved", "healthy voting member"},
		{"scale in a healthy voter", gCluster(3).with(func(e *Evidence) { e.Desired = 1 }), remove(2, v1alpha1.ReasonScaleIn), "", ""},
		{"scale in at the wanted size", gCluster(3), remove(2, v1alpha1.ReasonScaleIn), "NoHealthyVoterRemoved", "spec.replicas 3"},
		{"scale in while another voter is down", gCluster(3).down(1).with(func(e *Evidence) { e.Desired = 1 }), remove(2, v1alpha1.ReasonScaleIn),
			"VotersUpBeforeDisruption", "etc-1"},
		{"replace a voter whose claim is gone", gCluster(3).pod(2, func(p *Pod) { p.PVCExists = false }), remove(2, v1alpha1.ReasonReplaceMember), "", ""},
		{"an answering voter whose pod and claim the cache does not show yet is not gone", gCluster(3).with(func(e *Evidence) { e.Pods = e.Pods[:2] }),
			remove(2, v1alpha1.ReasonReplaceMember), "NoHealthyVoterRemoved", "healthy voting member"},
		{"a silent voter with neither pod nor claim is gone", gCluster(3).down(2).with(func(e *Evidence) { e.Pods = e.Pods[:2] }),
			remove(2, v1alpha1.ReasonReplaceMember), "", ""},
		{"remove a learner", gCluster(3).member(3, true), remove(3, v1alpha1.ReasonScaleIn), "", ""},

		{"add a learner", gCluster(3), Step{Kind: AddLearner, Member: "etc-3", PeerURL: gPeerURL("etc-3")}, "", ""},
		{"add a second learner", gCluster(3).member(3, true), Step{Kind: AddLearner, Member: "etc-4"}, "OneLearner", "etc-3"},
		{"promote a caught-up learner", gCluster(3).member(3, true), Step{Kind: PromoteLearner, ID: gID(3)}, "", ""},
		{"promote a lagging learner", gCluster(3).member(3, true).lag(3, 500), Step{Kind: PromoteLearner, ID: gID(3)}, "PromoteOnlyCaughtUpLearners", "trails"},
		{"promote a silent learner", gCluster(3).member(3, true).down(3), Step{Kind: PromoteLearner, ID: gID(3)}, "PromoteOnlyCaughtUpLearners", "does not answer"},
		{"promote a voter", gCluster(3), Step{Kind: PromoteLearner, ID: gID(2)}, "PromoteOnlyCaughtUpLearners", "not a learner"},

		{"move leadership to a healthy voter", gCluster(3), Step{Kind: MoveLeader, ID: gID(0), Target: gID(1)}, "", ""},
		{"move leadership to a lagging voter", gCluster(3).lag(1, 500), Step{Kind: MoveLeader, ID: gID(0), Target: gID(1)}, "LeaderMovesToAHealthyVoter", "trails"},
		{"move leadership to a learner", gCluster(3).member(3, true), Step{Kind: MoveLeader, ID: gID(0), Target: gID(3)}, "LeaderMovesToAHealthyVoter", "not a voting member"},
		{"move leadership from a follower", gCluster(3), Step{Kind: MoveLeader, ID: gID(1), Target: gID(2)}, "LeaderMovesToAHealthyVoter", "does not lead"},

		// Maintenance: a defragmentation takes its member down while it runs; the leader goes
		// last, after leadership moved; only NOSPACE is ever disarmed.
		{"defragment a follower of a healthy cluster", gCluster(3), defrag(2), "", ""},
		{"defragment while another voter is down", gCluster(3).down(2), defrag(1), "VotersUpBeforeDisruption", "etc-2: it does not answer"},
		{"defragment while another voter lags", gCluster(3).lag(2, 500), defrag(1), "VotersUpBeforeDisruption", "trails the leader by 500"},
		{"defragment a follower when two are down", gCluster(3).down(1).down(2), defrag(2), "VotersUpBeforeDisruption", "quorum of 3 needs 2"},
		{"defragment under a NOSPACE alarm every member reports", gCluster(3).alarm("memberID:257 alarm:NOSPACE"), defrag(1), "", ""},
		{"defragment under a CORRUPT alarm", gCluster(3).alarm("memberID:257 alarm:CORRUPT"), defrag(1), "VotersUpBeforeDisruption", "alarm:CORRUPT"},
		{"defragment a learner while a voter is down", gCluster(3).member(3, true).down(2), defrag(3), "", ""},
		{"defragment the leader of three", gCluster(3), defrag(0), "NoDefragmentOfTheLeader", "leads 3 voting members"},
		{"defragment the only member", gCluster(1), defrag(0), "", ""},
		{"defragment the only voter beside a learner", gCluster(1).member(1, true), defrag(0), "", ""},
		{"defragment the former leader", gCluster(3).with(func(e *Evidence) {
			for id, st := range e.Etcd.Status {
				st.Leader = gID(1)
				e.Etcd.Status[id] = st
			}
		}), defrag(0), "", ""},
		{"defragment without a leader", gCluster(1).with(func(e *Evidence) {
			st := e.Etcd.Status[gID(0)]
			st.Leader = 0
			e.Etcd.Status[gID(0)] = st
		}), defrag(0), "EtcdIsTheTruth", "no leader"},
		{"move leadership for a defragmentation under NOSPACE", gCluster(3).alarm("memberID:257 alarm:NOSPACE"),
			Step{Kind: MoveLeader, ID: gID(0), Target: gID(1), Reason: v1alpha1.ReasonDefragmenting}, "", ""},
		{"move leadership for a rollout under NOSPACE", gCluster(3).alarm("memberID:257 alarm:NOSPACE"),
			Step{Kind: MoveLeader, ID: gID(0), Target: gID(1), Reason: v1alpha1.ReasonRollingOut}, "LeaderMovesToAHealthyVoter", "alarm:NOSPACE"},
		{"restart under NOSPACE", gCluster(3).alarm("memberID:257 alarm:NOSPACE"), del(2), "VotersUpBeforeDisruption", "alarm:NOSPACE"},
		{"compact", gCluster(3), Step{Kind: Compact, Revision: 42}, "", ""},
		{"compact without a leader", gCluster(3).noLeader(), Step{Kind: Compact, Revision: 42}, "EtcdIsTheTruth", "no leader"},
		// Path 5: a recorded defragmentation counts as a disruption until its member answers
		// with an applied index that moved (or a database that shrank); a frozen index that
		// passes the lag check on the committed index does not count as caught up.
		{"a second defragmentation while one is recorded", gCluster(3).defragging(1), defrag(2),
			"DefragmentationCountsAsDisruption", "etc-1 is being defragmented"},
		{"the same member defragmented again while its record stands", gCluster(3).defragging(1), defrag(1),
			"DefragmentationCountsAsDisruption", "etc-1 is being defragmented"},
		{"restart another voter while a defragmentation is recorded", gCluster(3).defragging(1), del(2),
			"DefragmentationCountsAsDisruption", "applied index stays at 1000"},
		{"remove another voter while a defragmentation is recorded", gCluster(3).defragging(1).down(2), remove(2, v1alpha1.ReasonReplaceMember),
			"DefragmentationCountsAsDisruption", "etc-1 is being defragmented"},
		{"move leadership to the member being defragmented", gCluster(3).defragging(1), Step{Kind: MoveLeader, ID: gID(0), Target: gID(1)},
			"DefragmentationCountsAsDisruption", "etc-1 is being defragmented"},
		{"a defragmented member that does not answer", gCluster(3).defragging(1).down(1), del(2), "DefragmentationCountsAsDisruption", "does not answer"},
		{"an unreadable defragmentation record", gCluster(3).with(func(e *Evidence) { e.Defragmentation = &Defragmentation{Unreadable: "bad JSON"} }), del(2),
			"DefragmentationCountsAsDisruption", "unreadable"},
		{"restart another voter once the defragmented member applied past its record and served a read", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) {
			st.AppliedIndex = 1001
		}).read(1, nil), del(2), "", ""},
		{"no restart of another voter while the defragmented member applies entries but serves no read", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) {
			st.AppliedIndex = 1001
		}).read(1, context.DeadlineExceeded), del(2), "DefragmentationCountsAsDisruption", "serves no read of its database"},
		{"restart another voter once the defragmented member's database shrank", gCluster(3).defragging(1).status(1, func(st *etcd.MemberStatus) {
			st.DBSize = 30 << 20
		}), del(2), "", ""},
		{"restart the member being defragmented itself", gCluster(3).defragging(1), del(1), "", ""},
		{"delete a learner's pod while a defragmentation is recorded", gCluster(3).member(3, true).defragging(1), del(3), "", ""},
		{"compact while a defragmentation is recorded", gCluster(3).defragging(1), Step{Kind: Compact, Revision: 42}, "", ""},
		{"disarm NOSPACE", gCluster(3).alarm("memberID:257 alarm:NOSPACE"), disarm(1, AlarmNoSpace), "", ""},
		{"disarm NOSPACE without a leader", gCluster(3).noLeader(), disarm(1, AlarmNoSpace), "EtcdIsTheTruth", "no leader"},
		{"disarm CORRUPT", gCluster(3).alarm("memberID:257 alarm:CORRUPT"), disarm(1, AlarmCorrupt), "NeverDisarmCorrupt", "never disarmed"},
		{"disarm an alarm without a type", gCluster(3), disarm(1, ""), "NeverDisarmCorrupt", "only a NOSPACE alarm"},

		// Restores: disaster recovery only on evidence that quorum is lost and that a quorum
		// of the voters etcd last listed lost its data; a bootstrap restore only before the
		// cluster formed.
		{"stop a serving cluster for disaster recovery", gCluster(3).recorded().down(2), stopAll,
			"RestoreOnlyWithoutQuorum", "the cluster serves"},
		{"stop a cluster that lost quorum and two members' data", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2).claimGone(1).claimGone(2), stopAll, "", ""},
		{"begin a recovery of a cluster that lost quorum and two members' data", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2).claimGone(1).claimGone(2), beginDR, "", ""},
		{"stop a cluster the operator cannot reach", gCluster(3).recorded().quorumLost().claimGone(1).claimGone(2), stopAll,
			"RestoreOnlyWithoutQuorum", "etc-1: its etcd container runs but did not answer"},
		{"stop a cluster whose silent members' nodes are not ready", gCluster(3).recorded().quorumLost().crashing(0).claimGone(1).claimGone(2).
			pod(1, func(p *Pod) { p.NodeReady = false }).pod(2, func(p *Pod) { p.NodeReady = false }), stopAll,
			"RestoreOnlyWithoutQuorum", "its node is not ready"},
		{"stop a cluster without a recorded member list", gCluster(3).quorumLost(0, 1, 2).claimGone(1).claimGone(2), stopAll,
			"RestoreOnlyWithoutQuorum", "no member list read with a quorum is recorded"},
		{"stop a cluster a member of which follows a leader", gCluster(3).recorded().quorumLost().with(func(e *Evidence) {
			e.Answers[gID(1)] = etcd.MemberStatus{ID: gID(1), Leader: gID(0)}
		}), stopAll, "RestoreOnlyWithoutQuorum", "follows leader"},
		{"stop a cluster whose members only crash", gCluster(3).recorded().quorumLost(0).crashing(1).crashing(2), stopAll,
			"RestoreOnlyWhenAQuorumLostItsData", "3 of 3 recorded voting members keep their data"},
		{"stop a cluster whose claims are deleted while their pods hold them", gCluster(3).recorded().quorumLost(0).crashing(1).crashing(2).
			pod(1, func(p *Pod) { p.PVCDeleting, p.PVCHeld = true, true }).pod(2, func(p *Pod) { p.PVCDeleting, p.PVCHeld = true, true }), beginDR,
			"RestoreOnlyWhenAQuorumLostItsData", "3 of 3"},
		{"stop a cluster whose claims are deleted and no pod holds them", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2).
			pod(1, func(p *Pod) { p.PVCDeleting = true }).pod(2, func(p *Pod) { p.PVCDeleting = true }), stopAll, "", ""},
		{"stop a cluster during a scale-out that lost one claim", gCluster(3).with(func(e *Evidence) { e.StsReplicas = 3; e.Desired = 4 }).recorded().
			intent(IntentAdd, 3).quorumLost(1, 2).noPod(0).claimGone(0), beginDR,
			"RestoreOnlyWhenAQuorumLostItsData", "2 of 3 recorded voting members keep their data (etc-1, etc-2)"},
		{"stop a cluster whose learner may have been promoted", gCluster(2).member(2, true).pod(2, func(p *Pod) { p.Exists, p.Running, p.PVCExists = true, true, true }).
			recorded().intent(IntentAdd, 2).quorumLost(1, 2).noPod(0).claimGone(0), stopAll,
			"RestoreOnlyWhenAQuorumLostItsData", "a membership change was in flight"},
		{"stop a cluster whose membership intent cannot be read", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2).claimGone(1).claimGone(2).
			with(func(e *Evidence) { e.Intent = &Intent{Op: "unreadable", Reason: "bad JSON"} }), stopAll,
			"RestoreOnlyWithoutQuorum", "the membership change in flight cannot be read"},
		{"stop a cluster whose removed voter may be gone", gCluster(3).recorded().intent(IntentRemove, 2).quorumLost(1).noPod(0).noPod(2).claimGone(0).claimGone(2), stopAll, "", ""},
		{"stop a cluster whose claims hold other members' data", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2).
			pod(1, func(p *Pod) { p.DataStamp = "dead" }).pod(2, func(p *Pod) { p.DataStamp = "" }), stopAll, "", ""},
		{"re-form after every member stopped", gCluster(3).quorumLost().with(func(e *Evidence) { e.StsReplicas, e.Pods = 0, nil }),
			Step{Kind: "RunRestorePod", Member: "etc-0", Reason: v1alpha1.ReasonRecoveringFromBackup}, "", ""},
		{"bootstrap restore of a formed cluster", gCluster(3), Step{Kind: "RunRestorePod", Member: "etc-0", Reason: v1alpha1.ReasonRestoring},
			"RestoreOnlyWithoutQuorum", "has formed"},
		// Authentication changes only with a healthy quorum.
		{"move a peer URL the member answers at", gCluster(3).with(func(e *Evidence) { e.PeerURLAnswers = map[string]string{"https://etc-1:2382": ""} }),
			Step{Kind: UpdatePeerURL, Member: "etc-1", ID: gID(1), PeerURL: "https://etc-1:2382"}, "", ""},
		{"move a peer URL nobody asked at", gCluster(3),
			Step{Kind: UpdatePeerURL, Member: "etc-1", ID: gID(1), PeerURL: "https://etc-1:2382"}, "PeerURLMovesToAnAnsweringListener", "nobody asked"},
		{"move a peer URL the member does not answer at", gCluster(3).with(func(e *Evidence) { e.PeerURLAnswers = map[string]string{"https://etc-1:2382": "connection refused"} }),
			Step{Kind: UpdatePeerURL, Member: "etc-1", ID: gID(1), PeerURL: "https://etc-1:2382"}, "PeerURLMovesToAnAnsweringListener", "connection refused"},
		{"move a peer URL while another voter is down", gCluster(3).down(2).with(func(e *Evidence) { e.PeerURLAnswers = map[string]string{"https://etc-1:2382": ""} }),
			Step{Kind: UpdatePeerURL, Member: "etc-1", ID: gID(1), PeerURL: "https://etc-1:2382"}, "PeerURLMovesToAnAnsweringListener", "2 of 3 voters are healthy"},
		{"move the peer URL of a member etcd does not list", gCluster(3).with(func(e *Evidence) { e.PeerURLAnswers = map[string]string{"https://etc-7:2382": ""} }),
			Step{Kind: UpdatePeerURL, Member: "etc-7", ID: gID(7), PeerURL: "https://etc-7:2382"}, "PeerURLMovesToAnAnsweringListener", "not in etcd's member list"},
		// Storage: claims grow and the StatefulSet is re-created only on a settled cluster.
		{"grow a claim", gCluster(3), Step{Kind: ExpandClaim, Member: "etc-1", Size: "2Gi"}, "", ""},
		{"grow a claim while a member is down (it does not disturb it)", gCluster(3).down(2), Step{Kind: ExpandClaim, Member: "etc-1", Size: "2Gi"}, "", ""},
		{"grow a claim during a membership change", gCluster(3).with(func(e *Evidence) { e.Intent = &Intent{Op: IntentReplace, Member: "etc-2"} }),
			Step{Kind: ExpandClaim, Member: "etc-1", Size: "2Gi"}, "StorageChangesOnASettledCluster", "membership change is recorded"},
		{"grow a claim being deleted", gCluster(3).pod(1, func(p *Pod) { p.PVCDeleting = true }),
			Step{Kind: ExpandClaim, Member: "etc-1", Size: "2Gi"}, "StorageChangesOnASettledCluster", "being deleted"},
		{"grow an emptyDir", gCluster(3).pod(1, func(p *Pod) { p.Ephemeral = true }),
			Step{Kind: ExpandClaim, Member: "etc-1", Size: "2Gi"}, "StorageChangesOnASettledCluster", "no volume claim"},
		{"re-create the StatefulSet", gCluster(3), Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "", ""},
		{"re-create the StatefulSet during a defragmentation", gCluster(3).with(func(e *Evidence) { e.Defragmentation = &Defragmentation{Member: "etc-1", ID: gID(1)} }),
			Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "StorageChangesOnASettledCluster", "defragmentation of etc-1"},
		{"re-create the StatefulSet while a member pod is being deleted", gCluster(3).pod(1, func(p *Pod) { p.Deleting = true }),
			Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "StorageChangesOnASettledCluster", "etc-1 is being deleted"},
		{"re-create the StatefulSet while a member pod is missing", gCluster(3).noPod(2),
			Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "StorageChangesOnASettledCluster", "ordinal 2 does not exist"},
		{"re-create the StatefulSet while a pod runs above its replicas", gCluster(3).pod(3, func(p *Pod) { p.Exists, p.Ready = true, true }),
			Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "StorageChangesOnASettledCluster", "runs above the StatefulSet's 3 replicas"},
		{"re-create the StatefulSet before formation", gCluster(3).with(func(e *Evidence) { e.Formed = false }),
			Step{Kind: RecreateStatefulSet, Size: "2Gi"}, "StorageChangesOnASettledCluster", "not formed"},
		{"turn auth on in a healthy cluster", gCluster(3).down(2), Step{Kind: EnableAuth, Reason: v1alpha1.ReasonEnablingAuth}, "", ""},
		{"turn auth on without a healthy quorum", gCluster(3).down(1).down(2), Step{Kind: EnableAuth, Reason: v1alpha1.ReasonEnablingAuth},
			"AuthChangesWithAHealthyQuorum", "fewer than quorum"},
		{"add a user while a voter lags", gCluster(3).lag(1, 500).lag(2, 500), Step{Kind: EnsureRootUser, User: "root", Reason: v1alpha1.ReasonEnablingAuth},
			"AuthChangesWithAHealthyQuorum", "fewer than quorum"},
		// The operator keeps a root user: never removes its own, and renames its certificate
		// only to a user etcd reported as root in this pass.
		{"remove the operator's own user", gCluster(3).with(authOf("etcd-pilot", true, "etcd-pilot")),
			Step{Kind: RemoveUser, User: "etcd-pilot", Reason: v1alpha1.ReasonRenamingOperatorUser}, "OperatorKeepsARootUser", "the one the operator authenticates as"},
		{"remove root", gCluster(3).with(authOf("own", true, "own")),
			Step{Kind: RemoveUser, User: "root", Reason: v1alpha1.ReasonRenamingOperatorUser}, "OperatorKeepsARootUser", "root"},
		{"remove the former user", gCluster(3).with(authOf("own", true, "own", "etcd-pilot")),
			Step{Kind: RemoveUser, User: "etcd-pilot", Reason: v1alpha1.ReasonRenamingOperatorUser}, "", ""},
		{"remove the former user without a healthy quorum", gCluster(3).down(1).down(2).with(authOf("own", true, "own", "etcd-pilot")),
			Step{Kind: RemoveUser, User: "etcd-pilot", Reason: v1alpha1.ReasonRenamingOperatorUser}, "AuthChangesWithAHealthyQuorum", "fewer than quorum"},
		{"adopt a user etcd has as root", gCluster(3).with(authOf("etcd-pilot", true, "etcd-pilot", "own")),
			Step{Kind: AdoptOperatorUser, User: "own", Reason: v1alpha1.ReasonRenamingOperatorUser}, "", ""},
		{"adopt a user without the root role", gCluster(3).with(authOf("etcd-pilot", true, "etcd-pilot")),
			Step{Kind: AdoptOperatorUser, User: "own", Reason: v1alpha1.ReasonRenamingOperatorUser}, "OperatorKeepsARootUser", "no root role"},
		{"adopt a user with authentication off", gCluster(3).with(authOf("etcd-pilot", false)),
			Step{Kind: AdoptOperatorUser, User: "own", Reason: v1alpha1.ReasonRenamingOperatorUser}, "", ""},
		{"adopt a user without a reading of etcd's users", gCluster(3),
			Step{Kind: AdoptOperatorUser, User: "own", Reason: v1alpha1.ReasonRenamingOperatorUser}, "OperatorKeepsARootUser", "not read"},
		{"finish a restore before formation", gCluster(3).unformed(), Step{Kind: "FinishRestore", Reason: v1alpha1.ReasonRestored}, "", ""},
		{"clean up after a restore", gCluster(3), Step{Kind: "CleanUpRestore", Member: "etc-0", Reason: v1alpha1.ReasonRestored}, "", ""},
		{"a member step with a restore's reason", gCluster(3).noMembers(), Step{Kind: DeletePod, Member: "etc-0", Reason: v1alpha1.ReasonRestored},
			"EtcdIsTheTruth", "member list"},
		{"bootstrap restore before formation", gCluster(3).unformed(), Step{Kind: "RunRestorePod", Member: "etc-0", Reason: v1alpha1.ReasonRestoring}, "", ""},

		// Path 3: no claim to delete under emptyDir storage, and never a voter's.
		{"delete a learner's claim", gCluster(3).member(3, true).pod(3, func(p *Pod) { p.Exists, p.PVCExists = true, true }),
			Step{Kind: DeletePVC, Member: "etc-3"}, "", ""},
		{"delete a voter's claim", gCluster(3), Step{Kind: DeletePVC, Member: "etc-2"}, "ClaimsOnlyOfNonVoters", "voting member etc-2"},
		{"delete a claim that does not exist", gCluster(3).member(3, true), Step{Kind: DeletePVC, Member: "etc-3"}, "ClaimsOnlyOfNonVoters", "no volume claim"},
		{"delete a claim under emptyDir storage", gCluster(3).member(3, true).pod(3, func(p *Pod) { p.Exists, p.PVCExists, p.Ephemeral = true, true, true }),
			Step{Kind: DeletePVC, Member: "etc-3"}, "ClaimsOnlyOfNonVoters", "emptyDir"},
		{"delete the claim of an unstarted voter found by peer URL", gCluster(3).with(func(e *Evidence) {
			e.Etcd.Cluster.Members[2].Name = ""
		}), Step{Kind: DeletePVC, Member: "etc-2"}, "ClaimsOnlyOfNonVoters", "voting member etc-2"},

		// Path 4: the founders are fixed until the cluster forms.
		{"size the StatefulSet to the founders", gCluster(3).with(func(e *Evidence) { e.Formed, e.Etcd, e.Founders, e.Desired = false, nil, 3, 5 }),
			Step{Kind: ScaleStatefulSet, Replicas: 3}, "", ""},
		{"resize during formation", gCluster(3).with(func(e *Evidence) { e.Formed, e.Etcd, e.Founders, e.Desired = false, nil, 3, 5 }),
			Step{Kind: ScaleStatefulSet, Replicas: 5}, "FoundersFixedUntilFormed", "3 founding members"},
		{"shrink below a voter", gCluster(3), Step{Kind: ScaleStatefulSet, Replicas: 2}, "ScaleDownOnlyPodsWithoutVoters", "etc-2"},
		{"shrink above the voters", gCluster(3).with(func(e *Evidence) { e.StsReplicas = 4 }), Step{Kind: ScaleStatefulSet, Replicas: 3}, "", ""},
		{"grow", gCluster(3), Step{Kind: ScaleStatefulSet, Replicas: 4}, "", ""},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.step, tt.fix.e)
			switch {
			case tt.invariant == "" && r != nil:
				t.Fatalf("refused: %v", r)
			case tt.invariant != "" && r == nil:
				t.Fatalf("passed, want a refusal by %s", tt.invariant)
			case r != nil && (r.Invariant != tt.invariant || !strings.Contains(r.Why, tt.why)):
				t.Fatalf("refused by %v, want %s with %q", r, tt.invariant, tt.why)
			}
		})
		seen[tt.invariant] = true
	}
	for _, inv := range Invariants {
		if !seen[inv.Name] {
			t.Errorf("invariant %s has no refusal in the table", inv.Name)
		}
	}
}

func TestGateTurnsARefusalIntoAWait(t *testing.T) {
	s := Gate(Step{Kind: DeletePod, Member: "etc-1"}, gCluster(3).down(2).e)
	if s.Kind != Wait || s.Reason != v1alpha1.ReasonStepRefused || !strings.Contains(s.Message, "VotersUpBeforeDisruption") {
		t.Fatalf("got %+v", s)
	}
}

// BenchmarkGate is the cost of passing one step through every invariant for a 7-member
// cluster with a learner: the gate runs once per pass, so it must stay far below a pass.
func BenchmarkGate(b *testing.B) {
	f := gCluster(7).member(7, true)
	steps := []Step{
		{Kind: DeletePod, Member: gName(6), Reason: v1alpha1.ReasonRollingOut},
		{Kind: RemoveMember, Member: gName(6), ID: gID(6), Reason: v1alpha1.ReasonScaleIn},
		{Kind: PromoteLearner, ID: gID(7)},
		{Kind: ScaleStatefulSet, Replicas: 8},
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = Check(steps[i%len(steps)], f.e)
	}
}

func TestSamePeerHost(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"http://etc-0.etc.ns.svc:2380", "https://etc-0.etc.ns.svc:2382", true},
		{"http://etc-0.etc.ns.svc:2380", "http://etc-1.etc.ns.svc:2380", false},
		{"https://[fd00::1]:2380", "http://[fd00::1]:2382", true},
		{"etc-0", "etc-0", true},
		{"etc-0", "http://etc-0:2380", false},
	} {
		if got := SamePeerHost(c.a, c.b); got != c.want {
			t.Errorf("SamePeerHost(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// authOf is evidence of etcd's authentication (on or off) read in this pass, with the root
// role for the users roots, and the operator authenticating as operator.
func authOf(operator string, on bool, roots ...string) func(*Evidence) {
	return func(e *Evidence) {
		st := &etcd.AuthState{Enabled: on, Roles: map[string][]string{"root": {"root"}}}
		for _, u := range roots {
			st.Roles[u] = []string{"root"}
		}
		e.Auth, e.OperatorUser = st, operator
	}
}

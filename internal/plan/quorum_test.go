package plan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

func TestMemberRecordRoundTrip(t *testing.T) {
	o := etcd.Observed{Cluster: etcd.Cluster{ClusterID: 0xfeed, Members: []etcd.Member{
		{ID: 0xb2, Name: "etc-1", PeerURLs: []string{gPeerURL("etc-1")}},
		{ID: 0xa1, Name: "etc-0", PeerURLs: []string{gPeerURL("etc-0")}},
		// A learner that has not started: named by the pod of its peer URL.
		{ID: 0xc3, PeerURLs: []string{gPeerURL("etc-2")}, IsLearner: true},
	}}}
	rec := RecordOf(o, "etc", gPeerURL, 2, time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC))
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"clusterID":"feed"`) || !strings.Contains(string(b), `"id":"c3","name":"etc-2"`) {
		t.Fatalf("record %s: IDs in hexadecimal, the unstarted learner named by its peer URL", b)
	}
	var back MemberRecord
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.SameMembers(rec) || !back.Since.Equal(rec.Since) {
		t.Fatalf("round trip: %+v, want %+v", back, rec)
	}
	if got := len(back.Voters()); got != 2 {
		t.Fatalf("%d voters, want 2", got)
	}
	// Sorted by ID, so the same list read in another order is the same record.
	if back.Members[0].ID != 0xa1 {
		t.Fatalf("members not sorted by ID: %+v", back.Members)
	}
	for _, bad := range []string{`{"clusterID":"zz","members":[]}`, `{"clusterID":"1","members":[{"id":"0"}]}`, `not json`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestPossibleVoterSets(t *testing.T) {
	rec := MemberRecord{Members: []RecordedMember{{ID: 1, Name: "a"}, {ID: 2, Name: "b"}, {ID: 3, Name: "c"}, {ID: 4, Name: "d", Learner: true}}}
	names := func(sets [][]RecordedMember) []string {
		var out []string
		for _, s := range sets {
			var n []string
			for _, m := range s {
				n = append(n, m.Name)
			}
			slices.Sort(n)
			out = append(out, strings.Join(n, ""))
		}
		slices.Sort(out)
		return out
	}
	for _, tt := range []struct {
		in   *Intent
		want []string
	}{
		{nil, []string{"abc", "abcd"}},
		{&Intent{Op: IntentAdd, Member: "d"}, []string{"abc", "abcd"}},
		{&Intent{Op: IntentRemove, ID: 3}, []string{"ab", "abc", "abcd", "abd"}},
		{&Intent{Op: IntentReplace, ID: 2}, []string{"abc", "abcd", "ac", "acd"}},
		{&Intent{Op: IntentRemove, ID: 9}, []string{"abc", "abcd"}},
	} {
		if got := names(PossibleVoterSets(rec, tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("intent %+v: sets %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestJudgeQuorumNeedsEvidence: quorum is lost only when every voter that might serve is
// shown not to (answered without a leader, no pod, no running etcd); otherwise it is Unknown.
func TestJudgeQuorumNeedsEvidence(t *testing.T) {
	for _, tt := range []struct {
		name string
		fix  *gFix
		want QuorumState
	}{
		{"serving", gCluster(3).recorded().down(2), QuorumServing},
		{"one answers without a leader, two pods gone", gCluster(3).recorded().quorumLost(0).noPod(1).noPod(2), QuorumLost},
		{"one answers without a leader, two crash", gCluster(3).recorded().quorumLost(0).crashing(1).crashing(2), QuorumLost},
		{"one answers without a leader, one crashes, one runs silent", gCluster(3).recorded().quorumLost(0).crashing(1), QuorumLost},
		{"none answers, all run", gCluster(3).recorded().quorumLost(), QuorumUnknown},
		{"none answers, two run", gCluster(3).recorded().quorumLost().crashing(0), QuorumUnknown},
		{"all answer without a leader, no record", gCluster(3).quorumLost(0, 1, 2), QuorumUnknown},
		{"a member answers with a leader", gCluster(3).recorded().quorumLost().with(func(e *Evidence) {
			e.Answers[gID(2)] = etcd.MemberStatus{ID: gID(2), Leader: gID(1)}
		}), QuorumUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEvidenceView(tt.fix.e)
			got, why := JudgeQuorum(v.quorumEvidence())
			if got != tt.want {
				t.Fatalf("%s (%s), want %s", got, why, tt.want)
			}
			if got != QuorumServing && why == "" {
				t.Fatalf("%s without a reason", got)
			}
		})
	}
}

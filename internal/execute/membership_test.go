package execute

import (
	"context"
	"crypto/tls"
	"slices"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// recordingClient records the steps sent to it; any other call panics (nil interface).
type recordingClient struct {
	etcd.Client
	added [][]string
}

func (c *recordingClient) AddLearner(_ context.Context, peerURLs []string) (etcd.Member, error) {
	c.added = append(c.added, peerURLs)
	return etcd.Member{ID: 9}, nil
}

func (c *recordingClient) Promote(context.Context, uint64) error { return nil }

func (c *recordingClient) Close() error { return nil }

// A member add goes to the leader alone: etcd refuses it on a member connected to a quorum
// for less than 5 s, which the member promoted a moment ago is. Other steps use every member
// that answered.
func TestMemberAddGoesToTheLeader(t *testing.T) {
	observed := &etcd.Observed{
		Cluster: etcd.Cluster{Members: []etcd.Member{
			{ID: 1, Name: "etcd-0", ClientURLs: []string{"https://etcd-0:2379"}},
			{ID: 2, Name: "etcd-1", ClientURLs: []string{"https://etcd-1:2379"}},
			{ID: 3, Name: "etcd-2", ClientURLs: []string{"https://etcd-2:2379"}},
		}},
		Status: map[uint64]etcd.MemberStatus{1: {ID: 1, Leader: 2}, 2: {ID: 2, Leader: 2}, 3: {ID: 3, Leader: 2}},
	}
	var dialed [][]string
	cl := &recordingClient{}
	x := &Executor{Dial: func(_ context.Context, endpoints []string, _ *tls.Config) (etcd.Client, error) {
		dialed = append(dialed, endpoints)
		return cl, nil
	}}
	mo := membership.Observation{Etcd: observed}
	if err := x.etcdStep(context.Background(), render.Topology{}, mo, plan.Step{Kind: plan.AddLearner, PeerURL: "https://etcd-3:2380"}); err != nil {
		t.Fatal(err)
	}
	if len(dialed) != 1 || !slices.Equal(dialed[0], []string{"https://etcd-1:2379"}) || len(cl.added) != 1 {
		t.Fatalf("member add dialed %v, added %v; want the leader etcd-1 alone", dialed, cl.added)
	}
	if err := x.etcdStep(context.Background(), render.Topology{}, mo, plan.Step{Kind: plan.PromoteLearner, ID: 9}); err != nil {
		t.Fatal(err)
	}
	if len(dialed[1]) != 3 {
		t.Fatalf("a promote dialed %v, want every member that answered", dialed[1])
	}
	// No agreed leader: every member, as before.
	observed.Status[3] = etcd.MemberStatus{ID: 3, Leader: 1}
	if err := x.etcdStep(context.Background(), render.Topology{}, mo, plan.Step{Kind: plan.AddLearner, PeerURL: "https://etcd-3:2380"}); err != nil {
		t.Fatal(err)
	}
	if len(dialed[2]) != 3 {
		t.Fatalf("with no agreed leader the add dialed %v, want every member that answered", dialed[2])
	}
}

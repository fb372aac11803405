package etcd

import (
	"context"
	"fmt"
	"sync"
)

// Fake is an in-memory Client for tests of error paths and of controllers that run without
// etcd processes. Set Err* fields to inject failures. It is safe for concurrent use.
type Fake struct {
	mu sync.Mutex

	// State is the cluster the fake reports; Statuses the per-endpoint status replies.
	State    Cluster
	Statuses map[string]MemberStatus

	// Injected errors.
	ErrMemberList error
	ErrStatus     map[string]error

	// Calls counts the calls by method name.
	Calls map[string]int

	nextID uint64
}

// FakeDialer returns a Dialer that always hands out f.
func FakeDialer(f *Fake) Dialer {
	return func(context.Context, []string) (Client, error) { return f, nil }
}

func (f *Fake) count(name string) {
	if f.Calls == nil {
		f.Calls = map[string]int{}
	}
	f.Calls[name]++
}

// SetLeader makes every member report leader as the leader.
func (f *Fake) SetLeader(leader uint64) {
	f.EditStatuses(func(st *MemberStatus) { st.Leader = leader })
}

// SetClusterVersion makes every member report cluster version v.
func (f *Fake) SetClusterVersion(v string) {
	f.EditStatuses(func(st *MemberStatus) { st.ClusterVersion = v })
}

// EditStatuses applies edit to every member's status reply.
func (f *Fake) EditStatuses(edit func(*MemberStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ep, st := range f.Statuses {
		edit(&st)
		f.Statuses[ep] = st
	}
}

// AdvanceLog implements Client: it raises every member's raft and applied index by n.
func (f *Fake) AdvanceLog(_ context.Context, n int) error {
	f.mu.Lock()
	f.count("AdvanceLog")
	f.mu.Unlock()
	f.EditStatuses(func(st *MemberStatus) { st.RaftIndex += uint64(n); st.AppliedIndex += uint64(n) })
	return nil
}

// MemberList implements Client.
func (f *Fake) MemberList(context.Context) (Cluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("MemberList")
	if f.ErrMemberList != nil {
		return Cluster{}, f.ErrMemberList
	}
	out := Cluster{ClusterID: f.State.ClusterID, Members: append([]Member(nil), f.State.Members...)}
	return out, nil
}

// Status implements Client.
func (f *Fake) Status(_ context.Context, endpoint string) (MemberStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Status")
	if err := f.ErrStatus[endpoint]; err != nil {
		return MemberStatus{}, err
	}
	st, ok := f.Statuses[endpoint]
	if !ok {
		return MemberStatus{}, fmt.Errorf("failed to get status of etcd member %s: no such endpoint", endpoint)
	}
	return st, nil
}

// AddLearner implements Client.
func (f *Fake) AddLearner(_ context.Context, peerURLs []string) (Member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("AddLearner")
	f.nextID++
	m := Member{ID: 0x1000 + f.nextID, PeerURLs: peerURLs, IsLearner: true}
	f.State.Members = append(f.State.Members, m)
	return m, nil
}

// Promote implements Client.
func (f *Fake) Promote(_ context.Context, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Promote")
	for i := range f.State.Members {
		if f.State.Members[i].ID == id {
			f.State.Members[i].IsLearner = false
			return nil
		}
	}
	return fmt.Errorf("failed to promote etcd member %s: member not found", FormatID(id))
}

// Remove implements Client.
func (f *Fake) Remove(_ context.Context, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Remove")
	for i := range f.State.Members {
		if f.State.Members[i].ID == id {
			f.State.Members = append(f.State.Members[:i], f.State.Members[i+1:]...)
			return nil
		}
	}
	return nil
}

// MoveLeader implements Client.
func (f *Fake) MoveLeader(_ context.Context, leaderEndpoint string, transferee uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("MoveLeader")
	for ep, st := range f.Statuses {
		st.Leader = transferee
		f.Statuses[ep] = st
	}
	return nil
}

// Close implements Client.
func (f *Fake) Close() error { return nil }

package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Fake is an in-memory Client for tests of error paths and of controllers that run without
// etcd processes. Set Err* fields to inject failures. It is safe for concurrent use.
type Fake struct {
	mu sync.Mutex

	// State is the cluster the fake reports; Statuses the per-endpoint status replies.
	State    Cluster
	Statuses map[string]MemberStatus
	// Snapshots holds the bytes Snapshot serves, by endpoint; an endpoint that has a status
	// but no entry serves an empty stream.
	Snapshots map[string][]byte
	// ActiveAlarms is what Alarms reports; DisarmAlarm removes from it.
	ActiveAlarms []Alarm
	// CompactRevision is the highest revision Compact was called with.
	CompactRevision int64

	// Injected errors.
	ErrMemberList error
	ErrStatus     map[string]error
	ErrSnapshot   map[string]error
	ErrDefragment map[string]error
	// ErrReads are ServesReads' answers by endpoint (a member being defragmented answers
	// none); an endpoint with a status reply and no entry serves reads.
	ErrReads map[string]error
	// ErrReady are Ready's answers by endpoint; an endpoint with a status reply and no entry
	// is ready.
	ErrReady       map[string]error
	ErrAlarms      error
	ErrDisarmAlarm error
	ErrCompact     error

	// AuthEnabled and Users are etcd's authentication state (users by name, with their roles).
	AuthEnabled bool
	Users       map[string][]string

	// Calls counts the calls by method name.
	Calls map[string]int

	nextID uint64
}

// FakeDialer returns a Dialer that hands out f as the client tlsConfig makes it (see As).
func FakeDialer(f *Fake) Dialer {
	return func(_ context.Context, _ []string, tlsConfig *tls.Config) (Client, error) {
		return f.As(tlsConfig), nil
	}
}

// As is f as a client dialing with tlsConfig sees it: f itself with a client certificate
// (the operator's identity: its common name is a user with the root role), else a client
// without a user, which etcd refuses, while AuthEnabled, every call that needs one.
func (f *Fake) As(tlsConfig *tls.Config) Client {
	if tlsConfig != nil && (len(tlsConfig.Certificates) > 0 || tlsConfig.GetClientCertificate != nil) {
		return f
	}
	return anonymous{f}
}

// errUserEmpty is etcd's answer to a call without a user while authentication is on, as the
// client returns it.
var errUserEmpty = rpctypes.ErrUserEmpty

// anonymous is the Fake seen by a client without a user. Like etcd, it refuses while
// AuthEnabled the calls that need one (maintenance, membership changes, auth, KV) with
// "user name is empty"; the member list needs none. Calls are counted as on the Fake.
type anonymous struct{ f *Fake }

// refused counts the call and says whether etcd refuses it.
func (a anonymous) refused(name string) bool {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if !a.f.AuthEnabled {
		return false
	}
	a.f.count(name)
	return true
}

func (a anonymous) MemberList(ctx context.Context) (Cluster, error) { return a.f.MemberList(ctx) }
func (a anonymous) Alarms(ctx context.Context) ([]Alarm, error)     { return a.f.Alarms(ctx) }
func (a anonymous) Close() error                                    { return nil }

func (a anonymous) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	if a.refused("Status") {
		return MemberStatus{}, fmt.Errorf("failed to get status of etcd member %s: %w", endpoint, errUserEmpty)
	}
	return a.f.Status(ctx, endpoint)
}

func (a anonymous) ServesReads(ctx context.Context, endpoint string) error {
	if a.refused("ServesReads") {
		return fmt.Errorf("failed to read from the database of etcd member %s: %w", endpoint, errUserEmpty)
	}
	return a.f.ServesReads(ctx, endpoint)
}

// Ready needs no user: etcd serves /readyz to anyone.
func (a anonymous) Ready(ctx context.Context, endpoint string) error { return a.f.Ready(ctx, endpoint) }

func (a anonymous) AddLearner(ctx context.Context, peerURLs []string) (Member, error) {
	if a.refused("AddLearner") {
		return Member{}, fmt.Errorf("failed to add a learner: %w", errUserEmpty)
	}
	return a.f.AddLearner(ctx, peerURLs)
}

func (a anonymous) UpdatePeerURLs(ctx context.Context, id uint64, peerURLs []string) error {
	if a.refused("UpdatePeerURLs") {
		return errUserEmpty
	}
	return a.f.UpdatePeerURLs(ctx, id, peerURLs)
}

func (a anonymous) Promote(ctx context.Context, id uint64) error {
	if a.refused("Promote") {
		return errUserEmpty
	}
	return a.f.Promote(ctx, id)
}

func (a anonymous) Remove(ctx context.Context, id uint64) error {
	if a.refused("Remove") {
		return errUserEmpty
	}
	return a.f.Remove(ctx, id)
}

func (a anonymous) MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error {
	if a.refused("MoveLeader") {
		return errUserEmpty
	}
	return a.f.MoveLeader(ctx, leaderEndpoint, transferee)
}

func (a anonymous) AdvanceLog(ctx context.Context, n int) error {
	if a.refused("AdvanceLog") {
		return errUserEmpty
	}
	return a.f.AdvanceLog(ctx, n)
}

func (a anonymous) Snapshot(ctx context.Context, endpoint string) (*Snapshot, error) {
	if a.refused("Snapshot") {
		return nil, errUserEmpty
	}
	return a.f.Snapshot(ctx, endpoint)
}

func (a anonymous) Defragment(ctx context.Context, endpoint string) error {
	if a.refused("Defragment") {
		return errUserEmpty
	}
	return a.f.Defragment(ctx, endpoint)
}

func (a anonymous) DisarmAlarm(ctx context.Context, al Alarm) error {
	if a.refused("DisarmAlarm") {
		return errUserEmpty
	}
	return a.f.DisarmAlarm(ctx, al)
}

func (a anonymous) Compact(ctx context.Context, revision int64) error {
	if a.refused("Compact") {
		return errUserEmpty
	}
	return a.f.Compact(ctx, revision)
}

func (a anonymous) Auth(ctx context.Context, users []string) (AuthState, error) {
	if a.refused("Auth") {
		return AuthState{}, fmt.Errorf("failed to read etcd's authentication status: %w", errUserEmpty)
	}
	return a.f.Auth(ctx, users)
}

func (a anonymous) EnsureRootUser(ctx context.Context, name, password string) error {
	if a.refused("EnsureRootUser") {
		return errUserEmpty
	}
	return a.f.EnsureRootUser(ctx, name, password)
}

func (a anonymous) RemoveUser(ctx context.Context, name string) error {
	if a.refused("RemoveUser") {
		return errUserEmpty
	}
	return a.f.RemoveUser(ctx, name)
}

func (a anonymous) SetAuth(ctx context.Context, on bool) error {
	if a.refused("SetAuth") {
		return errUserEmpty
	}
	return a.f.SetAuth(ctx, on)
}

func (f *Fake) count(name string) {
	if f.Calls == nil {
		f.Calls = map[string]int{}
	}
	f.Calls[name]++
}

// CallCount is how many times method name was called (safe while the fake is in use).
func (f *Fake) CallCount(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Calls[name]
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

// Edit applies edit to the member list and the status replies (by endpoint) under the fake's
// lock: a test plays etcd, for example a learner's process that starts, takes its name and
// answers at its client URL.
func (f *Fake) Edit(edit func(state *Cluster, statuses map[string]MemberStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Statuses == nil {
		f.Statuses = map[string]MemberStatus{}
	}
	edit(&f.State, f.Statuses)
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

// ServesReads implements Client.
func (f *Fake) ServesReads(_ context.Context, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("ServesReads")
	if err := f.ErrReads[endpoint]; err != nil {
		return err
	}
	if _, ok := f.Statuses[endpoint]; !ok {
		return fmt.Errorf("failed to read from the database of etcd member %s: no such endpoint", endpoint)
	}
	return nil
}

// Ready implements Client.
func (f *Fake) Ready(_ context.Context, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Ready")
	if err := f.ErrReady[endpoint]; err != nil {
		return err
	}
	if _, ok := f.Statuses[endpoint]; !ok {
		return fmt.Errorf("failed to ask etcd member %s whether it is ready: no such endpoint", endpoint)
	}
	return nil
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

// UpdatePeerURLs implements Client.
func (f *Fake) UpdatePeerURLs(_ context.Context, id uint64, peerURLs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("UpdatePeerURLs")
	for i := range f.State.Members {
		if f.State.Members[i].ID == id {
			f.State.Members[i].PeerURLs = append([]string(nil), peerURLs...)
			return nil
		}
	}
	return fmt.Errorf("failed to update the peer URLs of etcd member %s: member not found", FormatID(id))
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

// Snapshot implements Client: it serves f.Snapshots[endpoint], with the revision, ID, applied index and version
// of the endpoint's status, and its cluster version as the storage version. Closing the
// snapshot counts as a call to "SnapshotClose".
func (f *Fake) Snapshot(_ context.Context, endpoint string) (*Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Snapshot")
	if err := f.ErrSnapshot[endpoint]; err != nil {
		return nil, err
	}
	st, ok := f.Statuses[endpoint]
	if !ok {
		return nil, fmt.Errorf("failed to start a snapshot of etcd member %s: no such endpoint", endpoint)
	}
	return &Snapshot{
		ReadCloser: &fakeStream{Reader: bytes.NewReader(f.Snapshots[endpoint]), f: f},
		Revision:   st.Revision, MemberID: st.ID, AppliedIndex: st.AppliedIndex, Version: st.Version, StorageVersion: st.ClusterVersion,
	}, nil
}

type fakeStream struct {
	*bytes.Reader
	f    *Fake
	once sync.Once
}

func (s *fakeStream) Close() error {
	s.once.Do(func() {
		s.f.mu.Lock()
		defer s.f.mu.Unlock()
		s.f.count("SnapshotClose")
	})
	return nil
}

// Defragment implements Client: the endpoint's database shrinks to the size in use.
func (f *Fake) Defragment(_ context.Context, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Defragment")
	if err := f.ErrDefragment[endpoint]; err != nil {
		return err
	}
	st, ok := f.Statuses[endpoint]
	if !ok {
		return fmt.Errorf("failed to defragment etcd member %s: no such endpoint", endpoint)
	}
	st.DBSize = st.DBSizeInUse
	f.Statuses[endpoint] = st
	return nil
}

// Alarms implements Client.
func (f *Fake) Alarms(context.Context) ([]Alarm, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Alarms")
	if f.ErrAlarms != nil {
		return nil, f.ErrAlarms
	}
	return slices.Clone(f.ActiveAlarms), nil
}

// DisarmAlarm implements Client: it removes a from ActiveAlarms.
func (f *Fake) DisarmAlarm(_ context.Context, a Alarm) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("DisarmAlarm")
	if f.ErrDisarmAlarm != nil {
		return f.ErrDisarmAlarm
	}
	f.ActiveAlarms = slices.DeleteFunc(f.ActiveAlarms, func(x Alarm) bool { return x == a })
	return nil
}

// Compact implements Client: it records the highest revision compacted. Like etcd, it
// refuses a revision above every member's reported revision, when any member reports one.
func (f *Fake) Compact(_ context.Context, revision int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Compact")
	if f.ErrCompact != nil {
		return f.ErrCompact
	}
	var current int64
	for _, st := range f.Statuses {
		current = max(current, st.Revision)
	}
	if current > 0 && revision > current {
		return fmt.Errorf("failed to compact etcd at revision %d: the current revision is %d", revision, current)
	}
	f.CompactRevision = max(f.CompactRevision, revision)
	return nil
}

// Close implements Client.
// Auth returns AuthEnabled and the roles in Users.
func (f *Fake) Auth(_ context.Context, users []string) (AuthState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("Auth")
	out := AuthState{Enabled: f.AuthEnabled, Roles: map[string][]string{}}
	for _, u := range users {
		if r, ok := f.Users[u]; ok {
			out.Roles[u] = r
		}
	}
	return out, nil
}

// EnsureRootUser records the user with the root role in Users.
func (f *Fake) EnsureRootUser(_ context.Context, name, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("EnsureRootUser")
	if f.Users == nil {
		f.Users = map[string][]string{}
	}
	f.Users[name] = []string{"root"}
	return nil
}

// RemoveUser deletes the user from Users.
func (f *Fake) RemoveUser(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("RemoveUser")
	delete(f.Users, name)
	return nil
}

// SetAuth sets AuthEnabled.
func (f *Fake) SetAuth(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("SetAuth")
	f.AuthEnabled = on
	return nil
}

func (f *Fake) Close() error { return nil }

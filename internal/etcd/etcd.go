// Package etcd is etcd-pilot's narrow view of an etcd cluster: membership, per-member status,
// leadership. Controllers use the Client interface; Dial returns one backed by clientv3, and
// fake.go holds a fake for error paths. The package must not import a Kubernetes client.
package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// Member is one entry of etcd's member list.
type Member struct {
	ID         uint64
	Name       string // empty for a member added but not started yet
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// MemberStatus is what one member reports about itself.
type MemberStatus struct {
	ID        uint64
	ClusterID uint64 // the cluster the member belongs to, as it reports it
	Version   string
	DBSize    int64
	Leader    uint64
	RaftIndex uint64
	// AppliedIndex is the last raft entry the member applied; it snapshots every
	// --snapshot-count applied entries.
	AppliedIndex uint64
	RaftTerm     uint64
	IsLearner    bool
	Errors       []string // alarms and health problems the member reports
	// ClusterVersion is the cluster version the member knows (MAJOR.MINOR.0), from its
	// /version endpoint; empty when that did not answer.
	ClusterVersion string
}

// Cluster is etcd's member list as one member sees it.
type Cluster struct {
	ClusterID uint64
	Members   []Member
}

// Client is the set of etcd calls the controllers make. Implementations must be safe for
// concurrent use.
type Client interface {
	// MemberList returns the member list from any reachable endpoint.
	MemberList(ctx context.Context) (Cluster, error)
	// Status asks the member serving endpoint (a client URL) for its status.
	Status(ctx context.Context, endpoint string) (MemberStatus, error)
	// AddLearner adds a non-voting member with the given peer URLs.
	AddLearner(ctx context.Context, peerURLs []string) (Member, error)
	// Promote turns a caught-up learner into a voting member.
	Promote(ctx context.Context, id uint64) error
	// Remove removes a member. A member that is already gone is not an error.
	Remove(ctx context.Context, id uint64) error
	// MoveLeader hands leadership to transferee; leaderEndpoint must be the current leader's
	// client URL (etcd only accepts the call there).
	MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error
	// AdvanceLog appends at least n raft entries that change no key: lease grant and revoke
	// pairs. Members snapshot every --snapshot-count applied entries, so this moves an idle
	// cluster's snapshots past old log entries.
	AdvanceLog(ctx context.Context, n int) error
	// Close releases the connections.
	Close() error
}

// Dialer opens a Client for a set of client URLs. Controllers take a Dialer so tests can hand
// them a fake.
type Dialer func(ctx context.Context, endpoints []string) (Client, error)

// DialTimeout bounds the connection attempt to each endpoint.
const DialTimeout = 2 * time.Second

// Dial is the Dialer backed by clientv3.
func Dial(_ context.Context, endpoints []string) (Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("failed to dial etcd: no endpoints")
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("failed to dial etcd at %v: %w", endpoints, err)
	}
	return &client{c: c}, nil
}

type client struct {
	c *clientv3.Client
}

func (c *client) MemberList(ctx context.Context) (Cluster, error) {
	resp, err := c.c.MemberList(ctx)
	if err != nil {
		return Cluster{}, fmt.Errorf("failed to list etcd members: %w", err)
	}
	out := Cluster{ClusterID: resp.Header.ClusterId}
	for _, m := range resp.Members {
		out.Members = append(out.Members, Member{
			ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner,
		})
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	return out, nil
}

func (c *client) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	resp, err := c.c.Status(ctx, endpoint)
	if err != nil {
		return MemberStatus{}, fmt.Errorf("failed to get status of etcd member %s: %w", endpoint, err)
	}
	st := MemberStatus{
		ID: resp.Header.MemberId, ClusterID: resp.Header.ClusterId, Version: resp.Version, DBSize: resp.DbSize, Leader: resp.Leader,
		RaftIndex: resp.RaftIndex, AppliedIndex: resp.RaftAppliedIndex, RaftTerm: resp.RaftTerm, IsLearner: resp.IsLearner, Errors: resp.Errors,
	}
	// The cluster version is not part of the status reply; every member serves it on its
	// client URL's /version. A failure there leaves it empty and is not the member's health.
	if v, err := versionOf(ctx, endpoint); err == nil {
		st.ClusterVersion = v.Cluster
	}
	return st, nil
}

// versionHTTP reads /version; it keeps no idle connections (one call per member per pass).
var versionHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

type versionReply struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
}

func versionOf(ctx context.Context, endpoint string) (versionReply, error) {
	var v versionReply
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/version", nil)
	if err != nil {
		return v, err
	}
	resp, err := versionHTTP.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s/version: %s", endpoint, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v)
	return v, err
}

func (c *client) AddLearner(ctx context.Context, peerURLs []string) (Member, error) {
	resp, err := c.c.MemberAddAsLearner(ctx, peerURLs)
	if err != nil {
		return Member{}, fmt.Errorf("failed to add etcd learner %v: %w", peerURLs, err)
	}
	m := resp.Member
	return Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}, nil
}

func (c *client) Promote(ctx context.Context, id uint64) error {
	if _, err := c.c.MemberPromote(ctx, id); err != nil {
		return fmt.Errorf("failed to promote etcd member %s: %w", FormatID(id), err)
	}
	return nil
}

func (c *client) Remove(ctx context.Context, id uint64) error {
	_, err := c.c.MemberRemove(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) && rpctypes.ErrorDesc(err) != rpctypes.ErrMemberNotFound.Error() {
		return fmt.Errorf("failed to remove etcd member %s: %w", FormatID(id), err)
	}
	return nil
}

func (c *client) MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error {
	lc, err := clientv3.New(clientv3.Config{Endpoints: []string{leaderEndpoint}, DialTimeout: DialTimeout, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("failed to dial etcd leader %s: %w", leaderEndpoint, err)
	}
	defer lc.Close()
	if _, err := lc.MoveLeader(ctx, transferee); err != nil {
		return fmt.Errorf("failed to move etcd leadership to %s: %w", FormatID(transferee), err)
	}
	return nil
}

// advanceWorkers is how many lease grant/revoke pairs AdvanceLog keeps in flight.
const advanceWorkers = 16

func (c *client) AdvanceLog(ctx context.Context, n int) error {
	pairs := (n + 1) / 2
	var next, failed int
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < advanceWorkers; w++ {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= pairs || firstErr != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				lease, err := c.c.Grant(ctx, 60)
				if err == nil {
					_, err = c.c.Revoke(ctx, lease.ID)
				}
				if err != nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("failed to advance the raft log (%d of %d lease grant/revoke pairs failed): %w", failed, pairs, firstErr)
	}
	return nil
}

func (c *client) Close() error { return c.c.Close() }

// FormatID prints a member or cluster ID in hexadecimal, as etcdctl does.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseID parses an ID printed by FormatID.
func ParseID(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// Observed is a snapshot of a cluster: the member list and each member's status.
type Observed struct {
	Cluster Cluster
	// Status holds the members that answered, by ID.
	Status map[uint64]MemberStatus
	// StatusErr holds the members that did not answer, by ID.
	StatusErr map[uint64]error
}

// Leader returns the leader's ID as the answering voting members report it, or 0 when none
// (or no agreement) is known.
func (o Observed) Leader() uint64 {
	var leader uint64
	for _, s := range o.Status {
		if s.Leader == 0 {
			continue
		}
		if leader != 0 && s.Leader != leader {
			return 0
		}
		leader = s.Leader
	}
	return leader
}

// ClusterVersion is the cluster version the leader reports, or, without a leader's answer,
// the lowest any member reports; empty when none is known.
func (o Observed) ClusterVersion() string {
	if st, ok := o.Status[o.Leader()]; ok && st.ClusterVersion != "" {
		return st.ClusterVersion
	}
	out := ""
	for _, st := range o.Status {
		if st.ClusterVersion != "" && (out == "" || versions.Less(st.ClusterVersion, out)) {
			out = st.ClusterVersion
		}
	}
	return out
}

// ObserveEndpoints asks each endpoint (a client URL) for its status first, concurrently, each
// call bounded by perCall. When no member that answers knows a leader, the member list cannot
// be read (etcd serves it linearizably), so it returns at once with how many answered and an
// error, instead of waiting for a member list call to time out: members alive without a
// quorum, or still forming. Otherwise it reads the member list and asks every listed member it
// has not heard from yet. It never fails after the member list was read.
func ObserveEndpoints(ctx context.Context, c Client, endpoints []string, perCall time.Duration) (Observed, int, error) {
	answered := map[uint64]MemberStatus{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	asked := map[string]bool{}
	for _, ep := range endpoints {
		if asked[ep] {
			continue
		}
		asked[ep] = true
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, perCall)
			defer cancel()
			if st, err := c.Status(sctx, ep); err == nil {
				mu.Lock()
				answered[st.ID] = st
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	leader := false
	for _, st := range answered {
		leader = leader || st.Leader != 0
	}
	if !leader {
		return Observed{}, len(answered), fmt.Errorf("no member that answers knows a leader (%d of %d endpoints answered)", len(answered), len(asked))
	}
	lctx, cancel := context.WithTimeout(ctx, perCall)
	cl, err := c.MemberList(lctx)
	cancel()
	if err != nil {
		return Observed{}, len(answered), err
	}
	o := Observed{Cluster: cl, Status: map[uint64]MemberStatus{}, StatusErr: map[uint64]error{}}
	for _, m := range cl.Members {
		switch st, ok := answered[m.ID]; {
		case ok:
			o.Status[m.ID] = st
		case len(m.ClientURLs) == 0:
			o.StatusErr[m.ID] = errors.New("member has not started yet")
		case asked[m.ClientURLs[0]]:
			o.StatusErr[m.ID] = errors.New("member did not answer")
		default:
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, perCall)
				defer cancel()
				st, err := c.Status(sctx, m.ClientURLs[0])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					o.StatusErr[m.ID] = err
					return
				}
				o.Status[m.ID] = st
			})
		}
	}
	wg.Wait()
	return o, len(answered), nil
}

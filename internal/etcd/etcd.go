// Package etcd is etcd-pilot's narrow view of an etcd cluster: membership, per-member status,
// leadership, and the maintenance calls (snapshots, defragmentation, alarms, compaction).
// Controllers use the Client interface; Dial returns one backed by clientv3, and fake.go holds a
// fake for error paths. The package must not import a Kubernetes client.
package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

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
	// UpdatePeerURLs sets the peer URLs the others reach member id at. Setting the URLs it
	// has is not an error.
	UpdatePeerURLs(ctx context.Context, id uint64, peerURLs []string) error
	// Remove removes a member. A member that is already gone is not an error.
	Remove(ctx context.Context, id uint64) error
	// MoveLeader hands leadership to transferee; leaderEndpoint must be the current leader's
	// client URL (etcd only accepts the call there).
	MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error
	// AdvanceLog appends at least n raft entries that change no key: lease grant and revoke
	// pairs. Members snapshot every --snapshot-count applied entries, so this moves an idle
	// cluster's snapshots past old log entries.
	AdvanceLog(ctx context.Context, n int) error
	// Snapshot starts streaming the database of the member serving endpoint (a client URL),
	// over a connection to that member only. ctx bounds the whole stream, not only its start.
	// The caller must Close the snapshot, whether or not it read it to the end. The stream is
	// not verified here: see internal/backup.
	Snapshot(ctx context.Context, endpoint string) (*Snapshot, error)
	// Defragment rewrites the database of the member serving endpoint to give its free pages
	// back to the file system. The member serves no reads or writes while it runs, so the
	// caller must defragment one member at a time.
	Defragment(ctx context.Context, endpoint string) error
	// ServesReads asks the member serving endpoint (a client URL), over a connection to that
	// member only, for a serializable read of one key: an answer from its own database. A
	// member being defragmented holds its database's read lock and answers none until the
	// defragmentation finished, though its applied index can move meanwhile (entries that need
	// no database, such as AuthStatus, still apply). nil means it served the read.
	ServesReads(ctx context.Context, endpoint string) error
	// Ready asks the member serving endpoint whether it serves linearizable reads: etcd's
	// /readyz (3.6 and later), which needs no user under authentication and answers OK only
	// when the member, a voter, confirmed a read through a leader with a quorum. nil means
	// ready. A member without /readyz (3.5) answers an error: 3.5 serves its member list to
	// any client, which says the same.
	Ready(ctx context.Context, endpoint string) error
	// Alarms lists the cluster's active alarms (alarms are replicated: any member answers).
	Alarms(ctx context.Context) ([]Alarm, error)
	// DisarmAlarm clears one alarm. The caller must first remove its cause (for NOSPACE:
	// compact and defragment), or the member raises it again. An alarm that is not active is
	// not an error.
	DisarmAlarm(ctx context.Context, a Alarm) error
	// Compact discards the key history before revision and waits until the member serving the
	// request has removed it from its database (a physical compaction; the others follow
	// asynchronously). A revision already compacted is not an error; one above the current
	// revision is.
	Compact(ctx context.Context, revision int64) error
	// Auth reads whether authentication is on and, for each of users that exists, its roles.
	Auth(ctx context.Context, users []string) (AuthState, error)
	// EnsureRootUser creates the user name if it does not exist (with password, or, when
	// password is empty, without one: it then authenticates only by the common name of a
	// client certificate) and grants it the root role if it lacks it. An existing user's
	// password is never changed.
	EnsureRootUser(ctx context.Context, name, password string) error
	// SetAuth turns authentication on or off; asking for the state it is in is not an error.
	SetAuth(ctx context.Context, on bool) error
	// RemoveUser deletes the user name; one that does not exist is not an error.
	RemoveUser(ctx context.Context, name string) error
	// Close releases the connections.
	Close() error
}

// Snapshot is a member's database as etcd streams it: the bbolt file followed by the 32-byte
// SHA-256 of the bytes before it, the form etcdutl snapshot restore checks. Read it to the end
// and Close it; Close also ends the stream early and releases the connection to the member.
type Snapshot struct {
	io.ReadCloser
	// Revision is the member's revision read just before the snapshot began: the snapshot holds
	// every revision up to it, and may hold later ones written while it began. etcd's snapshot
	// stream carries no response header, so this comes from a status call on the same
	// connection.
	Revision int64
	// MemberID is the member that answered on the endpoint.
	MemberID uint64
	// AppliedIndex is the last raft entry the member had applied, from the same status call:
	// the snapshot holds at least the writes up to it.
	AppliedIndex uint64
	// Version is the member's server version (e.g. 3.6.16), from the same status call.
	Version string
	// StorageVersion is the database's storage version (MAJOR.MINOR.0) that the snapshot
	// stream reports: the oldest etcd that can restore it. Empty before etcd 3.6.
	StorageVersion string
}

// The types of what etcd answers live in the leaf package state, which the planners import
// without linking clientv3; these aliases keep them etcd.Member and so on here.
type (
	Member       = state.Member
	MemberStatus = state.MemberStatus
	Cluster      = state.Cluster
	AuthState    = state.AuthState
	Alarm        = state.Alarm
	Observed     = state.Observed
)

// Alarm types etcd raises.
const (
	AlarmNoSpace = state.AlarmNoSpace
	AlarmCorrupt = state.AlarmCorrupt
)

// FormatID prints a member or cluster ID in hexadecimal, as etcdctl does.
func FormatID(id uint64) string { return state.FormatID(id) }

// ParseID parses an ID printed by FormatID.
func ParseID(s string) (uint64, error) { return state.ParseID(s) }

// Dialer opens a Client for a set of client URLs, over TLS with tlsConfig when it is not nil
// (the client certificate the operator presents and the CAs it trusts; https endpoints need
// it). Controllers take a Dialer so tests can hand them a fake.
type Dialer func(ctx context.Context, endpoints []string, tlsConfig *tls.Config) (Client, error)

// DialTimeout bounds the connection attempt to each endpoint.
const DialTimeout = 2 * time.Second

// connectParams is how gRPC connects to a member: after a failed attempt it tries again
// 100 ms later, growing to at most 5 s, instead of gRPC's 1 s at first (up to 2 min). A call
// waits for its connection to be ready, so with gRPC's default a member that could not be
// reached at the first attempt (its re-created pod had no address yet) answered a second
// after the attempt however soon it served: in BenchmarkUpgrade a pass waited 1.0 s on such
// a call, while its pod's events waited behind the pass. Each attempt still has gRPC's 20 s.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// Dial is the Dialer backed by clientv3.
// MaxAnswerBytes bounds every message the operator receives from etcd.
const MaxAnswerBytes = 8 << 20

func Dial(_ context.Context, endpoints []string, tlsConfig *tls.Config) (Client, error) {
	return dial(endpoints, tlsConfig, nil)
}

// Resolver returns the address to connect to for an endpoint's host name, and false when it
// knows none (the name is then resolved as usual).
type Resolver func(ctx context.Context, host string) (string, bool)

// DialVia is Dial with every connection (gRPC and /version) made to the address resolve
// gives for the endpoint's host, when it gives one. The endpoints keep their names: TLS still
// verifies the server's certificate for the name. The operator resolves a member's name from
// its pod's IP, which it knows as soon as the pod has one: name resolution (a DNS cache, a
// hosts file read again every few seconds) lags a pod that was just created or re-created on
// a new address by seconds, and a pass would see the member as not answering until then.
func DialVia(resolve Resolver) Dialer {
	return func(_ context.Context, endpoints []string, tlsConfig *tls.Config) (Client, error) {
		return dial(endpoints, tlsConfig, resolve)
	}
}

// resolvingDialer connects to addr (host:port) at the address resolve gives for host.
func resolvingDialer(resolve Resolver) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip, ok := resolve(ctx, host); ok {
				addr = net.JoinHostPort(ip, port)
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func dial(endpoints []string, tlsConfig *tls.Config, resolve Resolver) (Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("failed to dial etcd: no endpoints")
	}
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") && tlsConfig == nil {
			return nil, fmt.Errorf("failed to dial etcd at %s: the endpoint needs TLS and no client certificate was given", e)
		}
	}
	dialOptions := []grpc.DialOption{grpc.WithConnectParams(connectParams)}
	if resolve != nil {
		dialOptions = append(dialOptions, grpc.WithContextDialer(resolvingDialer(resolve)))
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tlsConfig,
		Logger:               zap.NewNop(),
		DialOptions:          dialOptions,
		// A member pod runs the image its tenant names: no answer of it may grow the
		// operator's memory without bound. The operator's calls get small answers (member
		// lists, statuses, alarms, users); snapshots stream in chunks well below this.
		MaxCallRecvMsgSize: MaxAnswerBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to dial etcd at %v: %w", endpoints, err)
	}
	h := versionHTTP
	if tlsConfig != nil || resolve != nil {
		tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
		if tlsConfig != nil {
			tr.TLSClientConfig = tlsConfig.Clone()
		}
		if resolve != nil {
			d := resolvingDialer(resolve)
			tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return d(ctx, addr) }
		}
		h = &http.Client{Transport: tr}
	}
	scheme, _, _ := strings.Cut(endpoints[0], "://")
	connect := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	if resolve != nil {
		connect = resolvingDialer(resolve)
	}
	return &client{c: c, http: h, tls: tlsConfig, scheme: scheme, connect: connect, dialOptions: dialOptions}, nil
}

type client struct {
	c *clientv3.Client
	// http reads /version, over TLS with the client certificate when the cluster has one.
	http *http.Client
	tls  *tls.Config
	// scheme is the scheme of the endpoints dialed (http or https).
	scheme string
	// connect opens a TCP connection to host:port the way the gRPC connections are made.
	connect func(ctx context.Context, addr string) (net.Conn, error)
	// dialOptions are the gRPC options of every connection (resolution, back-off).
	dialOptions []grpc.DialOption
}

// refused reports whether endpoint cannot be reached now: nothing listens at its address (the
// connection was refused), or its name does not resolve (no such host: a member pod that is
// gone, or re-created and without an address yet, whose name the DNS or hosts file no longer
// holds). The client's gRPC calls wait for a connection until their deadline, retrying with a
// back-off, so a member whose process is down (restarting, crash looping, its pod just
// re-created) would hold every observation for the whole per-call timeout, or until gRPC's
// next attempt; either outcome says at once that it does not answer. Any other outcome
// (connected, a timeout, a resolver that fails otherwise) leaves the answer to the gRPC call.
func (c *client) refused(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || c.connect == nil {
		return nil
	}
	conn, err := c.connect(ctx, u.Host)
	if err == nil {
		_ = conn.Close()
		return nil
	}
	var dnsErr *net.DNSError
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		return err
	}
	return nil
}

func (c *client) MemberList(ctx context.Context) (Cluster, error) {
	resp, err := c.c.MemberList(ctx)
	if err != nil {
		return Cluster{}, fmt.Errorf("failed to list etcd members: %w", err)
	}
	out := Cluster{ClusterID: resp.Header.ClusterId}
	for _, m := range resp.Members {
		out.Members = append(out.Members, Member{
			ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: PreferScheme(m.ClientURLs, c.scheme), IsLearner: m.IsLearner,
		})
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	return out, nil
}

// PreferScheme returns urls with those of scheme first, in their order, then the others. A
// member serving plain HTTP and TLS on its client port (a switch between them) publishes
// both; whoever reads ClientURLs[0] then reaches it the way it dials every member.
func PreferScheme(urls []string, scheme string) []string {
	if scheme == "" || len(urls) < 2 {
		return urls
	}
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		if strings.HasPrefix(u, scheme+"://") {
			out = append(out, u)
		}
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, scheme+"://") {
			out = append(out, u)
		}
	}
	return out
}

func (c *client) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	if err := c.refused(ctx, endpoint); err != nil {
		return MemberStatus{}, fmt.Errorf("failed to get status of etcd member %s: %w", endpoint, err)
	}
	resp, err := c.c.Status(ctx, endpoint)
	if err != nil {
		return MemberStatus{}, fmt.Errorf("failed to get status of etcd member %s: %w", endpoint, err)
	}
	st := MemberStatus{
		ID: resp.Header.MemberId, ClusterID: resp.Header.ClusterId, Version: resp.Version, Revision: resp.Header.Revision,
		DBSize: resp.DbSize, DBSizeInUse: resp.DbSizeInUse, Leader: resp.Leader,
		RaftIndex: resp.RaftIndex, AppliedIndex: resp.RaftAppliedIndex, RaftTerm: resp.RaftTerm, IsLearner: resp.IsLearner, Errors: resp.Errors,
	}
	// The cluster version is not part of the status reply; every member serves it on its
	// client URL's /version. A failure there leaves it empty and is not the member's health.
	if v, err := versionOf(ctx, c.http, endpoint); err == nil {
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

func versionOf(ctx context.Context, h *http.Client, endpoint string) (versionReply, error) {
	var v versionReply
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/version", nil)
	if err != nil {
		return v, err
	}
	resp, err := h.Do(req)
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

func (c *client) Ready(ctx context.Context, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("failed to ask etcd member %s whether it is ready: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd member %s is not ready: %s: %s", endpoint, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (c *client) AddLearner(ctx context.Context, peerURLs []string) (Member, error) {
	resp, err := c.c.MemberAddAsLearner(ctx, peerURLs)
	if err != nil {
		return Member{}, fmt.Errorf("failed to add etcd learner %v: %w", peerURLs, err)
	}
	m := resp.Member
	return Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}, nil
}

func (c *client) UpdatePeerURLs(ctx context.Context, id uint64, peerURLs []string) error {
	if _, err := c.c.MemberUpdate(ctx, id, peerURLs); err != nil {
		return fmt.Errorf("failed to update the peer URLs of etcd member %s to %v: %w", FormatID(id), peerURLs, err)
	}
	return nil
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
	// Reached the way every other call is (the pod's address when the resolver knows it).
	lc, err := clientv3.New(clientv3.Config{Endpoints: []string{leaderEndpoint}, DialTimeout: DialTimeout, TLS: c.tls, Logger: zap.NewNop(), DialOptions: c.dialOptions})
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

func (c *client) Snapshot(ctx context.Context, endpoint string) (*Snapshot, error) {
	// c.c.Dial connects to endpoint alone, with the client's dial options (as Status and
	// Defragment do), so the snapshot is that member's and no other's.
	conn, err := c.c.Dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("failed to dial etcd member %s: %w", endpoint, err)
	}
	m := clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), c.c)
	st, err := m.Status(ctx, endpoint)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to get status of etcd member %s: %w", endpoint, err)
	}
	// Closing the pipe reader alone would leave clientv3's receiving goroutine and the gRPC
	// stream running until the member finished sending; cancelling the context ends both.
	sctx, cancel := context.WithCancel(ctx)
	resp, err := m.SnapshotWithVersion(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("failed to start a snapshot of etcd member %s: %w", endpoint, err)
	}
	return &Snapshot{
		ReadCloser: &snapshotStream{endpoint: endpoint, r: resp.Snapshot, cancel: cancel, conn: conn},
		Revision:   st.Header.Revision, MemberID: st.Header.MemberId, AppliedIndex: st.RaftAppliedIndex, Version: st.Version, StorageVersion: resp.Version,
	}, nil
}

// snapshotStream is a snapshot's reader; Close ends the stream and the member's connection.
type snapshotStream struct {
	endpoint string
	r        io.ReadCloser
	cancel   context.CancelFunc
	conn     io.Closer
	once     sync.Once
	err      error
}

func (s *snapshotStream) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("failed to read the snapshot of etcd member %s: %w", s.endpoint, err)
	}
	return n, err
}

func (s *snapshotStream) Close() error {
	s.once.Do(func() {
		_ = s.r.Close()
		s.cancel()
		if err := s.conn.Close(); err != nil {
			s.err = fmt.Errorf("failed to close the connection to etcd member %s: %w", s.endpoint, err)
		}
	})
	return s.err
}

func (c *client) Defragment(ctx context.Context, endpoint string) error {
	if _, err := c.c.Defragment(ctx, endpoint); err != nil {
		return fmt.Errorf("failed to defragment etcd member %s: %w", endpoint, err)
	}
	return nil
}

// readProbeKey is the key ServesReads reads (keys only, at most one): a key no one writes,
// so the read costs the member one lookup in its database.
const readProbeKey = "\x00etcd-pilot/read-probe"

func (c *client) ServesReads(ctx context.Context, endpoint string) error {
	conn, err := c.c.Dial(endpoint)
	if err != nil {
		return fmt.Errorf("failed to dial etcd member %s: %w", endpoint, err)
	}
	defer conn.Close()
	_, err = pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte(readProbeKey), Serializable: true, KeysOnly: true, Limit: 1})
	if err != nil {
		return fmt.Errorf("failed to read from the database of etcd member %s: %w", endpoint, rpctypes.Error(err))
	}
	return nil
}

func (c *client) Alarms(ctx context.Context) ([]Alarm, error) {
	resp, err := c.c.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list etcd alarms: %w", err)
	}
	out := make([]Alarm, 0, len(resp.Alarms))
	for _, a := range resp.Alarms {
		out = append(out, Alarm{MemberID: a.MemberID, Type: a.Alarm.String()})
	}
	return out, nil
}

func (c *client) DisarmAlarm(ctx context.Context, a Alarm) error {
	t, ok := pb.AlarmType_value[a.Type]
	// clientv3 reads member 0 with type NONE as "every alarm": refuse it rather than clear
	// alarms the caller did not name.
	if !ok || pb.AlarmType(t) == pb.AlarmType_NONE || a.MemberID == 0 {
		return fmt.Errorf("failed to disarm etcd alarm %s on member %s: not a single alarm", a.Type, FormatID(a.MemberID))
	}
	if _, err := c.c.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType(t)}); err != nil {
		return fmt.Errorf("failed to disarm etcd alarm %s on member %s: %w", a.Type, FormatID(a.MemberID), err)
	}
	return nil
}

func (c *client) Compact(ctx context.Context, revision int64) error {
	_, err := c.c.Compact(ctx, revision, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("failed to compact etcd at revision %d: %w", revision, err)
	}
	return nil
}

func (c *client) Close() error { return c.c.Close() }

// ObserveEndpoints asks each endpoint (a client URL) for its status first, concurrently, each
// call bounded by perCall. When no member that answers knows a leader, the member list cannot
// be read (etcd serves it linearizably), so it returns at once with how many answered and an
// error, instead of waiting for a member list call to time out: members alive without a
// quorum, or still forming. Otherwise it reads the member list and asks every listed member it
// has not heard from yet. It never fails after the member list was read. The status replies of
// the first round come back also on failure, by member ID: which members answered, and that
// none knew a leader, is evidence in itself.
func ObserveEndpoints(ctx context.Context, c Client, endpoints []string, perCall time.Duration) (Observed, map[uint64]MemberStatus, error) {
	return ObserveMembers(ctx, c, endpoints, nil, perCall)
}

// ObserveMembers is ObserveEndpoints where names[i] is the member name endpoints[i] belongs to
// (a member pod's name, its member's name in etcd). A listed member whose name was asked is not
// asked again at the URL it advertises: the operator dials a member pod by a name the URL it
// advertises does not spell the same way (…svc against …svc.cluster.local), and a member that
// did not answer the first call (its node is lost) held the observation for a second deadline.
func ObserveMembers(ctx context.Context, c Client, endpoints, names []string, perCall time.Duration) (Observed, map[uint64]MemberStatus, error) {
	askedName := map[string]bool{}
	for i := range names {
		if i < len(endpoints) && names[i] != "" {
			askedName[names[i]] = true
		}
	}
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
		return Observed{}, answered, fmt.Errorf("no member that answers knows a leader (%d of %d endpoints answered)", len(answered), len(asked))
	}
	lctx, cancel := context.WithTimeout(ctx, perCall)
	cl, err := c.MemberList(lctx)
	cancel()
	if err != nil {
		return Observed{}, answered, err
	}
	o := Observed{Cluster: cl, Status: map[uint64]MemberStatus{}, StatusErr: map[uint64]error{}}
	// Everything that needs no call is recorded before any call starts: the calls write the
	// same maps (a write here while a call's goroutine wrote ended the process).
	var toAsk []Member
	for _, m := range cl.Members {
		switch st, ok := answered[m.ID]; {
		case ok:
			o.Status[m.ID] = st
		case len(m.ClientURLs) == 0:
			o.StatusErr[m.ID] = errors.New("member has not started yet")
		case asked[m.ClientURLs[0]] || (m.Name != "" && askedName[m.Name]):
			o.StatusErr[m.ID] = errors.New("member did not answer")
		default:
			toAsk = append(toAsk, m)
		}
	}
	for _, m := range toAsk {
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
	wg.Wait()
	return o, answered, nil
}

func (c *client) Auth(ctx context.Context, users []string) (AuthState, error) {
	st, err := c.c.AuthStatus(ctx)
	if err != nil {
		return AuthState{}, fmt.Errorf("failed to read etcd's authentication status: %w", err)
	}
	out := AuthState{Enabled: st.Enabled, Roles: map[string][]string{}}
	for _, u := range users {
		r, err := c.c.UserGet(ctx, u)
		if err != nil {
			if errors.Is(err, rpctypes.ErrUserNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrUserNotFound.Error() {
				continue
			}
			return AuthState{}, fmt.Errorf("failed to read etcd user %s: %w", u, err)
		}
		out.Roles[u] = r.Roles
	}
	return out, nil
}

func (c *client) EnsureRootUser(ctx context.Context, name, password string) error {
	var err error
	if password == "" {
		_, err = c.c.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
	} else {
		_, err = c.c.UserAdd(ctx, name, password)
	}
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) && rpctypes.ErrorDesc(err) != rpctypes.ErrUserAlreadyExist.Error() {
		return fmt.Errorf("failed to add etcd user %s: %w", name, err)
	}
	// Granting a role the user has is not an error in etcd.
	if _, err := c.c.UserGrantRole(ctx, name, "root"); err != nil {
		return fmt.Errorf("failed to grant etcd user %s the root role: %w", name, err)
	}
	return nil
}

func (c *client) RemoveUser(ctx context.Context, name string) error {
	_, err := c.c.UserDelete(ctx, name)
	if err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) && rpctypes.ErrorDesc(err) != rpctypes.ErrUserNotFound.Error() {
		return fmt.Errorf("failed to remove etcd user %s: %w", name, err)
	}
	return nil
}

func (c *client) SetAuth(ctx context.Context, on bool) error {
	var err error
	if on {
		_, err = c.c.AuthEnable(ctx)
	} else {
		_, err = c.c.AuthDisable(ctx)
	}
	if err != nil {
		return fmt.Errorf("failed to turn etcd's authentication %s: %w", map[bool]string{true: "on", false: "off"}[on], err)
	}
	return nil
}

package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"time"
)

// Defaults of ClientCache.
const (
	// DefaultCacheSize bounds the clients a ClientCache keeps open in all.
	DefaultCacheSize = 1024
	// DefaultCachePerOwner bounds the clients kept per owner (a pass dials the cluster's
	// client Service, and during a change one member or a subset of them).
	DefaultCachePerOwner = 4
	// DefaultCacheIdle is how long a client nobody asked for is kept: longer than the
	// settled requeue interval, so a settled cluster's passes reuse it.
	DefaultCacheIdle = 3 * time.Minute
)

type ownerKey struct{}

// WithOwner returns ctx carrying owner (an EtcdCluster's UID): a ClientCache's Dial reuses
// clients only for the owner that opened them. Without an owner, Dial opens a new client.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

func ownerOf(ctx context.Context) string {
	s, _ := ctx.Value(ownerKey{}).(string)
	return s
}

// ClientCache keeps etcd clients open across passes, instead of a dial per pass. A client is
// reused for the same owner (WithOwner), the same endpoints in the same order, and the same
// TLS material (the client certificate chain it presents and the CAs it trusts); a changed
// certificate or endpoint set gets a new client. Old clients are closed once no caller holds
// them: when an owner has more than PerOwner, the cache more than Size, when one has not
// been asked for in Idle, when a call on it failed (the next pass dials afresh, as before),
// and when Forget is called for its owner (the cluster is deleted). The clients Dial returns
// are shared: their Close only hands them back. Safe for concurrent use.
type ClientCache struct {
	dial     Dialer
	size     int
	perOwner int
	idle     time.Duration
	now      func() time.Time

	mu      sync.Mutex
	entries []*cacheEntry // least recently used first
}

// CacheOptions configure a ClientCache; zero values take the defaults above.
type CacheOptions struct {
	Size     int
	PerOwner int
	Idle     time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

// NewClientCache returns a cache that opens clients with dial.
func NewClientCache(dial Dialer, o CacheOptions) *ClientCache {
	c := &ClientCache{dial: dial, size: o.Size, perOwner: o.PerOwner, idle: o.Idle, now: o.Now}
	if c.size <= 0 {
		c.size = DefaultCacheSize
	}
	if c.perOwner <= 0 {
		c.perOwner = DefaultCachePerOwner
	}
	if c.idle <= 0 {
		c.idle = DefaultCacheIdle
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

type cacheEntry struct {
	owner     string
	endpoints []string
	tls       *tls.Config
	client    Client
	refs      int
	used      time.Time
	evicted   bool // no longer handed out; closed when refs reaches 0
	closeOnce sync.Once
}

func (e *cacheEntry) close() {
	e.closeOnce.Do(func() { _ = e.client.Close() })
}

// Dial is a Dialer: the cached client of ctx's owner for endpoints and tlsConfig, or a new
// one. Callers must Close what it returns, as with any Dialer.
func (c *ClientCache) Dial(ctx context.Context, endpoints []string, tlsConfig *tls.Config) (Client, error) {
	owner := ownerOf(ctx)
	if owner == "" {
		return c.dial(ctx, endpoints, tlsConfig)
	}
	c.mu.Lock()
	c.sweepLocked()
	for i, e := range c.entries {
		if e.owner == owner && slices.Equal(e.endpoints, endpoints) && sameTLS(e.tls, tlsConfig) {
			e.refs++
			e.used = c.now()
			c.entries = append(append(c.entries[:i:i], c.entries[i+1:]...), e)
			c.mu.Unlock()
			return &cachedClient{Client: e.client, cache: c, entry: e}, nil
		}
	}
	c.mu.Unlock()

	cl, err := c.dial(ctx, endpoints, tlsConfig)
	if err != nil {
		return nil, err
	}
	e := &cacheEntry{owner: owner, endpoints: slices.Clone(endpoints), tls: tlsConfig, client: cl, refs: 1, used: c.now()}
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.boundLocked(owner)
	c.mu.Unlock()
	return &cachedClient{Client: cl, cache: c, entry: e}, nil
}

// Forget closes the clients of owner (at once, or when their callers hand them back).
func (c *ClientCache) Forget(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = slices.DeleteFunc(c.entries, func(e *cacheEntry) bool {
		if e.owner == owner {
			c.evictLocked(e)
			return true
		}
		return false
	})
}

// Len is the number of clients the cache holds open for reuse.
func (c *ClientCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Close closes every client (at once, or when their callers hand them back).
func (c *ClientCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		c.evictLocked(e)
	}
	c.entries = nil
}

func (c *ClientCache) evictLocked(e *cacheEntry) {
	e.evicted = true
	if e.refs == 0 {
		e.close()
	}
}

// sweepLocked drops the clients nobody asked for in idle.
func (c *ClientCache) sweepLocked() {
	cutoff := c.now().Add(-c.idle)
	c.entries = slices.DeleteFunc(c.entries, func(e *cacheEntry) bool {
		if e.refs == 0 && e.used.Before(cutoff) {
			c.evictLocked(e)
			return true
		}
		return false
	})
}

// boundLocked drops the least recently used clients beyond perOwner for owner and beyond
// size in all; the one just added is the most recent and stays.
func (c *ClientCache) boundLocked(owner string) {
	n := 0
	for _, e := range c.entries {
		if e.owner == owner {
			n++
		}
	}
	for i := 0; i < len(c.entries) && (n > c.perOwner || len(c.entries) > c.size); {
		e := c.entries[i]
		if len(c.entries) <= c.size && e.owner != owner {
			i++
			continue
		}
		if e.owner == owner {
			n--
		}
		c.evictLocked(e)
		c.entries = slices.Delete(c.entries, i, i+1)
	}
}

// release hands e back; failed says a call on it returned an error, after which it is not
// handed out again.
func (c *ClientCache) release(e *cacheEntry, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if failed && !e.evicted {
		c.entries = slices.DeleteFunc(c.entries, func(x *cacheEntry) bool { return x == e })
		e.evicted = true
	}
	if e.evicted && e.refs == 0 {
		e.close()
	}
}

// sameTLS reports whether a and b present the same client certificate chains and trust the
// same CAs (both nil: plain HTTP).
func sameTLS(a, b *tls.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a == b {
		return true
	}
	if len(a.Certificates) != len(b.Certificates) || a.ServerName != b.ServerName || a.InsecureSkipVerify != b.InsecureSkipVerify {
		return false
	}
	for i := range a.Certificates {
		if !slices.EqualFunc(a.Certificates[i].Certificate, b.Certificates[i].Certificate, bytes.Equal) {
			return false
		}
	}
	if (a.RootCAs == nil) != (b.RootCAs == nil) {
		return false
	}
	return a.RootCAs == nil || a.RootCAs.Equal(b.RootCAs)
}

// cachedClient is a cached Client handed out to one caller: Close hands it back, and a
// failed call keeps it from being handed out again.
type cachedClient struct {
	Client
	cache  *ClientCache
	entry  *cacheEntry
	mu     sync.Mutex
	failed bool
	closed bool
}

func (c *cachedClient) note(err error) error {
	if err != nil {
		c.mu.Lock()
		c.failed = true
		c.mu.Unlock()
	}
	return err
}

// Close hands the client back to the cache; it is closed only once the cache drops it.
func (c *cachedClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	failed := c.failed
	c.mu.Unlock()
	c.cache.release(c.entry, failed)
	return nil
}

func (c *cachedClient) MemberList(ctx context.Context) (Cluster, error) {
	v, err := c.Client.MemberList(ctx)
	return v, c.note(err)
}

func (c *cachedClient) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	v, err := c.Client.Status(ctx, endpoint)
	return v, c.note(err)
}

func (c *cachedClient) AddLearner(ctx context.Context, peerURLs []string) (Member, error) {
	v, err := c.Client.AddLearner(ctx, peerURLs)
	return v, c.note(err)
}

func (c *cachedClient) Promote(ctx context.Context, id uint64) error {
	return c.note(c.Client.Promote(ctx, id))
}

func (c *cachedClient) UpdatePeerURLs(ctx context.Context, id uint64, peerURLs []string) error {
	return c.note(c.Client.UpdatePeerURLs(ctx, id, peerURLs))
}

func (c *cachedClient) Remove(ctx context.Context, id uint64) error {
	return c.note(c.Client.Remove(ctx, id))
}

func (c *cachedClient) MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error {
	return c.note(c.Client.MoveLeader(ctx, leaderEndpoint, transferee))
}

func (c *cachedClient) AdvanceLog(ctx context.Context, n int) error {
	return c.note(c.Client.AdvanceLog(ctx, n))
}

func (c *cachedClient) Snapshot(ctx context.Context, endpoint string) (*Snapshot, error) {
	v, err := c.Client.Snapshot(ctx, endpoint)
	return v, c.note(err)
}

func (c *cachedClient) Defragment(ctx context.Context, endpoint string) error {
	return c.note(c.Client.Defragment(ctx, endpoint))
}

func (c *cachedClient) Alarms(ctx context.Context) ([]Alarm, error) {
	v, err := c.Client.Alarms(ctx)
	return v, c.note(err)
}

func (c *cachedClient) DisarmAlarm(ctx context.Context, a Alarm) error {
	return c.note(c.Client.DisarmAlarm(ctx, a))
}

func (c *cachedClient) Compact(ctx context.Context, revision int64) error {
	return c.note(c.Client.Compact(ctx, revision))
}

func (c *cachedClient) Auth(ctx context.Context, users []string) (AuthState, error) {
	v, err := c.Client.Auth(ctx, users)
	return v, c.note(err)
}

func (c *cachedClient) EnsureRootUser(ctx context.Context, name, password string) error {
	return c.note(c.Client.EnsureRootUser(ctx, name, password))
}

func (c *cachedClient) SetAuth(ctx context.Context, on bool) error {
	return c.note(c.Client.SetAuth(ctx, on))
}

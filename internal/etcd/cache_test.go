package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// countingDialer opens fakes and counts dials and closes.
type countingDialer struct {
	mu     sync.Mutex
	dials  int
	open   map[*closeCounter]bool
	failOn string // MemberList fails when set
}

type closeCounter struct {
	*Fake
	d      *countingDialer
	closed int
}

func (c *closeCounter) Close() error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.closed++
	delete(c.d.open, c)
	return nil
}

func (c *closeCounter) MemberList(ctx context.Context) (Cluster, error) {
	if c.d.failOn != "" {
		return Cluster{}, errors.New(c.d.failOn)
	}
	return c.Fake.MemberList(ctx)
}

func (d *countingDialer) dial(_ context.Context, _ []string, _ *tls.Config) (Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	c := &closeCounter{Fake: &Fake{}, d: d}
	if d.open == nil {
		d.open = map[*closeCounter]bool{}
	}
	d.open[c] = true
	return c, nil
}

func (d *countingDialer) counts() (dials, open int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.open {
		if c.closed > 1 {
			panic("closed twice")
		}
	}
	return d.dials, len(d.open)
}

// tlsFor builds a client TLS configuration from a fresh CA and a leaf it signs.
func tlsFor(t *testing.T) *tls.Config {
	t.Helper()
	ca, err := certs.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := certs.Issue(ca, certs.Request{CommonName: "client", Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(leaf.Cert, leaf.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool}
}

// clone rebuilds cfg from its material, as a pass that reads the same Secret again does.
func clone(cfg *tls.Config) *tls.Config {
	out := cfg.Clone()
	out.RootCAs = cfg.RootCAs.Clone()
	return out
}

func use(t *testing.T, c *ClientCache, ctx context.Context, eps []string, cfg *tls.Config) Client {
	t.Helper()
	cl, err := c.Dial(ctx, eps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MemberList(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("member list: %v", err)
	}
	return cl
}

func TestClientCacheReusesAndRedialsOnChange(t *testing.T) {
	d := &countingDialer{}
	c := NewClientCache(d.dial, CacheOptions{})
	ctx := WithOwner(context.Background(), "uid-1")
	eps := []string{"https://etcd-client.ns.svc:2379"}
	cfg := tlsFor(t)

	// Passes with the same endpoints and the same material (read again: new pointers) share
	// one client.
	for i := 0; i < 5; i++ {
		cl := use(t, c, ctx, eps, clone(cfg))
		_ = cl.Close()
		_ = cl.Close() // a second Close is harmless
	}
	if dials, open := d.counts(); dials != 1 || open != 1 {
		t.Fatalf("5 passes: %d dials, %d open; want 1 and 1", dials, open)
	}

	// A renewed client certificate (same CA) gets a new client; the old one is closed.
	renewed := tlsFor(t)
	renewed.RootCAs = cfg.RootCAs
	_ = use(t, c, ctx, eps, renewed).Close()
	if dials, open := d.counts(); dials != 2 {
		t.Fatalf("renewed certificate: %d dials, %d open; want 2 dials", dials, open)
	}
	// A new CA bundle with the same certificate gets a new client too.
	rotated := clone(renewed)
	rotated.RootCAs = tlsFor(t).RootCAs
	_ = use(t, c, ctx, eps, rotated).Close()
	// Another endpoint set: a new client.
	_ = use(t, c, ctx, []string{"https://etcd-0.etcd.ns.svc:2379"}, rotated).Close()
	// Plain HTTP: a new client.
	_ = use(t, c, ctx, []string{"http://etcd-client.ns.svc:2379"}, nil).Close()
	_ = use(t, c, ctx, []string{"http://etcd-client.ns.svc:2379"}, nil).Close()
	if dials, _ := d.counts(); dials != 5 {
		t.Fatalf("after changes: %d dials, want 5", dials)
	}
	// Each owner keeps at most DefaultCachePerOwner clients.
	if _, open := d.counts(); open != DefaultCachePerOwner {
		t.Fatalf("%d clients open, want %d", open, DefaultCachePerOwner)
	}
	// Another owner never gets uid-1's client.
	_ = use(t, c, WithOwner(context.Background(), "uid-2"), []string{"http://etcd-client.ns.svc:2379"}, nil).Close()
	if dials, _ := d.counts(); dials != 6 {
		t.Fatalf("another owner: %d dials, want 6", dials)
	}
	// Deleting the cluster closes its clients.
	c.Forget("uid-1")
	if _, open := d.counts(); open != 1 {
		t.Fatalf("after Forget: %d open, want 1 (uid-2's)", open)
	}
	// No owner: no caching.
	_ = use(t, c, context.Background(), eps, nil).Close()
	_ = use(t, c, context.Background(), eps, nil).Close()
	if dials, _ := d.counts(); dials != 8 {
		t.Fatalf("no owner: %d dials, want 8", dials)
	}
}

func TestClientCacheKeepsAClientInUseOpen(t *testing.T) {
	d := &countingDialer{}
	c := NewClientCache(d.dial, CacheOptions{})
	ctx := WithOwner(context.Background(), "uid")
	held := use(t, c, ctx, []string{"http://a:2379"}, nil)
	c.Forget("uid")
	if _, open := d.counts(); open != 1 {
		t.Fatalf("a client in use was closed by Forget")
	}
	if _, err := held.MemberList(ctx); err != nil {
		t.Fatal(err)
	}
	_ = held.Close()
	if _, open := d.counts(); open != 0 {
		t.Fatalf("a forgotten client stays open after its caller handed it back")
	}
}

func TestClientCacheDropsFailedIdleAndExcessClients(t *testing.T) {
	d := &countingDialer{}
	now := time.Now()
	c := NewClientCache(d.dial, CacheOptions{Size: 3, Idle: time.Minute, Now: func() time.Time { return now }})
	ctx := WithOwner(context.Background(), "uid")
	eps := []string{"http://a:2379"}

	// A failed call: the client is not handed out again.
	d.failOn = "connection refused"
	_ = use(t, c, ctx, eps, nil).Close()
	d.failOn = ""
	_ = use(t, c, ctx, eps, nil).Close()
	if dials, open := d.counts(); dials != 2 || open != 1 {
		t.Fatalf("after a failed call: %d dials, %d open; want 2 and 1", dials, open)
	}
	// Idle for longer than Idle: closed at the next Dial.
	now = now.Add(2 * time.Minute)
	_ = use(t, c, WithOwner(context.Background(), "other"), eps, nil).Close()
	if dials, open := d.counts(); dials != 3 || open != 1 {
		t.Fatalf("after idling: %d dials, %d open; want 3 and 1", dials, open)
	}
	// Size bounds the cache across owners.
	for i := 0; i < 10; i++ {
		_ = use(t, c, WithOwner(context.Background(), fmt.Sprint("o", i)), eps, nil).Close()
	}
	if _, open := d.counts(); open != 3 || c.Len() != 3 {
		t.Fatalf("%d open, %d cached; want 3", open, c.Len())
	}
	c.Close()
	if _, open := d.counts(); open != 0 {
		t.Fatalf("%d open after Close", open)
	}
}

// TestClientCacheConcurrent: concurrent passes of a few owners share their clients and
// never use a closed one (run with -race).
func TestClientCacheConcurrent(t *testing.T) {
	d := &countingDialer{}
	c := NewClientCache(d.dial, CacheOptions{PerOwner: 1})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				ctx := WithOwner(context.Background(), fmt.Sprint("uid-", i%3))
				cl, err := c.Dial(ctx, []string{fmt.Sprint("http://e", i%2)}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				cc := cl.(*cachedClient).Client.(*closeCounter)
				d.mu.Lock()
				closed := cc.closed
				d.mu.Unlock()
				if closed != 0 {
					t.Error("handed out a closed client")
				}
				_ = cl.Close()
				if i%50 == 0 {
					c.Forget(fmt.Sprint("uid-", i%3))
				}
			}
		}()
	}
	wg.Wait()
	c.Close()
	if _, open := d.counts(); open != 0 {
		t.Fatalf("%d clients left open", open)
	}
}

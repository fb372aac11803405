package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// writeTimeout bounds each write of the writer: a write that takes longer counts as failed,
// and the next one starts, so a stall shows up as a gap between acknowledged writes.
const writeTimeout = 500 * time.Millisecond

// writer writes keys one after another, each with a 500 ms timeout, through every member's
// name (one etcd client in this process, resolving names through the local cluster's hosts
// file at each dial, so a restarted member at a new address is found again). It remembers
// which writes etcd acknowledged, when, and the raft term of each answer.
type writer struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	acked  []string
	times  []time.Time // when each acknowledgement arrived
	terms  []uint64    // the raft term each acknowledgement carried
	failed int
	errs   []string // the first failures: when, how long the write took, the error
}

// lookupHost resolves name through the local cluster's hosts file (the name view the pods and
// the operator use).
func lookupHost(name string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "hosts"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		for _, n := range fields[min(1, len(fields)):] {
			if n == name {
				return fields[0], nil
			}
		}
	}
	return "", fmt.Errorf("%s is not in the local cluster's hosts file", name)
}

// dialName dials host:port with the host resolved by lookupHost.
func dialName(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		if host, err = lookupHost(host); err != nil {
			return nil, err
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
}

// etcdClient is a client of the cluster in ns with n members' endpoints.
func etcdClient(t testing.TB, ns string, n int) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoints(ns, n), ","),
		TLS:         clientTLSOf(ns),
		DialTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialName)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func startWriter(t testing.TB, ns string, maxMembers int) *writer {
	t.Helper()
	return startPacedWriter(t, ns, maxMembers, 0)
}

// startPacedWriter is startWriter with a write started at most every `every` (0: each write
// starts when the last one ended): many clusters written at once on a small machine.
func startPacedWriter(t testing.TB, ns string, maxMembers int, every time.Duration) *writer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cli: etcdClient(t, ns, maxMembers), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("w%d", i)
			wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
			began := time.Now()
			resp, err := w.cli.Put(wctx, key, fmt.Sprintf("v%d", i))
			wcancel()
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, key)
				w.times = append(w.times, now)
				w.terms = append(w.terms, resp.Header.RaftTerm)
			} else if !errors.Is(ctx.Err(), context.Canceled) {
				w.failed++
				if len(w.errs) < 5 {
					w.errs = append(w.errs, fmt.Sprintf("%s (after %s): %v", now.Format("15:04:05.000"), now.Sub(began).Round(time.Millisecond), err))
				}
			}
			w.mu.Unlock()
			if every > 0 { // the pacing interval, not a wait for a condition
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(began.Add(every))):
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done; w.cli.Close() })
	return w
}

// waitAcked waits until etcd acknowledged at least n more writes of w than when it was
// called (with a deadline).
func (w *writer) waitAcked(t testing.TB, n int) {
	t.Helper()
	w.mu.Lock()
	target := len(w.acked) + n
	w.mu.Unlock()
	eventually(t, time.Minute, fmt.Sprintf("%d more acknowledged writes", n), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < target {
			return fmt.Errorf("%d of %d acknowledged", len(w.acked), target)
		}
		return nil
	})
}

// longestGap is the longest time between two acknowledged writes.
func (w *writer) longestGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(w.times); i++ {
		gap = max(gap, w.times[i].Sub(w.times[i-1]))
	}
	return gap
}

// termChanges is the number of times the raft term rose between acknowledged writes: every
// leader change (an election, or a MoveLeader hand-over) starts a new term, so this counts the
// leader changes etcd made while the writer ran (an election that failed counts too).
func (w *writer) termChanges() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for i := 1; i < len(w.terms); i++ {
		if w.terms[i] > w.terms[i-1] {
			n++
		}
	}
	return n
}

// finish stops the writer and checks that every acknowledged write is readable through the
// first `members` members.
func (w *writer) finish(t testing.TB, ns string, members int) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.acked) == 0 {
		t.Fatalf("no write was acknowledged (%d failed)", w.failed)
	}
	cli := etcdClient(t, ns, members)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "w", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	var lost []string
	for _, k := range w.acked {
		if !have[k] {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes are lost: %v", len(lost), len(w.acked), lost)
	}
	t.Logf("%d acknowledged writes, all readable; %d writes failed or timed out (500 ms each)", len(w.acked), w.failed)
	for _, e := range w.errs {
		t.Logf("failed write at %s", e)
	}
}

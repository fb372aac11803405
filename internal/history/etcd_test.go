package history_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-pilot/etcd-pilot/internal/history"
	"github.com/etcd-pilot/etcd-pilot/internal/history/etcdkv"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// TestRealEtcd records 8 clients doing puts, gets, txns and deletes on 20 keys of a real etcd
// for two seconds or more (one of them with timeouts so short that many of its requests end
// unknown)
// and a watch on their prefix, and checks both; the same history with one read made stale, and
// the watch with one event dropped, must fail.
func TestRealEtcd(t *testing.T) {
	ep := etcdproc.Start(t, "127.0.51.1")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "h/"
	first, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	watcher := etcdkv.Watch(ctx, cli, 1, prefix, first.Header.Revision)

	// The clients run for two seconds and until those that wait for answers got 1000 (on a
	// loaded machine two seconds may give few), within the test's deadline.
	r := history.NewRecorder()
	end := time.Now().Add(2 * time.Second)
	var answered atomic.Int64
	enough := func() bool {
		return time.Now().After(end) && answered.Load() >= 1000 || ctx.Err() != nil
	}
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			seen := map[string]string{} // what this client last read or wrote per key
			for n := 0; !enough(); n++ {
				key := fmt.Sprintf("%sk%d", prefix, rng.IntN(20))
				op := history.Op{Key: key, Value: fmt.Sprintf("c%d-%d", c, n)}
				switch p := rng.IntN(100); {
				case p < 30:
					op.Kind = history.Put
				case p < 60:
					op.Kind = history.Get
				case p < 90:
					op.Kind, op.Expect = history.Txn, seen[key]
				default:
					op.Kind = history.Delete
				}
				timeout := 5 * time.Second
				if c == 7 { // ends some requests before etcd answers: their outcome is unknown
					timeout = time.Duration(rng.IntN(800)) * time.Microsecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				res, err := etcdkv.Do(ctx, cli, r, c, op)
				cancel()
				if err == nil && c != 7 {
					answered.Add(1)
				}
				switch {
				case op.Kind == history.Put || op.Kind == history.Txn && res.Succeeded:
					seen[key] = op.Value
				case res.Found:
					seen[key] = res.Got
				case op.Kind != history.Put && res.Revision != 0:
					seen[key] = ""
				}
			}
		}()
	}
	wg.Wait()

	// Wait until the watch has delivered everything up to the last revision.
	last, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.WaitFor(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// A write outside the prefix: the watch learns of its revision only from a progress
	// notification.
	other, err := cli.Put(ctx, "other", "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.WaitFor(ctx, other.Header.Revision); err != nil {
		t.Fatal(err)
	}
	watch := watcher.Stop()
	if watch.StartRev != first.Header.Revision || watch.Canceled || watch.ProgressRev < other.Header.Revision {
		t.Fatalf("the watch record starts at %d (want %d), canceled %v, progress %d (want %d)",
			watch.StartRev, first.Header.Revision, watch.Canceled, watch.ProgressRev, other.Header.Revision)
	}

	ops := r.Ops()
	kinds := map[history.Kind]int{}
	errs := map[string]int{}
	for _, o := range ops {
		kinds[o.Kind]++
		if o.Err != "" {
			errs[fmt.Sprintf("client %d: %s", o.Client, o.Err)]++
		}
	}
	t.Logf("errors: %v", errs)
	start := time.Now()
	res := history.Check(ops, time.Minute)
	t.Logf("%d ops (%v), %d keys, %d unknown (%d seen to take effect, %d unseen), up to revision %d, checked in %s; the watch got %d events",
		len(ops), kinds, res.Keys, res.Unknown, res.Resolved, res.Unseen, last.Header.Revision, time.Since(start), len(watch.Events))
	if !res.Linearizable {
		t.Fatalf("a real etcd's history is not linearizable: %+v\n%s", res, res.Detail)
	}
	if len(ops) < 1000 || res.Keys != 20 || res.Unknown == 0 || len(watch.Events) < 100 {
		t.Fatalf("too little happened: %d ops, %d keys, %d unknown, %d watch events", len(ops), res.Keys, res.Unknown, len(watch.Events))
	}
	if err := history.CheckWatches([]history.WatchRecord{watch}, ops); err != nil {
		t.Fatalf("a real etcd's watch: %v", err)
	}

	// One read made stale: it names an older acknowledged put of its key than the acknowledged
	// write it saw. (Were the write it saw unknown, the stale value could be legal: unknown
	// writes may never have happened.)
	acknowledged := map[string]history.Op{} // by key and revision
	for _, o := range ops {
		if !o.Unknown && !o.Failed && (o.Kind == history.Put || o.Kind == history.Txn && o.Succeeded) {
			acknowledged[fmt.Sprint(o.Key, "@", o.Revision)] = o
		}
	}
	stale := append([]history.Op(nil), ops...)
	made := false
	for i := range stale {
		g := &stale[i]
		if g.Kind != history.Get || g.Unknown || !g.Found {
			continue
		}
		if _, ok := acknowledged[fmt.Sprint(g.Key, "@", g.ModRevision)]; !ok {
			continue
		}
		for _, w := range ops {
			if w.Kind == history.Put && !w.Unknown && !w.Failed && w.Key == g.Key && w.Revision < g.ModRevision {
				g.Got, g.ModRevision, made = w.Value, w.Revision, true
				break
			}
		}
		if made {
			break
		}
	}
	if !made {
		t.Fatal("no read to make stale")
	}
	start = time.Now()
	if res := history.Check(stale, time.Minute); res.Linearizable || res.TimedOut {
		t.Fatalf("a stale read passed: %+v", res)
	} else {
		t.Logf("the stale read found in %s: %s", time.Since(start), res.Detail)
	}

	// One event of an acknowledged write dropped from the middle of the watch.
	acked := map[string]bool{}
	for _, o := range ops {
		if !o.Unknown && !o.Failed && (o.Kind == history.Put || o.Kind == history.Txn && o.Succeeded || o.Kind == history.Delete && o.Found) {
			acked[fmt.Sprint(o.Key, o.Revision)] = true
		}
	}
	gap := watch
	mid := len(gap.Events) / 2
	for mid < len(gap.Events) && !acked[fmt.Sprint(gap.Events[mid].Key, gap.Events[mid].ModRevision)] {
		mid++
	}
	if mid == len(gap.Events) {
		t.Fatal("no event of an acknowledged write in the second half of the watch")
	}
	gap.Events = append(append([]history.WatchEvent(nil), gap.Events[:mid]...), gap.Events[mid+1:]...)
	err = history.CheckWatches([]history.WatchRecord{gap}, ops)
	if err == nil {
		t.Fatalf("a watch missing event %d passed", mid)
	}
	t.Logf("the watch without event %d: %v", mid, err)
}

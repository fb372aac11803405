// Package etcdkv runs history ops against etcd with the v3 client and records them, so that
// every user of package history fills the results in the same way (the header's revision, a
// Txn's else-branch read, whether a Delete removed the key).
package etcdkv

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-pilot/etcd-pilot/internal/history"
)

// Do runs op (its Kind, Key, Value and Expect) against kv as client, recorded in r, and returns
// the results and the error. A Get is linearizable (the client's default); a Txn is
// `if Value(Key) == Expect (CreateRevision(Key) == 0 when Expect is "") then Put(Key, Value)
// else Get(Key)`. The caller bounds the request with ctx.
func Do(ctx context.Context, kv clientv3.KV, r *history.Recorder, client int, op history.Op) (history.Op, error) {
	p := r.Begin(client, op)
	res, err := call(ctx, kv, op)
	p.Done(res, err)
	return res, err
}

func call(ctx context.Context, kv clientv3.KV, op history.Op) (history.Op, error) {
	var res history.Op
	switch op.Kind {
	case history.Put:
		resp, err := kv.Put(ctx, op.Key, op.Value)
		if err != nil {
			return res, err
		}
		res.Revision = resp.Header.Revision
	case history.Get:
		resp, err := kv.Get(ctx, op.Key)
		if err != nil {
			return res, err
		}
		res.Revision = resp.Header.Revision
		read(&res, resp.Kvs)
	case history.Txn:
		cmp := clientv3.Compare(clientv3.Value(op.Key), "=", op.Expect)
		if op.Expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(op.Key), "=", 0)
		}
		resp, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(op.Key, op.Value)).Else(clientv3.OpGet(op.Key)).Commit()
		if err != nil {
			return res, err
		}
		res.Revision, res.Succeeded = resp.Header.Revision, resp.Succeeded
		if !resp.Succeeded && len(resp.Responses) == 1 {
			read(&res, resp.Responses[0].GetResponseRange().GetKvs())
		}
	case history.Delete:
		resp, err := kv.Delete(ctx, op.Key)
		if err != nil {
			return res, err
		}
		res.Revision, res.Found = resp.Header.Revision, resp.Deleted > 0
	}
	return res, nil
}

// read fills a read's results from the key-values a range returned.
func read(res *history.Op, kvs []*mvccpb.KeyValue) {
	if len(kvs) > 0 {
		res.Found, res.Got, res.ModRevision = true, string(kvs[0].Value), kvs[0].ModRevision
	}
}

// Event converts one event of a watch response.
func Event(ev *clientv3.Event) history.WatchEvent {
	return history.WatchEvent{Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Delete: ev.Type == mvccpb.DELETE,
		ModRevision: ev.Kv.ModRevision, CreateRevision: ev.Kv.CreateRevision, Version: ev.Kv.Version}
}

// Watcher records one watch on a prefix as a history.WatchRecord.
type Watcher struct {
	w      clientv3.Watcher
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	rec history.WatchRecord
}

// Watch starts watching every key under prefix for the events after revision after (the
// record's StartRev) through w, recording what arrives until Stop or ctx ends, or etcd cancels
// the watch. The watch does not require a leader: it waits through elections as a long-lived
// client would.
func Watch(ctx context.Context, w clientv3.Watcher, id int, prefix string, after int64) *Watcher {
	ctx, cancel := context.WithCancel(ctx)
	rw := &Watcher{w: w, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		rec: history.WatchRecord{Watcher: id, Prefix: prefix, StartRev: after}}
	ch := w.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(after+1))
	go func() {
		defer close(rw.done)
		for resp := range ch {
			rw.mu.Lock()
			if resp.IsProgressNotify() {
				rw.rec.ProgressRev = max(rw.rec.ProgressRev, resp.Header.Revision)
			}
			// A cancellation after Stop (or ctx's end) is the one this side asked for; only
			// etcd's own counts.
			if resp.Canceled && ctx.Err() == nil {
				rw.rec.Canceled, rw.rec.CompactRev = true, resp.CompactRevision
			}
			for _, ev := range resp.Events {
				rw.rec.Events = append(rw.rec.Events, Event(ev))
			}
			rw.mu.Unlock()
		}
	}()
	return rw
}

// Seen is the highest revision up to which the watch has delivered every event (its last
// event's or a progress notification's).
func (rw *Watcher) Seen() int64 {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	seen := rw.rec.ProgressRev
	if n := len(rw.rec.Events); n > 0 {
		seen = max(seen, rw.rec.Events[n-1].ModRevision)
	}
	return seen
}

// progressInterval is how often WaitFor asks etcd for a progress notification.
const progressInterval = 50 * time.Millisecond

// WaitFor waits until the watch has delivered everything up to rev (asking etcd for progress
// notifications meanwhile), or ctx ends, or the watch has ended.
func (rw *Watcher) WaitFor(ctx context.Context, rev int64) error {
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for rw.Seen() < rev {
		// The request goes to the watch's own stream: the client keys streams by the
		// context's metadata, and the watch's context carries the same as rw.ctx.
		if err := rw.w.RequestProgress(rw.ctx); err != nil && rw.ctx.Err() == nil {
			return fmt.Errorf("failed to request watch progress: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the watch on %q saw up to revision %d, not %d: %w", rw.rec.Prefix, rw.Seen(), rev, ctx.Err())
		case <-rw.done:
			if rw.Seen() < rev {
				return fmt.Errorf("the watch on %q ended at revision %d before %d", rw.rec.Prefix, rw.Seen(), rev)
			}
		case <-tick.C:
		}
	}
	return nil
}

// Stop ends the watch and returns what it recorded.
func (rw *Watcher) Stop() history.WatchRecord {
	rw.cancel()
	<-rw.done
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rec := rw.rec
	rec.Events = append([]history.WatchEvent(nil), rw.rec.Events...)
	return rec
}

// Mix is how RunMixed picks and paces its ops.
type Mix struct {
	// Prefix and Keys: the ops go to keys Prefix+"k0" .. Prefix+"k<Keys-1>".
	Prefix string
	Keys   int
	// OpTime bounds each op; one that runs out is unknown to the history.
	OpTime time.Duration
	// Gap is the pause after an op that succeeded (it leaves CPU to etcd and the operator);
	// ErrorGap the pause after one that failed (a cluster in trouble is not hammered).
	Gap, ErrorGap time.Duration
}

// RunMixed runs ops against kv as client until ctx ends, one at a time, recorded in r: 35 %
// puts, 35 % gets, 25 % transactions (compare to the value this client last saw), 5 % deletes,
// keys and kinds drawn from rng. Values are unique (client and counter), so every read names
// the write it saw.
func RunMixed(ctx context.Context, kv clientv3.KV, r *history.Recorder, client int, rng *rand.Rand, m Mix) {
	last := map[string]string{}
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("%sk%d", m.Prefix, rng.Intn(m.Keys))
		op := history.Op{Key: key, Value: fmt.Sprintf("c%d-%d", client, n)}
		switch x := rng.Intn(100); {
		case x < 35:
			op.Kind = history.Put
		case x < 70:
			op.Kind = history.Get
		case x < 95:
			op.Kind, op.Expect = history.Txn, last[key]
		default:
			op.Kind = history.Delete
		}
		octx, cancel := context.WithTimeout(ctx, m.OpTime)
		res, err := Do(octx, kv, r, client, op)
		cancel()
		pause := m.Gap
		if err != nil {
			pause = m.ErrorGap
		} else {
			switch op.Kind {
			case history.Put:
				last[key] = op.Value
			case history.Get:
				last[key] = res.Got
			case history.Txn:
				if res.Succeeded {
					last[key] = op.Value
				} else {
					last[key] = res.Got
				}
			case history.Delete:
				last[key] = ""
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

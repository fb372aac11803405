// Package etcdkv runs history ops against etcd with the v3 client and records them, so that
// every user of package history fills the results in the same way (the header's revision, a
// Txn's else-branch read, whether a Delete removed the key).
package etcdkv

import (
	"context"

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

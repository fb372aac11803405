package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Hand-built ops; times are in ms from 0 (any unit works, only the order counts).
func put(c int, key, value string, call, ret, rev int64) Op {
	return Op{Client: c, Kind: Put, Key: key, Value: value, Call: call, Return: ret, Revision: rev}
}

func get(c int, key, got string, call, ret, rev int64) Op {
	return Op{Client: c, Kind: Get, Key: key, Found: true, Got: got, Call: call, Return: ret, Revision: rev}
}

func getAbsent(c int, key string, call, ret, rev int64) Op {
	return Op{Client: c, Kind: Get, Key: key, Call: call, Return: ret, Revision: rev}
}

func unknown(o Op) Op {
	o.Unknown, o.Return, o.Revision, o.Err = true, 0, 0, "context deadline exceeded"
	return o
}

func txn(c int, key, expect, value string, succeeded bool, call, ret, rev int64) Op {
	return Op{Client: c, Kind: Txn, Key: key, Expect: expect, Value: value, Succeeded: succeeded, Call: call, Return: ret, Revision: rev}
}

func withMod(o Op, mod int64) Op { o.ModRevision = mod; return o }

func TestCheckHandBuilt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ops          []Op
		linearizable bool
		resolved     int
	}{
		{"sequential put then get", []Op{put(0, "a", "1", 0, 10, 2), get(1, "a", "1", 20, 30, 2)}, true, 0},
		{"stale read", []Op{put(0, "a", "1", 0, 10, 2), put(0, "a", "2", 20, 30, 3), get(1, "a", "1", 40, 50, 3)}, false, 0},
		{"stale read, no revisions recorded", []Op{put(0, "a", "1", 0, 10, 0), put(0, "a", "2", 20, 30, 0), get(1, "a", "1", 40, 50, 0)}, false, 0},
		{"lost acknowledged write", []Op{put(0, "a", "1", 0, 10, 2), getAbsent(1, "a", 20, 30, 2)}, false, 0},
		{"read of a value never written", []Op{put(0, "a", "1", 0, 10, 2), get(1, "a", "x", 20, 30, 2)}, false, 0},
		{"concurrent read may see the old value", []Op{put(0, "a", "1", 0, 30, 2), getAbsent(1, "a", 10, 20, 1)}, true, 0},
		{"concurrent read may see the new value", []Op{put(0, "a", "1", 0, 30, 2), get(1, "a", "1", 10, 20, 2)}, true, 0},
		{"reads flip back", []Op{put(0, "a", "1", 0, 100, 0), get(1, "a", "1", 10, 20, 0), getAbsent(2, "a", 30, 40, 0)}, false, 0},
		{"unknown put that later shows up", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), getAbsent(1, "a", 20, 30, 1), get(1, "a", "1", 40, 50, 2)}, true, 1},
		{"unknown put that never shows up", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), getAbsent(1, "a", 20, 30, 1), getAbsent(1, "a", 40, 50, 1)}, true, 0},
		{"unknown put that shows up and disappears", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), get(1, "a", "1", 20, 30, 2), getAbsent(1, "a", 40, 50, 2)}, false, 1},
		{"unknown put seen before it was called", []Op{
			get(1, "a", "1", 0, 10, 2), unknown(put(0, "a", "1", 20, 0, 0))}, false, 0},
		{"failed put is dropped", []Op{
			{Kind: Put, Key: "a", Value: "1", Call: 0, Return: 10, Failed: true}, getAbsent(1, "a", 20, 30, 1)}, true, 0},
		{"failed put read later", []Op{
			{Kind: Put, Key: "a", Value: "1", Call: 0, Return: 10, Failed: true}, get(1, "a", "1", 20, 30, 2)}, false, 0},
		{"txn create succeeded", []Op{txn(0, "a", "", "1", true, 0, 10, 2), get(1, "a", "1", 20, 30, 2)}, true, 0},
		{"txn compare-and-swap", []Op{put(0, "a", "1", 0, 10, 2), txn(0, "a", "1", "2", true, 20, 30, 3), get(1, "a", "2", 40, 50, 3)}, true, 0},
		{"txn succeeded against a value that was not there", []Op{
			put(0, "a", "1", 0, 10, 2), txn(1, "a", "2", "3", true, 20, 30, 3)}, false, 0},
		{"txn create succeeded though the key existed", []Op{
			put(0, "a", "1", 0, 10, 2), txn(1, "a", "", "3", true, 20, 30, 3)}, false, 0},
		{"txn refused though the value was there", []Op{
			put(0, "a", "1", 0, 10, 2), {Client: 1, Kind: Txn, Key: "a", Expect: "1", Value: "3", Found: true, Got: "1", Call: 20, Return: 30, Revision: 2}}, false, 0},
		{"txn refused reads the current value", []Op{
			put(0, "a", "1", 0, 10, 2), {Client: 1, Kind: Txn, Key: "a", Expect: "9", Value: "3", Found: true, Got: "1", Call: 20, Return: 30, Revision: 2}}, true, 0},
		{"txn refused reads a stale value", []Op{
			put(0, "a", "1", 0, 10, 2), put(0, "a", "2", 20, 30, 3),
			{Client: 1, Kind: Txn, Key: "a", Expect: "9", Value: "3", Found: true, Got: "1", Call: 40, Return: 50, Revision: 3}}, false, 0},
		{"unknown txn resolved by a later compare", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(txn(0, "a", "1", "2", false, 20, 0, 0)), txn(1, "a", "2", "3", true, 40, 50, 4)}, true, 1},
		{"delete then absent", []Op{
			put(0, "a", "1", 0, 10, 2), {Kind: Delete, Key: "a", Found: true, Call: 20, Return: 30, Revision: 3}, getAbsent(1, "a", 40, 50, 3)}, true, 0},
		{"delete said it removed an absent key", []Op{{Kind: Delete, Key: "a", Found: true, Call: 0, Return: 10, Revision: 2}}, false, 0},
		{"unseen unknown put left out", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), put(1, "a", "2", 10, 20, 3), get(1, "a", "2", 30, 40, 3)}, true, 0},
		{"a removing delete stands for an unseen unknown put", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), {Kind: Delete, Key: "a", Found: true, Call: 10, Return: 20, Revision: 3}, getAbsent(1, "a", 30, 40, 3)}, true, 0},
		{"a removing delete needs the revision of the unseen put too", []Op{
			unknown(put(0, "a", "1", 0, 0, 0)), getAbsent(1, "a", 5, 8, 2), {Kind: Delete, Key: "a", Found: true, Call: 10, Return: 20, Revision: 3}}, false, 0},
		{"a removing delete before the unseen put was called", []Op{
			{Kind: Delete, Key: "a", Found: true, Call: 0, Return: 10, Revision: 3}, unknown(put(0, "a", "1", 20, 0, 0))}, false, 0},
		{"unseen unknown delete left out", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20}), put(1, "a", "2", 30, 40, 4), get(1, "a", "2", 50, 60, 4)}, true, 0},
		{"an unknown delete a read saw", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20}), getAbsent(1, "a", 30, 40, 3)}, true, 0},
		{"an unknown delete a create saw", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20}), txn(1, "a", "", "3", true, 30, 40, 4)}, true, 0},
		{"an unknown delete an else-branch saw", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20}), txn(1, "a", "1", "9", false, 30, 40, 3)}, true, 0},
		{"an unknown delete an unknown create needed", []Op{
			put(0, "a", "1", 0, 10, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20}), unknown(txn(1, "a", "", "3", false, 25, 0, 0)),
			get(2, "a", "3", 50, 60, 4)}, true, 1},
		{"an unknown delete does not explain an absent read before it", []Op{
			put(0, "a", "1", 0, 10, 2), getAbsent(1, "a", 15, 18, 2), unknown(Op{Kind: Delete, Key: "a", Call: 20})}, false, 0},
		{"read after delete sees the value", []Op{
			put(0, "a", "1", 0, 10, 2), {Kind: Delete, Key: "a", Call: 20, Return: 30, Revision: 3}, get(1, "a", "1", 40, 50, 3)}, false, 0},
		// Revisions:
		{"writes on one key out of revision order", []Op{
			put(0, "a", "1", 0, 30, 5), put(1, "a", "2", 10, 20, 4), get(2, "a", "2", 40, 50, 5)}, false, 0},
		{"writes on one key in revision order", []Op{
			put(0, "a", "1", 0, 30, 5), put(1, "a", "2", 10, 20, 4), get(2, "a", "1", 40, 50, 5)}, true, 0},
		{"a read's revision below the write it saw", []Op{put(0, "a", "1", 0, 10, 5), get(1, "a", "1", 20, 30, 4)}, false, 0},
		{"a read names another write's revision", []Op{put(0, "a", "1", 0, 10, 5), withMod(get(1, "a", "1", 20, 30, 7), 7)}, false, 0},
		{"a read names its write's revision", []Op{put(0, "a", "1", 0, 10, 5), withMod(get(1, "a", "1", 20, 30, 7), 5)}, true, 0},
		{"two writes with one revision", []Op{put(0, "a", "1", 0, 30, 5), put(1, "b", "1", 10, 20, 5)}, false, 0},
		{"a concurrent read saw a write but has an older revision", []Op{put(0, "a", "1", 0, 100, 5), get(1, "a", "1", 10, 20, 4)}, false, 0},
		{"a delete finds the key absent at a revision before it was removed", []Op{
			put(0, "a", "1", 0, 10, 4), {Client: 1, Kind: Delete, Key: "a", Found: true, Call: 20, Return: 100, Revision: 6},
			{Client: 2, Kind: Delete, Key: "a", Call: 20, Return: 100, Revision: 5}}, false, 0},
		{"a delete finds the key absent after it was removed", []Op{
			put(0, "a", "1", 0, 10, 4), {Client: 1, Kind: Delete, Key: "a", Found: true, Call: 20, Return: 100, Revision: 5},
			{Client: 2, Kind: Delete, Key: "a", Call: 20, Return: 100, Revision: 5}}, true, 0},
		{"revision backwards across keys", []Op{put(0, "a", "1", 0, 10, 5), put(1, "b", "1", 20, 30, 4)}, false, 0},
		{"a read across keys below an earlier write", []Op{put(0, "a", "1", 0, 10, 5), getAbsent(1, "b", 20, 30, 4)}, false, 0},
		{"concurrent writes across keys in any revision order", []Op{put(0, "a", "1", 0, 30, 5), put(1, "b", "1", 10, 20, 4)}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.ops, 10*time.Second)
			if res.Linearizable != tc.linearizable || res.TimedOut {
				t.Fatalf("linearizable = %v (timed out %v), want %v; detail:\n%s", res.Linearizable, res.TimedOut, tc.linearizable, res.Detail)
			}
			if res.Resolved != tc.resolved {
				t.Errorf("resolved %d unknown ops, want %d", res.Resolved, tc.resolved)
			}
			if strings.HasPrefix(tc.name, "unseen") || strings.Contains(tc.name, "stands for") {
				if res.Unseen != 1 {
					t.Errorf("left out %d unseen unknown writes, want 1", res.Unseen)
				}
			}
			if !tc.linearizable && res.Detail == "" {
				t.Error("a violation without detail")
			}
		})
	}
}

func TestCheckDetailAndVisualization(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.html")
	ops := []Op{put(0, "ok", "1", 0, 10, 2), put(0, "bad", "1", 20, 30, 3), put(0, "bad", "2", 40, 50, 4), get(1, "bad", "1", 60, 70, 4)}
	res := CheckTo(ops, 10*time.Second, path)
	if res.Linearizable || res.TimedOut {
		t.Fatalf("want a violation, got %+v", res)
	}
	for _, want := range []string{`key "bad"`, `client 1 get "bad" -> "1" rev 4`, `"2" mod 4`} {
		if !strings.Contains(res.Detail, want) {
			t.Errorf("detail lacks %q:\n%s", want, res.Detail)
		}
	}
	if res.Keys != 2 || res.Ops != 4 {
		t.Errorf("keys %d ops %d, want 2 and 4", res.Keys, res.Ops)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "<html") {
		t.Errorf("visualization not written: %v", err)
	}
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	ops := generate(rand.New(rand.NewPCG(3, 4)), genConfig{ops: 500, clients: 4, keys: 3, overlap: 2000, unknown: 0.05, deleteFound: true})
	ops = append(ops, Op{Kind: Put, Key: "k0", Value: "refused", Call: 1, Return: 2, Failed: true, Err: "etcdserver: mvcc: database space exceeded"})
	watches := []WatchRecord{{Watcher: 2, Prefix: "k", StartRev: 7, Events: []WatchEvent{{Key: "k1", Value: "v1", ModRevision: 8, CreateRevision: 8, Version: 1}, {Key: "k1", Delete: true, ModRevision: 9}}, Canceled: true, CompactRev: 3, ProgressRev: 9}}
	if err := Save(path, ops, watches); err != nil {
		t.Fatal(err)
	}
	gotOps, gotWatches, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotOps, ops) || !reflect.DeepEqual(gotWatches, watches) {
		t.Fatal("the history read back differs from the one saved")
	}
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("loading a missing file succeeded")
	}
}

func TestCheckTimesOut(t *testing.T) {
	ops := generate(rand.New(rand.NewPCG(1, 2)), genConfig{ops: 2000, clients: 8, keys: 4, overlap: 5000, unknown: 0.05})
	res := Check(ops, time.Nanosecond)
	if res.Linearizable || !res.TimedOut || !strings.Contains(res.Detail, "timed out") {
		t.Fatalf("want a time-out, got %+v", res)
	}
}

// Generated histories are linearizable; changing one read to a value never written, or an
// acknowledged write to one nobody reads while a later read still sees it, is not.
func TestCheckGenerated(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := genConfig{ops: 3000, clients: 8, keys: 10, overlap: int64(rng.IntN(4000)), unknown: []float64{0, 0.02, 0.1}[seed%3], deleteFound: seed%2 == 0}
		ops := generate(rng, cfg)
		res := Check(ops, time.Minute)
		if !res.Linearizable {
			t.Fatalf("seed %d: generated history not linearizable: %+v\n%s", seed, res, res.Detail)
		}
		if cfg.unknown > 0 && res.Resolved == 0 {
			t.Errorf("seed %d: no unknown op was resolved (%d unknown)", seed, res.Unknown)
		}

		// Break one answered read that found a value.
		bad := append([]Op(nil), ops...)
		i := rng.IntN(len(bad))
		for bad[i].Kind != Get || bad[i].Unknown || !bad[i].Found {
			i = (i + 1) % len(bad)
		}
		bad[i].Got = "never-written"
		if res := Check(bad, time.Minute); res.Linearizable || res.TimedOut || !strings.Contains(res.Detail, "never-written") {
			t.Fatalf("seed %d: a read of a value never written passed: %+v", seed, res)
		}
		// Lose one acknowledged put that a later read saw: that read then saw nothing written.
		lost := append([]Op(nil), ops...)
		for j := range lost {
			if lost[j].Kind != Put || lost[j].Unknown {
				continue
			}
			seen := false
			for k := range lost {
				seen = seen || lost[k].Kind == Get && !lost[k].Unknown && lost[k].Key == lost[j].Key && lost[k].Got == lost[j].Value
			}
			if seen {
				lost = append(lost[:j:j], lost[j+1:]...)
				break
			}
		}
		if len(lost) == len(ops) {
			t.Fatalf("seed %d: no put was read", seed)
		}
		if res := Check(lost, time.Minute); res.Linearizable {
			t.Fatalf("seed %d: a history missing an acknowledged write passed", seed)
		}
	}
}

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				p := r.Begin(c, Op{Kind: Put, Key: "k", Value: fmt.Sprint(c, i)})
				p.Done(Op{Revision: int64(c*100 + i + 2)}, nil)
			}
		}()
	}
	wg.Wait()
	stuck := r.Begin(9, Op{Kind: Put, Key: "k", Value: "stuck"})
	p := r.Begin(10, Op{Kind: Get, Key: "k"})
	p.Done(Op{Found: true, Got: "x", Revision: 5, Succeeded: true}, nil)
	ops := r.Ops()
	if len(ops) != 802 {
		t.Fatalf("%d ops, want 802", len(ops))
	}
	for _, o := range ops[:800] {
		if o.Unknown || o.Failed || o.Return < o.Call || o.Revision == 0 {
			t.Fatalf("bad op %+v", o)
		}
	}
	if !ops[800].Unknown || ops[800].Value != "stuck" {
		t.Errorf("an op in flight must be unknown: %+v", ops[800])
	}
	if g := ops[801]; g.Kind != Get || !g.Found || g.Got != "x" || g.Revision != 5 || g.Client != 10 {
		t.Errorf("results not recorded: %+v", g)
	}
	stuck.Done(Op{}, context.DeadlineExceeded)
	if o := r.Ops()[800]; !o.Unknown || o.Failed || o.Err == "" {
		t.Errorf("a timed-out op must be unknown: %+v", o)
	}
	r.Begin(11, Op{Kind: Put, Key: "k", Value: "full"}).Done(Op{}, rpctypes.ErrGRPCNoSpace)
	if o := r.Ops()[802]; o.Unknown || !o.Failed {
		t.Errorf("a NOSPACE put must be failed: %+v", o)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err     error
		unknown bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("failed to put: %w", context.Canceled), true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrGRPCTimeout, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrNoLeader, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{errors.New("something else"), true},
		{rpctypes.ErrNoSpace, false},
		{rpctypes.ErrGRPCNoSpace, false},
		{rpctypes.ErrTooManyRequests, false},
		{rpctypes.ErrRequestTooLarge, false},
		{rpctypes.ErrPermissionDenied, false},
		{fmt.Errorf("wrapped: %w", rpctypes.ErrGRPCInvalidAuthToken), false},
	} {
		if got := Classify(tc.err); got != tc.unknown {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.unknown)
		}
	}
}

func TestCheckWatches(t *testing.T) {
	ops := []Op{
		put(0, "p/a", "1", 0, 10, 2), put(0, "p/a", "2", 20, 30, 3), put(1, "p/b", "1", 20, 30, 4),
		{Kind: Delete, Key: "p/a", Found: true, Call: 40, Return: 50, Revision: 5},
		put(0, "p/a", "3", 60, 70, 6), put(0, "q/x", "1", 60, 70, 7),
	}
	pa1 := WatchEvent{Key: "p/a", Value: "1", ModRevision: 2, CreateRevision: 2, Version: 1}
	pa2 := WatchEvent{Key: "p/a", Value: "2", ModRevision: 3, CreateRevision: 2, Version: 2}
	pb1 := WatchEvent{Key: "p/b", Value: "1", ModRevision: 4, CreateRevision: 4, Version: 1}
	da := WatchEvent{Key: "p/a", Delete: true, ModRevision: 5}
	pa3 := WatchEvent{Key: "p/a", Value: "3", ModRevision: 6, CreateRevision: 6, Version: 1}
	good := []WatchEvent{pa1, pa2, pb1, da, pa3}
	w := func(start int64, events ...WatchEvent) []WatchRecord {
		return []WatchRecord{{Watcher: 1, Prefix: "p/", StartRev: start, Events: events}}
	}
	if err := CheckWatches(w(1, good...), ops); err != nil {
		t.Fatalf("a complete watch: %v", err)
	}
	if err := CheckWatches(w(3, pa2, pb1, da, pa3), ops); err != nil {
		t.Fatalf("a watch from revision 3 (its start event included): %v", err)
	}
	if err := CheckWatches([]WatchRecord{{Prefix: "p/", StartRev: 1, Canceled: true, CompactRev: 4}}, ops); err != nil {
		t.Fatalf("a watch canceled because its start was compacted: %v", err)
	}
	if err := CheckWatches(w(3, pb1, da), ops); err != nil {
		t.Fatalf("a watch from revision 3 that has seen up to 5: %v", err)
	}
	wrongValue := pa2
	wrongValue.Value = "1"
	wrongVersion := pa2
	wrongVersion.Version = 3
	for _, tc := range []struct {
		name   string
		watch  []WatchRecord
		substr string
	}{
		{"gap", w(1, pa1, pb1, da, pa3), "missed an acknowledged write"},
		{"gap promised by a progress notification", []WatchRecord{{Prefix: "p/", StartRev: 1, Events: []WatchEvent{pa1}, ProgressRev: 4}}, "missed"},
		{"duplicate", w(1, pa1, pa2, pa2, pb1), "twice"},
		{"backwards", w(1, pa1, pb1, pa2), "backwards"},
		{"below the start", w(3, pa1, pa2), "below the start"},
		{"outside the prefix", w(1, pa1, WatchEvent{Key: "q/x", Value: "1", ModRevision: 7, CreateRevision: 7, Version: 1}), "outside the prefix"},
		{"wrong value", w(1, pa1, wrongValue), "does not match"},
		{"never written", w(1, pa1, WatchEvent{Key: "p/a", Value: "9", ModRevision: 3, CreateRevision: 2, Version: 2}), "no op wrote"},
		{"version skipped", w(1, pa1, wrongVersion), "skipped"},
		{"impossible version", w(1, WatchEvent{Key: "p/a", Value: "1", ModRevision: 2, CreateRevision: 2, Version: 2}), "impossible"},
		{"put after delete not new", w(1, pa1, pa2, pb1, da, WatchEvent{Key: "p/a", Value: "3", ModRevision: 6, CreateRevision: 2, Version: 3}), "follows a delete"},
		{"canceled though not compacted", []WatchRecord{{Prefix: "p/", StartRev: 3, Canceled: true, CompactRev: 3}}, "compacted"},
		{"delete for a put", w(1, pa1, WatchEvent{Key: "p/a", Delete: true, ModRevision: 3}), "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckWatches(tc.watch, ops)
			if err == nil || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.substr)
			}
		})
	}
}

// BenchmarkCheck50k checks a generated history of 50,000 ops (8 clients, 20 keys); the
// variants add ops of unknown outcome.
func BenchmarkCheck50k(b *testing.B) {
	for _, unk := range []float64{0, 0.01, 0.05} {
		b.Run(fmt.Sprintf("unknown=%g", unk), func(b *testing.B) {
			ops := generate(rand.New(rand.NewPCG(42, 1)), genConfig{ops: 50000, clients: 8, keys: 20, overlap: 3000, unknown: unk, deleteFound: true})
			b.ResetTimer()
			for b.Loop() {
				if res := Check(ops, 5*time.Minute); !res.Linearizable {
					b.Fatalf("not linearizable: %+v", res)
				}
			}
		})
	}
}

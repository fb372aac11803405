package history

import (
	"fmt"
	"strings"
)

// WatchEvent is one event a watcher received.
type WatchEvent struct {
	Key, Value string
	Delete     bool
	// ModRevision is the event's revision; CreateRevision and Version are the key's, as etcd
	// reports them (0 for a delete).
	ModRevision, CreateRevision int64
	Version                     int64
}

// WatchRecord is what one watch on a prefix received, in arrival order.
type WatchRecord struct {
	Watcher int
	Prefix  string
	// StartRev: the watch must deliver every event with a revision above StartRev. An event at
	// StartRev itself is allowed (a watch opened WithRev(StartRev) delivers it) but not
	// required; an event below it is a violation.
	StartRev int64
	Events   []WatchEvent
	// Canceled: the watch ended by etcd canceling it; CompactRev is the compaction revision
	// when it was canceled because its start was compacted (a compaction at or below StartRev
	// does not cancel it: that is a violation).
	Canceled   bool
	CompactRev int64
	// ProgressRev (optional): a revision a progress notification reported, which promises
	// that every event up to it has been delivered.
	ProgressRev int64
}

// CheckWatches checks what watchers received against ops (which must hold every write under
// the watched prefixes): within a watch revisions never go backwards (the events of one txn
// share a revision), no event comes twice or from below StartRev or outside the prefix, every
// event's value was written by some op that did not fail, a key's Version and CreateRevision
// follow its puts and deletes, and there are no gaps: every acknowledged Put, Txn that
// succeeded and Delete that removed its key (Op.Found), under the prefix, whose revision is in
// (StartRev, last revision the watch saw or was promised], appears at that revision with the
// value written. It returns nil or an error naming the first violation.
func CheckWatches(watches []WatchRecord, ops []Op) error {
	written := map[kv]bool{}
	for i := range ops {
		o := &ops[i]
		if !o.Failed && (o.Kind == Put || o.Kind == Txn) {
			written[kv{o.Key, o.Value}] = true
		}
	}
	for _, w := range watches {
		if err := checkWatch(w, ops, written); err != nil {
			return fmt.Errorf("watch %d on %q from revision %d (%d events): %w", w.Watcher, w.Prefix, w.StartRev, len(w.Events), err)
		}
	}
	return nil
}

// kv is a key and a value.
type kv struct{ key, value string }

func checkWatch(w WatchRecord, ops []Op, written map[kv]bool) error {
	type at struct {
		key string
		rev int64
	}
	type keyVersion struct {
		deleted         bool
		create, version int64
	}
	if w.Canceled && w.CompactRev > 0 && w.CompactRev <= w.StartRev {
		return fmt.Errorf("canceled as compacted at revision %d, which is not above its start", w.CompactRev)
	}
	got := map[at]int{}
	last := map[string]keyVersion{}
	seen := w.ProgressRev
	for i, e := range w.Events {
		if !strings.HasPrefix(e.Key, w.Prefix) {
			return fmt.Errorf("event %d: key %q is outside the prefix", i, e.Key)
		}
		if e.ModRevision <= 0 || e.ModRevision < w.StartRev {
			return fmt.Errorf("event %d: %s is at revision %d, below the start", i, describeEvent(e), e.ModRevision)
		}
		if i > 0 && e.ModRevision < w.Events[i-1].ModRevision {
			return fmt.Errorf("event %d: revision went backwards: %s after %s", i, describeEvent(e), describeEvent(w.Events[i-1]))
		}
		if j, dup := got[at{e.Key, e.ModRevision}]; dup {
			return fmt.Errorf("event %d: %s was delivered twice (also event %d)", i, describeEvent(e), j)
		}
		got[at{e.Key, e.ModRevision}] = i
		if !e.Delete && !written[kv{e.Key, e.Value}] {
			return fmt.Errorf("event %d: %s: no op wrote this value", i, describeEvent(e))
		}
		// Version and CreateRevision: a put after a delete (or a first put at the key's
		// creation) starts at version 1 with CreateRevision = ModRevision; a put after a put
		// keeps CreateRevision and adds one to Version. A watch sees every event of a key after
		// its first, so a step that does not fit means an event was skipped or invented.
		if !e.Delete {
			if e.Version < 1 || e.CreateRevision < 1 || e.CreateRevision > e.ModRevision || (e.Version == 1) != (e.CreateRevision == e.ModRevision) {
				return fmt.Errorf("event %d: %s has an impossible version %d / create revision %d", i, describeEvent(e), e.Version, e.CreateRevision)
			}
			if p, ok := last[e.Key]; ok {
				switch {
				case p.deleted && e.Version != 1:
					return fmt.Errorf("event %d: %s follows a delete but has version %d", i, describeEvent(e), e.Version)
				case !p.deleted && (e.CreateRevision != p.create || e.Version != p.version+1):
					return fmt.Errorf("event %d: %s has version %d created at %d, after version %d created at %d: an event was skipped",
						i, describeEvent(e), e.Version, e.CreateRevision, p.version, p.create)
				}
			}
			last[e.Key] = keyVersion{create: e.CreateRevision, version: e.Version}
		} else {
			if p, ok := last[e.Key]; ok && p.deleted {
				return fmt.Errorf("event %d: %s follows another delete of the key", i, describeEvent(e))
			}
			last[e.Key] = keyVersion{deleted: true}
		}
		seen = max(seen, e.ModRevision)
	}
	for i := range ops {
		o := &ops[i]
		if o.Unknown || o.Failed || !o.isWrite() || o.Revision <= w.StartRev || o.Revision > seen || !strings.HasPrefix(o.Key, w.Prefix) {
			continue
		}
		j, ok := got[at{o.Key, o.Revision}]
		if !ok {
			return fmt.Errorf("missed an acknowledged write (the watch saw up to revision %d): %s", seen, describeOp(o))
		}
		e := w.Events[j]
		if o.Kind == Delete != e.Delete || !e.Delete && e.Value != o.Value {
			return fmt.Errorf("event %d: %s does not match the acknowledged write at its revision: %s", j, describeEvent(e), describeOp(o))
		}
	}
	return nil
}

func describeEvent(e WatchEvent) string {
	if e.Delete {
		return fmt.Sprintf("delete %q at %d", e.Key, e.ModRevision)
	}
	return fmt.Sprintf("put %q=%q at %d (version %d, created %d)", e.Key, e.Value, e.ModRevision, e.Version, e.CreateRevision)
}

package history

import (
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is what Check found.
type Result struct {
	// Linearizable is true only when every key's history was proven linearizable and the
	// revisions are consistent.
	Linearizable bool
	// TimedOut: the checker ran out of time before it could decide (no violation was found in
	// what it did decide): neither proven nor refuted.
	TimedOut bool
	// Ops is how many ops were checked (Failed ops and unknown Gets are dropped); Keys how
	// many keys they touch.
	Ops, Keys int
	// Unknown is how many ops (not Gets) had an unknown outcome. Resolved is how many of those
	// were seen to take effect (an answered op read their unique value) and were checked as
	// answered; Unseen how many wrote a unique value nothing ever read or compared against, or
	// deleted a key nothing saw absent after, and were left out (taking effect or not makes no
	// difference any op could see). The rest may take effect at any time after their call, or
	// never.
	Unknown, Resolved, Unseen int
	// Detail describes a violation (the key and the ops around it) or the time-out, human
	// readable.
	Detail string
	// VisualizationFile: when set by the caller, porcupine's HTML visualization of the first
	// key found not linearizable is written there (nothing is written otherwise).
	VisualizationFile string
}

// Check checks ops for linearizability with porcupine within timeout, partitioned per key: each
// key is checked against a model whose state is the key's value and the revisions seen on it
// (a write gets a revision above every revision seen before it on the key, a read's revision
// is at least that of the last write it could follow). Across keys, acknowledged writes must
// have distinct revisions, and an op called after another returned must not see a smaller
// revision (a write: not smaller or equal). Ops must come from one clock (a Recorder's).
//
// Failed ops and unknown Gets are dropped. An unknown write whose value (unique among the
// key's writes) some answered op read is known to have taken effect before that op returned:
// it is checked as answered, with the revision the read reported. An unknown write of a unique
// value that no op read or compared against is left out: had it taken effect, the next op on
// the key after it would be a write (anything else would have seen its value), so the history
// is linearizable with it iff without it. Only a Delete that says it removed the key
// (Op.Found) could need it, so such a delete that returned after the write was called may
// remove an absent key (standing for the write and itself). An unknown Delete is left out
// likewise when no op that could follow it saw the key absent (a Get or a Txn's else-branch
// finding nothing, a Txn creating the key). Every other unknown op may take effect at any
// time after its call, or never (its return is the end of time); many of those make
// porcupine's search slow, most of all on a history that is not linearizable. Unknown
// Deletes are most of those left (nothing tells which delete made a key absent). Measured on
// 50,000 generated ops on 20 keys with one read broken: found in 0.1 s with no unknown
// outcomes, 0.4 to 8 s with 5 % unknown, often not within 30 s with 10 %; a linearizable
// history takes 0.1 to 0.6 s either way.
//
// Check returns within timeout, plus up to minDetailTime to describe a violation it found.
// A check that ran out of time is TimedOut, neither proven nor refuted.
func Check(ops []Op, timeout time.Duration) Result {
	return CheckTo(ops, timeout, "")
}

// CheckTo is Check that also writes porcupine's visualization of a violation to
// visualizationFile when it is not "".
func CheckTo(ops []Op, timeout time.Duration, visualizationFile string) Result {
	deadline := time.Now().Add(timeout)
	checked, res := prepare(ops)
	if visualizationFile != "" {
		res.VisualizationFile = visualizationFile
	}
	if detail := checkRevisions(checked); detail != "" {
		res.Detail = detail
		return res
	}

	byKey := map[string][]porcupine.Operation{}
	for i := range checked {
		o := &checked[i]
		ret := o.Return
		if o.Unknown {
			ret = math.MaxInt64
		}
		byKey[o.Key] = append(byKey[o.Key], porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Call, Output: o, Return: ret})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	res.Keys = len(keys)

	// One porcupine run per key, a worker per core; the first illegal key (in name order among
	// those found) is described.
	outcome := make([]porcupine.CheckResult, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	illegal := false
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				mu.Lock()
				stop := illegal
				mu.Unlock()
				left := time.Until(deadline)
				if stop || left <= 0 {
					outcome[i] = porcupine.Unknown
					continue
				}
				outcome[i] = porcupine.CheckOperationsTimeout(keyModel, byKey[keys[i]], left)
				if outcome[i] == porcupine.Illegal {
					mu.Lock()
					illegal = true
					mu.Unlock()
				}
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()

	undecided := 0
	for i, out := range outcome {
		switch out {
		case porcupine.Illegal:
			res.Detail = describeViolation(keys[i], byKey[keys[i]], res.VisualizationFile, max(time.Until(deadline), minDetailTime))
			return res
		case porcupine.Unknown:
			undecided++
		}
	}
	if undecided > 0 {
		res.TimedOut = true
		res.Detail = fmt.Sprintf("timed out after %s: %d of %d keys not decided", timeout, undecided, len(keys))
		return res
	}
	res.Linearizable = true
	return res
}

// prepare drops what cannot be checked and resolves unknown writes that were seen to take
// effect. The ops returned are copies.
func prepare(ops []Op) ([]Op, Result) {
	var res Result
	// Which answered ops saw which value of a key, and how many writes wrote each value.
	writers := map[kv]int{}
	type seen struct {
		ret    int64
		modRev int64
	}
	observed := map[kv]seen{}
	expected := map[kv]bool{} // values some txn compared against, answered or not
	// Per key, the last return of an answered op that saw the key absent, and whether an
	// unknown txn compares against its absence.
	absentSeen := map[string]int64{}
	absentExpected := map[string]bool{}
	for i := range ops {
		o := &ops[i]
		if o.Failed {
			continue
		}
		if o.Kind == Put || o.Kind == Txn {
			writers[kv{o.Key, o.Value}]++
		}
		if o.Kind == Txn && o.Expect != "" {
			expected[kv{o.Key, o.Expect}] = true
		}
		if o.Unknown {
			if o.Kind == Txn && o.Expect == "" {
				absentExpected[o.Key] = true
			}
			continue
		}
		if (o.Kind == Get || o.Kind == Txn && !o.Succeeded) && !o.Found || o.Kind == Txn && o.Succeeded && o.Expect == "" {
			absentSeen[o.Key] = max(absentSeen[o.Key], o.Return)
		}
		var v string
		var modRev int64
		switch {
		case (o.Kind == Get || o.Kind == Txn && !o.Succeeded) && o.Found:
			v, modRev = o.Got, o.ModRevision
		case o.Kind == Txn && o.Succeeded && o.Expect != "":
			v = o.Expect // the compare held: the key had this value
		default:
			continue
		}
		s, ok := observed[kv{o.Key, v}]
		if !ok || o.Return < s.ret {
			s.ret = o.Return
		}
		if modRev != 0 {
			s.modRev = modRev
		}
		observed[kv{o.Key, v}] = s
	}

	unseenCall := map[string]int64{} // per key, the first call of an unseen write left out
	out := make([]Op, 0, len(ops))
	for _, o := range ops {
		if o.Failed || o.Unknown && o.Kind == Get {
			continue
		}
		if o.Unknown {
			res.Unknown++
			// An unknown Delete after which no op saw the key absent: had it taken effect, the
			// next op on the key was a write (or a delete that finds nothing), so it is left out
			// like an unseen write (see Check).
			if o.Kind == Delete && !absentExpected[o.Key] && absentSeen[o.Key] < o.Call {
				res.Unseen++
				continue
			}
			if o.Kind == Put || o.Kind == Txn {
				s, ok := observed[kv{o.Key, o.Value}]
				// Only a unique value tells which write was seen; a read that returned before the
				// call is a violation the model will find, so the op is left unknown then.
				if ok && writers[kv{o.Key, o.Value}] == 1 && s.ret > o.Call {
					o.Unknown = false
					o.Return = s.ret
					o.Revision = s.modRev
					o.Succeeded = true
					o.Found, o.Got, o.ModRevision = false, "", 0
					res.Resolved++
				}
				// A unique value nobody saw or compared against: had the write taken effect, the
				// next op on the key was a write, so leaving it out explains the history as well
				// as any placement (see Check; a removing Delete is the exception, see step).
				if !ok && writers[kv{o.Key, o.Value}] == 1 && !expected[kv{o.Key, o.Value}] {
					res.Unseen++
					if c, had := unseenCall[o.Key]; !had || o.Call < c {
						unseenCall[o.Key] = o.Call
					}
					continue
				}
			}
		}
		out = append(out, o)
	}
	// A removing Delete could be the write that followed an unseen write left out: on an
	// absent key it then stands for both (see step).
	for i := range out {
		if o := &out[i]; o.Kind == Delete && o.Found && !o.Unknown {
			if c, had := unseenCall[o.Key]; had && c <= o.Return {
				o.afterUnseen = true
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	res.Ops = len(out)
	return out, res
}

// checkRevisions checks the revisions across keys: acknowledged writes have distinct revisions,
// a read's ModRevision is not above its revision, and an op called after another returned does
// not see a smaller revision (a write not even an equal one). It returns "" or the violation.
// ops are sorted by Call.
func checkRevisions(ops []Op) string {
	var known []*Op
	byRev := map[int64]*Op{}
	for i := range ops {
		o := &ops[i]
		if o.Unknown || o.Revision == 0 {
			continue
		}
		if o.Found && !o.isWrite() && o.ModRevision > o.Revision {
			return fmt.Sprintf("%s read a ModRevision above its own revision", describe(o, ops[0].Call))
		}
		if o.isWrite() {
			if p, dup := byRev[o.Revision]; dup {
				return fmt.Sprintf("two acknowledged writes got revision %d:\n  %s\n  %s", o.Revision, describe(p, ops[0].Call), describe(o, ops[0].Call))
			}
			byRev[o.Revision] = o
		}
		known = append(known, o)
	}
	byReturn := append([]*Op(nil), known...)
	sort.SliceStable(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	var maxRev *Op // the op with the highest revision among those returned so far
	j := 0
	for _, o := range known { // in call order
		for j < len(byReturn) && byReturn[j].Return < o.Call {
			if maxRev == nil || byReturn[j].Revision > maxRev.Revision {
				maxRev = byReturn[j]
			}
			j++
		}
		if maxRev == nil {
			continue
		}
		if o.Revision < maxRev.Revision || o.isWrite() && o.Revision == maxRev.Revision {
			return fmt.Sprintf("revision went backwards in real time: an op called after another returned saw an older revision:\n  first:  %s\n  then:   %s",
				describe(maxRev, ops[0].Call), describe(o, ops[0].Call))
		}
	}
	return ""
}

// keyState is the model's state of one key.
type keyState struct {
	exists bool
	value  string
	// modRev is the revision of the write that made the current value (0: unknown).
	modRev int64
	// rev is a lower bound of the cluster's revision at this point of the key's linearization:
	// the highest revision an op on the key saw, or one above the last write of unknown revision.
	rev int64
}

// keyModel is the per-key model of etcd. Unknown ops always step (porcupine may place them
// after everything else, which is the same as never).
var keyModel = porcupine.Model{
	Init: func() any { return keyState{} },
	Step: func(state, input, _ any) (bool, any) {
		return step(state.(keyState), input.(*Op))
	},
	Hash: func(state any) uint64 {
		s := state.(keyState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t %d %d %s", s.exists, s.modRev, s.rev, s.value)
		return h.Sum64()
	},
	DescribeOperation: func(input, _ any) string { return describeOp(input.(*Op)) },
	DescribeState: func(state any) string {
		s := state.(keyState)
		if !s.exists {
			return fmt.Sprintf("absent (rev>=%d)", s.rev)
		}
		return fmt.Sprintf("%q mod %d (rev>=%d)", s.value, s.modRev, s.rev)
	},
}

// step applies o to s.
func step(s keyState, o *Op) (bool, keyState) {
	write := func(rev int64) (bool, keyState) {
		if rev != 0 && rev <= s.rev {
			return false, s
		}
		n := keyState{exists: true, value: o.Value, modRev: rev, rev: rev}
		if rev == 0 {
			n.rev = s.rev + 1
		}
		return true, n
	}
	read := func() (bool, keyState) {
		if o.Found != s.exists || s.exists && o.Got != s.value {
			return false, s
		}
		if o.Revision != 0 && o.Revision < s.rev {
			return false, s
		}
		if s.exists && o.ModRevision != 0 && s.modRev != 0 && o.ModRevision != s.modRev {
			return false, s
		}
		n := s
		n.rev = max(s.rev, o.Revision)
		if s.exists && s.modRev == 0 && o.ModRevision != 0 {
			n.modRev = o.ModRevision
			n.rev = max(n.rev, o.ModRevision)
		}
		return true, n
	}
	switch o.Kind {
	case Get:
		return read()
	case Put:
		if o.Unknown {
			return write(0)
		}
		return write(o.Revision)
	case Txn:
		holds := !s.exists
		if o.Expect != "" {
			holds = s.exists && s.value == o.Expect
		}
		if o.Unknown {
			if holds {
				return write(0)
			}
			return true, s
		}
		if o.Succeeded != holds {
			return false, s
		}
		if holds {
			return write(o.Revision)
		}
		return read()
	case Delete:
		if o.Unknown {
			if !s.exists {
				return true, s
			}
			return true, keyState{rev: s.rev + 1}
		}
		if !s.exists && o.Found {
			// It removed a key that is absent here: only an unseen write left out, taking effect
			// just before it, explains that (that write's revision comes between).
			if !o.afterUnseen || o.Revision != 0 && o.Revision <= s.rev+1 {
				return false, s
			}
			if o.Revision == 0 {
				return true, keyState{rev: s.rev + 2}
			}
			return true, keyState{rev: o.Revision}
		}
		if !s.exists {
			if o.Revision != 0 && o.Revision < s.rev {
				return false, s
			}
			return true, keyState{rev: max(s.rev, o.Revision)}
		}
		if o.Revision == 0 {
			return true, keyState{rev: s.rev + 1}
		}
		if o.Revision <= s.rev {
			return false, s
		}
		return true, keyState{rev: o.Revision}
	}
	return false, s
}

// describeOp says what an op asked and was answered, without times.
func describeOp(o *Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "client %d %s %q", o.Client, o.Kind, o.Key)
	switch o.Kind {
	case Put:
		fmt.Fprintf(&b, "=%q", o.Value)
	case Txn:
		if o.Expect == "" {
			fmt.Fprintf(&b, " if absent then put %q", o.Value)
		} else {
			fmt.Fprintf(&b, " if ==%q then put %q", o.Expect, o.Value)
		}
	}
	if o.Unknown {
		b.WriteString(" -> unknown")
		if o.Err != "" {
			fmt.Fprintf(&b, " (%s)", o.Err)
		}
		return b.String()
	}
	var out []string
	switch {
	case o.Kind == Txn && o.Succeeded:
		out = append(out, "succeeded")
	case o.Kind == Txn:
		out = append(out, "else")
	}
	if o.Kind == Get || o.Kind == Txn && !o.Succeeded {
		switch {
		case !o.Found:
			out = append(out, "absent")
		case o.ModRevision != 0:
			out = append(out, fmt.Sprintf("%q mod %d", o.Got, o.ModRevision))
		default:
			out = append(out, fmt.Sprintf("%q", o.Got))
		}
	}
	if o.Kind == Delete && o.Found {
		out = append(out, "deleted")
	}
	if o.Revision != 0 {
		out = append(out, fmt.Sprintf("rev %d", o.Revision))
	}
	if len(out) == 0 {
		out = append(out, "ok")
	}
	b.WriteString(" -> ")
	b.WriteString(strings.Join(out, " "))
	return b.String()
}

// describe is describeOp with the op's times in milliseconds from t0.
func describe(o *Op, t0 int64) string {
	ret := "never"
	if !o.Unknown {
		ret = fmt.Sprintf("%.3fms", float64(o.Return-t0)/1e6)
	}
	return fmt.Sprintf("[%.3fms .. %s] %s", float64(o.Call-t0)/1e6, ret, describeOp(o))
}

// minDetailTime is the least time the detailed rerun of a key found not linearizable gets,
// even when Check's own time is up.
const minDetailTime = 10 * time.Second

// describeViolation runs porcupine verbosely on one key's ops and says where the longest
// linearization it found ends and which ops could not be placed after it.
func describeViolation(key string, ops []porcupine.Operation, visualizationFile string, timeout time.Duration) string {
	const context = 6
	result, info := porcupine.CheckOperationsVerbose(keyModel, ops, timeout)
	var b strings.Builder
	fmt.Fprintf(&b, "key %q is not linearizable (%d ops)", key, len(ops))
	if visualizationFile != "" {
		if err := porcupine.VisualizePath(keyModel, info, visualizationFile); err != nil {
			fmt.Fprintf(&b, " (visualization not written: %v)", err)
		} else {
			fmt.Fprintf(&b, " (visualization: %s)", visualizationFile)
		}
	}
	b.WriteString("\n")
	if result != porcupine.Illegal {
		fmt.Fprintf(&b, "  (the detailed rerun returned %s)\n", result)
		return b.String()
	}
	t0 := ops[0].Call
	var longest []int
	for _, l := range info.PartialLinearizations()[0] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	placed := make([]bool, len(ops))
	state := keyState{}
	for _, id := range longest {
		placed[id] = true
		_, state = step(state, ops[id].Input.(*Op))
	}
	fmt.Fprintf(&b, "  the longest linearization found places %d ops; its last ones:\n", len(longest))
	for _, id := range longest[max(0, len(longest)-context):] {
		fmt.Fprintf(&b, "    %s\n", describe(ops[id].Input.(*Op), t0))
	}
	fmt.Fprintf(&b, "  state then: %s\n", keyModel.DescribeState(state))
	// The ops that could come next: those not placed that were called before the first of
	// them returned.
	var rest []int
	firstReturn := int64(math.MaxInt64)
	for i := range ops {
		if !placed[i] {
			rest = append(rest, i)
			firstReturn = min(firstReturn, ops[i].Return)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return ops[rest[i]].Call < ops[rest[j]].Call })
	b.WriteString("  none of these can come next:\n")
	n := 0
	for _, id := range rest {
		if ops[id].Call > firstReturn || n == context {
			break
		}
		fmt.Fprintf(&b, "    %s\n", describe(ops[id].Input.(*Op), t0))
		n++
	}
	return b.String()
}

// Package history records what clients of etcd asked and were answered, and checks those
// histories: Check tests the key-value operations for linearizability with porcupine (one
// model per key, plus a check of the revisions across keys), and CheckWatches tests what
// watchers received against the writes etcd acknowledged.
//
// The chaos soak runs clients against a cluster while the operator and the faults change it;
// the evidence that no acknowledged write was lost, no read was stale and no watch skipped an
// event comes from these histories, never from the operator's status.
//
// The model is etcd's as its robustness tests use it (tests/robustness/model in etcd), cut
// down to what the soak does: Put, Get, Delete and a Txn on one key (compare the value, then
// put, else get). A request whose answer never came, or whose error does not prove it was
// refused, is Unknown: it may have taken effect at any time after its call, or never. Such an
// operation's return time is taken as the end of time, so the checker may place it anywhere
// after its call, including after every other operation (which is the same as not at all).
//
// The package is pure Go: it imports no Kubernetes code and no etcd client, only etcd's and
// gRPC's error types (to classify errors).
package history

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is what an operation does.
type Kind int

const (
	// Put writes Value to Key.
	Put Kind = iota
	// Get reads Key (linearizably: a serializable read is not checked by this model).
	Get
	// Txn is `if value(Key) == Expect then put Key=Value else get Key`; Expect "" means
	// "Key is absent" (etcd: CreateRevision(Key) == 0).
	Txn
	// Delete removes Key.
	Delete
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Put:
		return "put"
	case Get:
		return "get"
	case Txn:
		return "txn"
	case Delete:
		return "delete"
	}
	return "kind?"
}

// Op is one client request as the client saw it.
type Op struct {
	// Client is one id per client goroutine; a client has at most one op in flight.
	Client int
	Kind   Kind
	Key    string
	// Value is the value written by a Put or by a Txn's then-branch. The checker works best
	// when every written value is unique per key (it can then tell which write a read saw, and
	// which unknown write took effect).
	Value string
	// Expect is the Txn's compare: value(Key) == Expect; "" means the key is absent.
	Expect string
	// Call and Return are nanosecond timestamps from one clock taken before the call and
	// after the answer (the Recorder uses a monotonic clock expressed as UnixNano).
	Call, Return int64
	// Unknown: no answer, or an error that does not prove failure (timeout, unavailable,
	// connection lost): the op may or may not have taken effect. Return and the results are
	// ignored.
	Unknown bool
	// Failed: an error proving the op did not take effect (see Classify). Such ops are dropped.
	// A Txn whose compare did not hold is not Failed: it is answered with Succeeded false.
	Failed bool
	// Err is the error's text, if any, for reports.
	Err string

	// Results, when answered:

	// Found: Get: the key exists; Txn else-branch: the key exists. Delete: the delete removed
	// the key (resp.Deleted > 0); false is not checked for a Delete (it may be left unset).
	Found bool
	// Got is the value a Get or a Txn's else-branch read.
	Got string
	// Succeeded: Txn: the compare held and the put was applied.
	Succeeded bool
	// Revision is the response header's revision (0: not recorded, not checked). For a write
	// that changed the store it is the write's own revision.
	Revision int64
	// ModRevision: Get / Txn else-branch, when Found: the read key's ModRevision (0: not
	// recorded, not checked). It ties a read to the write it saw.
	ModRevision int64

	// afterUnseen (set by Check): a removing Delete that may follow an unknown write Check
	// left out.
	afterUnseen bool
}

// isWrite reports whether an answered op changed the store in the answer's own words (a Put,
// a Txn whose compare held, a Delete that says it removed the key).
func (o *Op) isWrite() bool {
	switch o.Kind {
	case Put:
		return true
	case Txn:
		return o.Succeeded
	case Delete:
		return o.Found
	}
	return false
}

// mayWrite reports whether the op could change the store at all.
func (o *Op) mayWrite() bool { return o.Kind != Get }

// Recorder collects ops from many goroutines; it is safe for concurrent use. Its timestamps
// come from one monotonic clock (a wall-clock step during a soak does not reorder them).
type Recorder struct {
	start time.Time

	mu  sync.Mutex
	ops []Op
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now()}
}

// now is the recorder's monotonic clock as UnixNano.
func (r *Recorder) now() int64 {
	return r.start.UnixNano() + int64(time.Since(r.start))
}

// Pending is an op that was called and has not been answered yet.
type Pending struct {
	r *Recorder
	i int
}

// Begin records that client calls op (Kind, Key, Value and Expect are taken from op) and
// stamps its Call. Until Done is called the op counts as Unknown: a client stopped in the
// middle of a request leaves an op that may or may not have taken effect.
func (r *Recorder) Begin(client int, op Op) *Pending {
	op = Op{Client: client, Kind: op.Kind, Key: op.Key, Value: op.Value, Expect: op.Expect, Unknown: true}
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Call = r.now()
	r.ops = append(r.ops, op)
	return &Pending{r: r, i: len(r.ops) - 1}
}

// Done records the answer: result's Found, Got, Succeeded, Revision and ModRevision when err
// is nil; otherwise the op is Unknown or Failed as Classify(err) says. It stamps Return. Call
// it once per Pending.
func (p *Pending) Done(result Op, err error) {
	ret := p.r.now()
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	op := &p.r.ops[p.i]
	op.Return = ret
	op.Unknown = false
	if err != nil {
		op.Err = err.Error()
		if Classify(err) {
			op.Unknown = true
		} else {
			op.Failed = true
		}
		return
	}
	op.Found, op.Got, op.Succeeded = result.Found, result.Got, result.Succeeded
	op.Revision, op.ModRevision = result.Revision, result.ModRevision
}

// Ops returns a copy of the ops recorded so far, in call order; ops still in flight are Unknown.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Classify reports whether err leaves the op's outcome unknown. Only errors that etcd returns
// before the request is proposed to raft, or that its apply returns without changing the store,
// prove the op did not take effect: invalid arguments, failed preconditions, compacted or
// future revisions, missing leases, authentication and permission errors, no space and too
// many requests. Everything else (timeouts, cancellation, unavailable, leader changes,
// connection loss, unrecognised errors) is unknown: calling a failed op unknown only weakens
// the check, calling an applied op failed would report a violation that is not there.
// Classify(nil) is false.
func Classify(err error) (unknown bool) {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var coder interface{ Code() codes.Code } // etcd's rpctypes.EtcdError
	code := codes.Unknown
	if errors.As(err, &coder) {
		code = coder.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.NotFound,
		codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated,
		codes.ResourceExhausted, codes.Unimplemented:
		return false
	}
	return true
}

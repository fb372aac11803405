package history

import (
	"fmt"
	"math/rand/v2"
)

// genConfig shapes a generated history.
type genConfig struct {
	ops, clients, keys int
	// overlap bounds how long after its linearization point an op returns (and how long
	// before it the op was called), in ns: larger means more concurrency.
	overlap int64
	// unknown is the fraction of ops whose answer is lost; half of those take effect.
	unknown float64
	// deleteFound: deletes record whether they removed the key (Op.Found).
	deleteFound bool
}

// generate makes a linearizable history by simulating etcd: ops take effect one at a time at
// increasing points in time, each inside its own [Call, Return], with the results and
// revisions etcd would give. Written values are unique.
func generate(rng *rand.Rand, cfg genConfig) []Op {
	type entry struct {
		value  string
		modRev int64
	}
	store := map[string]entry{}
	rev := int64(1)                    // a new etcd is at revision 1
	free := make([]int64, cfg.clients) // when each client's last op returned
	var t int64
	ops := make([]Op, 0, cfg.ops)
	for i := range cfg.ops {
		t += 1 + rng.Int64N(1000)
		c := rng.IntN(cfg.clients)
		if free[c] >= t {
			t = free[c] + 1
		}
		key := fmt.Sprintf("k%d", rng.IntN(cfg.keys))
		o := Op{Client: c, Key: key, Call: free[c] + 1 + rng.Int64N(min(t-free[c], cfg.overlap+1)), Return: t + rng.Int64N(cfg.overlap+1)}
		free[c] = o.Return
		if cfg.unknown > 0 && rng.Float64() < cfg.unknown {
			o.Unknown = true
			o.Err = "context deadline exceeded"
		}
		applied := !o.Unknown || rng.IntN(2) == 0
		cur, exists := store[key]
		read := func() {
			o.Found = exists
			if exists {
				o.Got, o.ModRevision = cur.value, cur.modRev
			}
			o.Revision = rev
		}
		switch p := rng.IntN(100); {
		case p < 30:
			o.Kind, o.Value = Put, fmt.Sprintf("v%d", i)
			if applied {
				rev++
				store[key] = entry{o.Value, rev}
				o.Revision = rev
			}
		case p < 65:
			o.Kind = Get
			read()
		case p < 90:
			o.Kind, o.Value = Txn, fmt.Sprintf("v%d", i)
			switch q := rng.IntN(4); {
			case q < 2 && exists:
				o.Expect = cur.value
			case q == 2:
				o.Expect = fmt.Sprintf("v%d", rng.IntN(i+1)) // most likely not the current value
			}
			holds := !exists
			if o.Expect != "" {
				holds = exists && cur.value == o.Expect
			}
			o.Succeeded = holds
			switch {
			case holds && applied:
				rev++
				store[key] = entry{o.Value, rev}
				o.Revision = rev
			case !holds:
				read()
			}
		default:
			o.Kind = Delete
			o.Found = exists && cfg.deleteFound
			if exists && applied {
				rev++
				delete(store, key)
			}
			o.Revision = rev
		}
		if o.Unknown {
			o.Found, o.Got, o.Succeeded, o.Revision, o.ModRevision = false, "", false, 0, 0
		}
		ops = append(ops, o)
	}
	return ops
}

package observe

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestCompactionsForgetDefragmentationsAtANewerCompaction: the members defragmented since the
// last compaction are what the maintenance planner reads under a NOSPACE alarm; a newer
// compaction starts the record afresh, the same revision again (a repeated step) does not.
func TestCompactionsForgetDefragmentationsAtANewerCompaction(t *testing.T) {
	var c Compactions
	a, b := types.UID("a"), types.UID("b")
	if got := c.DefragmentedSince(a); len(got) != 0 || c.Get(a) != 0 {
		t.Fatalf("empty record: %v, revision %d", got, c.Get(a))
	}
	c.Set(a, 10)
	c.Defragmented(a, 1)
	c.Defragmented(a, 2)
	c.Defragmented(b, 3)
	c.Set(a, 10)
	if got := c.DefragmentedSince(a); !maps.Equal(got, map[uint64]bool{1: true, 2: true}) {
		t.Fatalf("after the same compaction again: %v", got)
	}
	got := c.DefragmentedSince(a)
	got[9] = true // a copy: the caller cannot change the record
	c.Set(a, 9)
	if c.Get(a) != 10 || len(c.DefragmentedSince(a)) != 2 {
		t.Fatalf("an older compaction changed the record: revision %d, %v", c.Get(a), c.DefragmentedSince(a))
	}
	c.Set(a, 12)
	if c.Get(a) != 12 || len(c.DefragmentedSince(a)) != 0 {
		t.Fatalf("after a newer compaction: revision %d, %v", c.Get(a), c.DefragmentedSince(a))
	}
	if got := c.DefragmentedSince(b); !maps.Equal(got, map[uint64]bool{3: true}) {
		t.Fatalf("another cluster's record changed: %v", got)
	}
}

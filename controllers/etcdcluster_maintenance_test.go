package controllers

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestCompactionsForgetDefragmentationsAtANewerCompaction: the members defragmented since the
// last compaction are what the maintenance planner reads under a NOSPACE alarm; a newer
// compaction starts the record afresh, the same revision again (a repeated step) does not.
func TestCompactionsForgetDefragmentationsAtANewerCompaction(t *testing.T) {
	var c compactions
	a, b := types.UID("a"), types.UID("b")
	if got := c.defragmentedSince(a); len(got) != 0 || c.get(a) != 0 {
		t.Fatalf("empty record: %v, revision %d", got, c.get(a))
	}
	c.set(a, 10)
	c.defragmented(a, 1)
	c.defragmented(a, 2)
	c.defragmented(b, 3)
	c.set(a, 10)
	if got := c.defragmentedSince(a); !maps.Equal(got, map[uint64]bool{1: true, 2: true}) {
		t.Fatalf("after the same compaction again: %v", got)
	}
	got := c.defragmentedSince(a)
	got[9] = true // a copy: the caller cannot change the record
	c.set(a, 9)
	if c.get(a) != 10 || len(c.defragmentedSince(a)) != 2 {
		t.Fatalf("an older compaction changed the record: revision %d, %v", c.get(a), c.defragmentedSince(a))
	}
	c.set(a, 12)
	if c.get(a) != 12 || len(c.defragmentedSince(a)) != 0 {
		t.Fatalf("after a newer compaction: revision %d, %v", c.get(a), c.defragmentedSince(a))
	}
	if got := c.defragmentedSince(b); !maps.Equal(got, map[uint64]bool{3: true}) {
		t.Fatalf("another cluster's record changed: %v", got)
	}
}

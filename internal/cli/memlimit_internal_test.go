package cli

import (
	"math"
	"runtime/debug"
	"testing"
)

// The soft limit is 60 % of the container's limit, and nothing is set without a limit or when
// GOMEMLIMIT is.
func TestSetMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(math.MaxInt64)
	if got := setMemoryLimit(256 << 20); got != 256<<20/5*3 || debug.SetMemoryLimit(-1) != got {
		t.Fatalf("soft limit %d (runtime %d), want %d", got, debug.SetMemoryLimit(-1), 256<<20/5*3)
	}
	if got := setMemoryLimit(0); got != 0 {
		t.Fatalf("no limit gave %d", got)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := setMemoryLimit(256 << 20); got != 0 {
		t.Fatalf("with GOMEMLIMIT set: %d", got)
	}
}

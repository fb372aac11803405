package node

import (
	"fmt"
	"testing"
)

func TestIPAllocatorIsStablePerKey(t *testing.T) {
	a := NewIPAllocator("127.20")
	ip1 := a.Allocate("ns/a")
	ip2 := a.Allocate("ns/b")
	if ip1 != "127.20.0.1" || ip2 != "127.20.0.2" {
		t.Fatalf("got %s, %s; want 127.20.0.1, 127.20.0.2", ip1, ip2)
	}
	if got := a.Allocate("ns/a"); got != ip1 {
		t.Errorf("second Allocate of ns/a = %s, want %s", got, ip1)
	}
	// A released key gets its address back if nobody took it.
	a.Release("ns/a")
	a.Release("ns/a") // twice is fine
	if got := a.Allocate("ns/c"); got == ip1 {
		t.Errorf("ns/c got ns/a's released address %s while fresh ones were left", got)
	}
	if got := a.Allocate("ns/a"); got != ip1 {
		t.Errorf("ns/a after release = %s, want its old %s", got, ip1)
	}
}

func TestIPAllocatorSkipsZeroAndBroadcastAndRunsOut(t *testing.T) {
	a := NewIPAllocator("127.9.3")
	seen := map[string]bool{}
	for i := range 254 {
		ip := a.Allocate(fmt.Sprint(i))
		if ip == "" || ip == "127.9.3.0" || ip == "127.9.3.255" || seen[ip] {
			t.Fatalf("allocation %d gave %q", i, ip)
		}
		seen[ip] = true
	}
	if ip := a.Allocate("one too many"); ip != "" {
		t.Fatalf("allocation past the pool gave %s", ip)
	}
	a.Release("7")
	if ip := a.Allocate("late"); ip == "" {
		t.Fatal("no address after a release")
	}
}

func TestIPAllocatorWithAShortPrefixCrossesOctets(t *testing.T) {
	a := NewIPAllocator("127")
	var last string
	for i := range 300 {
		last = a.Allocate(fmt.Sprint(i))
	}
	// 254 usable addresses per last octet: the 300th is the 46th of 127.0.1.x.
	if last != "127.0.1.46" {
		t.Errorf("300th address = %s, want 127.0.1.46", last)
	}
}

func TestNewIPAllocatorRejectsBadPrefixes(t *testing.T) {
	for _, p := range []string{"", "10.0", "127.0.0.0", "127.300", "127.x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewIPAllocator(%q) did not panic", p)
				}
			}()
			NewIPAllocator(p)
		}()
	}
}

// TestIPAllocatorHoldersShareAKey covers a pod force-deleted on one node and recreated under
// the same name on another: both hold the key, and the old pod's cleanup must not free the
// new pod's address.
func TestIPAllocatorHoldersShareAKey(t *testing.T) {
	a := NewIPAllocator("127.20")
	old := a.acquire("ns/etcd-0", "uid-old")
	succ := a.acquire("ns/etcd-0", "uid-new")
	if old != succ {
		t.Fatalf("holders of one key got %s and %s", old, succ)
	}
	a.drop("ns/etcd-0", "uid-old")
	if other := a.Allocate("ns/other"); other == succ {
		t.Fatalf("address %s handed to another key while still held", other)
	}
	a.drop("ns/etcd-0", "uid-new")
	a.drop("ns/etcd-0", "uid-new") // twice is fine
	if got := a.Allocate("ns/etcd-0"); got != succ {
		t.Errorf("key got %s after its holders left, want its old %s", got, succ)
	}
	a.Release("ns/etcd-0")
	if got := a.acquire("ns/etcd-0", "x"); got != succ {
		t.Errorf("after Release: %s, want %s", got, succ)
	}
}

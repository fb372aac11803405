package node

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// IPAllocator hands out loopback addresses under a prefix, one per key (the nodes key them by
// namespace/name of the pod). An address stays with its key while held, and a key that asks
// again after a Release gets its previous address back when no other key took it meanwhile,
// so a pod recreated under the same name usually keeps its IP. Addresses whose last octet is
// 0 or 255 are never handed out. It is safe for concurrent use.
type IPAllocator struct {
	mu     sync.Mutex
	base   uint32 // the prefix as the top octets of an IPv4 address
	size   uint32 // number of addresses under the prefix
	next   uint32 // offset at which the next search starts
	held   map[string]uint32
	holder map[uint32]string
	// holders lists who holds each held key: Allocate holds it as "", nodes as a pod's UID,
	// so the cleanup of a pod never frees the address of its successor of the same name.
	holders map[string]map[string]struct{}
	// last remembers the address a key held before its Release, and lastOf the key that last
	// held an address, so that released addresses are reused by their old key first.
	last   map[string]uint32
	lastOf map[uint32]string
}

// NewIPAllocator returns an allocator of the addresses under prefix, one to three octets of a
// loopback address such as "127.20" (127.20.0.1 to 127.20.255.254). It panics when prefix is
// not such a prefix: the prefix is a constant of the caller, not input.
func NewIPAllocator(prefix string) *IPAllocator {
	octets := strings.Split(prefix, ".")
	if len(octets) < 1 || len(octets) > 3 || octets[0] != "127" {
		panic(fmt.Sprintf("node: IP prefix %q is not 1 to 3 octets of a loopback address", prefix))
	}
	var base uint32
	for i, o := range octets {
		v, err := strconv.ParseUint(o, 10, 8)
		if err != nil {
			panic(fmt.Sprintf("node: IP prefix %q has an invalid octet %q", prefix, o))
		}
		base |= uint32(v) << (24 - 8*i)
	}
	return &IPAllocator{
		base:    base,
		size:    1 << (8 * (4 - len(octets))),
		next:    1,
		held:    map[string]uint32{},
		holder:  map[uint32]string{},
		holders: map[string]map[string]struct{}{},
		last:    map[string]uint32{},
		lastOf:  map[uint32]string{},
	}
}

// Allocate returns key's address, allocating one when key holds none. It returns "" when
// every address under the prefix is held.
func (a *IPAllocator) Allocate(key string) string { return a.acquire(key, "") }

// Release gives key's address back, whoever holds it. Releasing a key that holds nothing does
// nothing.
func (a *IPAllocator) Release(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free(key)
}

// acquire is Allocate on behalf of holder: key keeps its address until every holder dropped
// it (or Release).
func (a *IPAllocator) acquire(key, holder string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip := a.allocate(key)
	if ip != "" {
		if a.holders[key] == nil {
			a.holders[key] = map[string]struct{}{}
		}
		a.holders[key][holder] = struct{}{}
	}
	return ip
}

// drop ends holder's hold on key, freeing the address when nobody else holds it.
func (a *IPAllocator) drop(key, holder string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	hs, ok := a.holders[key]
	if !ok {
		return
	}
	delete(hs, holder)
	if len(hs) == 0 {
		a.free(key)
	}
}

// allocate returns key's address, taking one when it holds none; a.mu must be held.
func (a *IPAllocator) allocate(key string) string {
	if off, ok := a.held[key]; ok {
		return a.addr(off)
	}
	if off, ok := a.last[key]; ok {
		if _, taken := a.holder[off]; !taken {
			return a.take(key, off)
		}
	}
	// First an address nobody held before, then any free one.
	for _, fresh := range []bool{true, false} {
		for i := uint32(0); i < a.size; i++ {
			off := (a.next + i) % a.size
			if !a.usable(off) {
				continue
			}
			if _, taken := a.holder[off]; taken {
				continue
			}
			if prev, ok := a.lastOf[off]; fresh && ok && prev != key {
				continue
			}
			a.next = (off + 1) % a.size
			return a.take(key, off)
		}
	}
	return ""
}

// free frees key's address; a.mu must be held.
func (a *IPAllocator) free(key string) {
	off, ok := a.held[key]
	if !ok {
		return
	}
	delete(a.held, key)
	delete(a.holder, off)
	delete(a.holders, key)
}

func (a *IPAllocator) take(key string, off uint32) string {
	if prev, ok := a.lastOf[off]; ok && prev != key {
		delete(a.last, prev)
	}
	a.held[key] = off
	a.holder[off] = key
	a.last[key] = off
	a.lastOf[off] = key
	return a.addr(off)
}

// usable reports whether the address at off may be handed out: not the network-looking .0
// nor the broadcast-looking .255.
func (a *IPAllocator) usable(off uint32) bool {
	last := (a.base + off) & 0xff
	return last != 0 && last != 0xff
}

func (a *IPAllocator) addr(off uint32) string {
	v := a.base + off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

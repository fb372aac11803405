package hosts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// resolve parses a hosts file as resolvers do (text after '#' is a comment, the first line
// naming a host wins) and returns name -> address.
func resolve(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, n := range f[1:] {
			if _, ok := m[n]; !ok {
				m[n] = f[0]
			}
		}
	}
	return m
}

func mustOpen(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return f
}

func TestOpenCreatesLocalhost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	mustOpen(t, path)
	got := resolve(t, path)
	if got["localhost"] != "127.0.0.1" {
		t.Errorf("localhost resolves to %q, want 127.0.0.1", got["localhost"])
	}
}

func TestSetRemoveKeepsBaseLinesAndInode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	base := "# the machine's own\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n10.1.2.3 myhost\n"
	if err := os.WriteFile(path, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, path)
	if err := f.Set("pod/default/demo-1", "127.20.0.3", "demo-1.demo.default.svc", "demo-1.demo.default.svc.cluster.local"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("pod/default/demo-0", "127.20.0.2", "demo-0.demo.default.svc"); err != nil {
		t.Fatal(err)
	}
	want := base + "127.20.0.2\tdemo-0.demo.default.svc # owner=pod/default/demo-0\n" +
		"127.20.0.3\tdemo-1.demo.default.svc demo-1.demo.default.svc.cluster.local # owner=pod/default/demo-1\n"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != want {
		t.Errorf("file:\n%s\nwant:\n%s", data, want)
	}

	// Replace one owner's entry with a shorter one, remove the other: the stale names must be
	// gone even though the file does not shrink.
	if err := f.Set("pod/default/demo-1", "127.20.0.9", "x"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove("pod/default/demo-0"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove("never-set"); err != nil {
		t.Errorf("Remove of an unknown owner: %v", err)
	}
	got := resolve(t, path)
	want2 := map[string]string{"localhost": "127.0.0.1", "ip6-localhost": "::1", "myhost": "10.1.2.3", "x": "127.20.0.9"}
	if fmt.Sprint(got) != fmt.Sprint(want2) {
		t.Errorf("resolved %v, want %v", got, want2)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the file was replaced; it must be rewritten in place (it is bind-mounted)")
	}
}

func TestOpenTakesBackOwnedEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	f := mustOpen(t, path)
	if err := f.Set("svc/default/demo-client", "127.20.0.2", "demo-client.default.svc"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("pod/default/a", "127.20.0.5", "a.default.svc"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove("pod/default/a"); err != nil { // leaves padding behind
		t.Fatal(err)
	}
	g := mustOpen(t, path)
	ip, names, ok := g.Lookup("svc/default/demo-client")
	if !ok || ip != "127.20.0.2" || len(names) != 1 || names[0] != "demo-client.default.svc" {
		t.Errorf("Lookup after reopening = %q %v %v", ip, names, ok)
	}
	if _, _, ok := g.Lookup("pod/default/a"); ok {
		t.Error("a removed owner came back")
	}
	if data := string(mustRead(t, path)); strings.Count(data, "127.0.0.1\tlocalhost") != 1 {
		t.Errorf("localhost lines duplicated or lost:\n%s", data)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSetRejectsBadInput(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "hosts"))
	for _, tc := range []struct{ owner, ip, name string }{
		{"", "127.0.0.1", "a"},
		{"a b", "127.0.0.1", "a"},
		{"o", "not-an-ip", "a"},
		{"o", "127.0.0.1", "a#b"},
		{"o", "127.0.0.1", "a b"},
	} {
		if err := f.Set(tc.owner, tc.ip, tc.name); err == nil {
			t.Errorf("Set(%q, %q, %q) succeeded, want an error", tc.owner, tc.ip, tc.name)
		}
	}
}

func TestConcurrentSet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	f := mustOpen(t, path)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("pod/ns/p%02d", i)
			if err := f.Set(owner, fmt.Sprintf("127.20.0.%d", i+2), fmt.Sprintf("p%02d", i)); err != nil {
				t.Error(err)
			}
			if i%2 == 0 {
				if err := f.Remove(owner); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got := resolve(t, path)
	for i := range 50 {
		name := fmt.Sprintf("p%02d", i)
		ip, ok := got[name]
		if i%2 == 0 && ok {
			t.Errorf("%s resolves to %s after its removal", name, ip)
		}
		if want := fmt.Sprintf("127.20.0.%d", i+2); i%2 == 1 && ip != want {
			t.Errorf("%s resolves to %q, want %s", name, ip, want)
		}
	}
	// Sorted by owner, whatever the order of the calls.
	data := string(mustRead(t, path))
	if a, b := strings.Index(data, "p01"), strings.Index(data, "p49"); a < 0 || b < a {
		t.Errorf("entries are not sorted by owner:\n%s", data)
	}
}

func TestCreateDropsOwnedEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(strings.Repeat("stale content\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := "127.0.0.1 localhost\n127.20.0.2\told.ns.svc # owner=svc/ns/old\n10.0.0.5 machine\n"
	f, err := Create(path, []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := f.Lookup("svc/ns/old"); ok {
		t.Error("Create kept an owned entry of the base")
	}
	if got, want := string(mustRead(t, path)), "127.0.0.1 localhost\n10.0.0.5 machine\n"; got != want {
		t.Errorf("file = %q, want %q", got, want)
	}
}

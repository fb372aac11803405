// Package hosts maintains the hosts file of the local cluster's private name view. The local
// cluster bind-mounts one file over /etc/hosts inside a private mount namespace; every process
// started in that namespace (API server, operator, pods, etcdctl through `local exec`) resolves
// the names written here.
package hosts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
)

// ownerMarker ends every line this package writes, so Open can tell them from the lines it
// must keep (localhost and the machine's own names).
const ownerMarker = "# owner="

// File is a hosts file whose entries are grouped by owner: each owner (a pod, a Service, a
// node) has one address and any number of names. The zero value is not usable; call Open.
// A File is safe for concurrent use. Only one File (one process) may write a given path.
type File struct {
	path string

	mu      sync.Mutex
	base    []string         // lines kept verbatim, in their original order
	entries map[string]entry // by owner
	size    int64            // bytes last written; the file never shrinks below it (see write)
}

type entry struct {
	ip    string
	names []string
}

// Open reads the hosts file at path, or creates it with localhost lines if it does not exist.
// Lines written by an earlier File (tagged with their owner) are taken back as entries; every
// other line is kept verbatim at the top of the file.
func Open(path string) (*File, error) {
	f := &File{path: path, entries: map[string]entry{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.base = []string{"127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"}
	case err != nil:
		return nil, fmt.Errorf("failed to read hosts file %s: %w", path, err)
	default:
		f.parse(data)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.write(); err != nil {
		return nil, err
	}
	return f, nil
}

// Create writes a new hosts file at path holding the lines of base that no File owns (the
// machine's localhost and own names, typically base is /etc/hosts), replacing whatever the file
// held, and returns it. Use it when a name view starts, so entries of an earlier run are gone.
func Create(path string, base []byte) (*File, error) {
	f := &File{path: path, entries: map[string]entry{}}
	f.parse(base)
	clear(f.entries)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.write(); err != nil {
		return nil, err
	}
	return f, nil
}

// parse splits data into base lines and owned entries.
func (f *File) parse(data []byte) {
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		line := strings.TrimRight(s.Text(), " \t")
		if line == "" {
			continue
		}
		i := strings.Index(line, ownerMarker)
		if i < 0 {
			f.base = append(f.base, line)
			continue
		}
		owner := strings.TrimSpace(line[i+len(ownerMarker):])
		fields := strings.Fields(line[:i])
		if owner == "" || len(fields) < 2 {
			continue
		}
		f.entries[owner] = entry{ip: fields[0], names: fields[1:]}
	}
}

// Path returns the path of the file.
func (f *File) Path() string { return f.path }

// Set makes names resolve to ip, replacing whatever owner set before. Set with no names is
// Remove. owner and names must not contain white space or '#'; ip must be an IP address.
func (f *File) Set(owner, ip string, names ...string) error {
	if len(names) == 0 {
		return f.Remove(owner)
	}
	if err := checkWord("owner", owner); err != nil {
		return err
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("failed to set hosts entry of %s: %w", owner, err)
	}
	for _, n := range names {
		if err := checkWord("name", n); err != nil {
			return err
		}
	}
	e := entry{ip: addr.String(), names: append([]string(nil), names...)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.entries[owner]; ok && old.ip == e.ip && slices.Equal(old.names, e.names) {
		return nil
	}
	f.entries[owner] = e
	return f.write()
}

// Remove deletes owner's entry. Removing an owner that has none is not an error.
func (f *File) Remove(owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.entries[owner]; !ok {
		return nil
	}
	delete(f.entries, owner)
	return f.write()
}

// Lookup returns the address owner set, if any. It exists for tests and diagnostics.
func (f *File) Lookup(owner string) (ip string, names []string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.entries[owner]
	return e.ip, append([]string(nil), e.names...), ok
}

// render returns the file's content: base lines, then one line per owner sorted by owner.
func (f *File) render() []byte {
	var b bytes.Buffer
	for _, l := range f.base {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	for _, o := range slices.Sorted(maps.Keys(f.entries)) {
		e := f.entries[o]
		fmt.Fprintf(&b, "%s\t%s %s%s\n", e.ip, strings.Join(e.names, " "), ownerMarker, o)
	}
	return b.Bytes()
}

// write rewrites the file in place: the same inode, because the file is bind-mounted over
// /etc/hosts and a rename would leave the mount on the old inode. Resolvers read the file
// while it is being written, so write never truncates it first (an empty file would make every
// name fail to resolve for a moment): it overwrites from offset 0 and, when the new content is
// shorter, pads it with a blank comment instead of leaving a stale tail that could parse as an
// entry. The file therefore never shrinks; it stays as large as its largest content.
func (f *File) write() error {
	data := f.render()
	if pad := f.size - int64(len(data)); pad > 0 {
		// "#" + spaces + "\n": pad bytes in all; pad is at least 1.
		data = append(data, '#')
		if pad > 1 {
			data = append(data, bytes.Repeat([]byte{' '}, int(pad-2))...)
			data = append(data, '\n')
		}
	}
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("failed to open hosts file %s: %w", f.path, err)
	}
	if _, err := fh.WriteAt(data, 0); err != nil {
		fh.Close()
		return fmt.Errorf("failed to write hosts file %s: %w", f.path, err)
	}
	// Drops a tail left by another writer (for example the file as first created by Open's
	// caller); a no-op when the file already had exactly this size or was smaller.
	if err := fh.Truncate(int64(len(data))); err != nil {
		fh.Close()
		return fmt.Errorf("failed to truncate hosts file %s: %w", f.path, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("failed to close hosts file %s: %w", f.path, err)
	}
	f.size = int64(len(data))
	return nil
}

func checkWord(what, s string) error {
	if s == "" || strings.ContainsAny(s, " \t\r\n#") {
		return fmt.Errorf("invalid hosts %s %q: must be non-empty without white space or '#'", what, s)
	}
	return nil
}

// Package userns decides how the local cluster gets the mount namespaces it runs in (a private
// /etc/hosts for the cluster, one mount view per pod). Root creates them directly, as it always
// has. Any other user creates them inside a user namespace that maps the user, and nobody
// else, to root (uid and gid 0): in there, the cluster's processes hold the capabilities of
// that namespace (mounts of its own mount namespaces), everything they write belongs to the
// user, and children keep the capabilities across exec because they run as uid 0 there. The
// machine's files owned by other users (root's /etc, /dev, /var) show up as unmapped there
// and stay read-only; the process nodes' shim makes its mount points without writing to them
// (see node.ShimMain).
//
// Where the kernel does not let an unprivileged user create user namespaces, Check says which
// setting stops it and how to change it.
package userns

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Kernel settings that allow or forbid unprivileged user namespaces, by sysctl name.
const (
	// UnprivilegedClone exists on Debian and Ubuntu kernels (and some others): 0 forbids
	// user namespaces to users other than root.
	UnprivilegedClone = "kernel.unprivileged_userns_clone"
	// MaxUserNamespaces bounds the user namespaces a user may own; 0 forbids them.
	MaxUserNamespaces = "user.max_user_namespaces"
	// AppArmorRestrict exists on Ubuntu 23.10 and later: 1 lets an unprivileged user create
	// a user namespace but gives it no capabilities unless an AppArmor profile allows it.
	AppArmorRestrict = "kernel.apparmor_restrict_unprivileged_userns"
)

// Probe is what decides how the local cluster gets its mount namespaces: who runs it and the
// kernel's settings. ReadProbe reads it; tests build one.
type Probe struct {
	// Euid and Egid are the effective ids of the process.
	Euid, Egid int
	// Supported is false when the kernel has no user namespaces at all (no
	// /proc/self/ns/user: built without CONFIG_USER_NS).
	Supported bool
	// Sysctls holds the values of the settings above that exist on this kernel, by sysctl
	// name, trimmed; a setting the kernel does not have is absent.
	Sysctls map[string]string
}

// ReadProbe reads the probe of this process and machine.
func ReadProbe() Probe {
	p := Probe{Euid: os.Geteuid(), Egid: os.Getegid(), Sysctls: map[string]string{}}
	_, err := os.Lstat("/proc/self/ns/user")
	p.Supported = err == nil
	for _, name := range []string{UnprivilegedClone, MaxUserNamespaces, AppArmorRestrict} {
		if b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/")); err == nil {
			p.Sysctls[name] = strings.TrimSpace(string(b))
		}
	}
	return p
}

// Mode is how the local cluster creates its mount namespaces.
type Mode int

const (
	// AsRoot creates mount namespaces directly (the process is root).
	AsRoot Mode = iota
	// InUserNamespace creates them inside a new user namespace mapping the user to root.
	InUserNamespace
)

func (m Mode) String() string {
	if m == AsRoot {
		return "as root"
	}
	return "in a user namespace"
}

// ErrUnavailable is wrapped by the errors of Check and Explain: neither root nor a user
// namespace can create the mount namespaces.
var ErrUnavailable = errors.New("no mount namespaces for the local cluster")

// Check returns the mode p allows: AsRoot for root, InUserNamespace for another user when no
// setting forbids user namespaces, else an error wrapping ErrUnavailable that names each
// setting in the way and how to change it.
func Check(p Probe) (Mode, error) {
	if p.Euid == 0 {
		return AsRoot, nil
	}
	if bs := blockers(p); len(bs) > 0 {
		return InUserNamespace, unavailable(p, whys(bs), fixes(bs))
	}
	return InUserNamespace, nil
}

// Explain turns the failure to start a process in a user namespace (err, from exec.Cmd.Start
// with the SysProcAttr of Apply) into an error that says why, as far as the settings tell,
// and what to do. The result wraps both err and ErrUnavailable.
func Explain(p Probe, err error) error {
	bs := blockers(p)
	why := ""
	if len(bs) > 0 {
		why = ": " + whys(bs)
	}
	return fmt.Errorf("%w: %s; uid %d cannot have one: creating one failed (%w)%s. To run it, %s", ErrUnavailable, needs, p.Euid, err, why, fixes(bs))
}

// blockers lists the settings of p that keep an unprivileged user from user namespaces, with
// the value each needs instead (none for a kernel without them).
func blockers(p Probe) []blocker {
	var out []blocker
	if !p.Supported {
		out = append(out, blocker{what: "this kernel has no user namespaces (built without CONFIG_USER_NS)"})
	}
	if v, ok := p.Sysctls[UnprivilegedClone]; ok && v == "0" {
		out = append(out, blocker{what: UnprivilegedClone + " is 0", set: UnprivilegedClone + "=1"})
	}
	if v, ok := p.Sysctls[MaxUserNamespaces]; ok && v == "0" {
		out = append(out, blocker{what: MaxUserNamespaces + " is 0", set: MaxUserNamespaces + "=15000"})
	}
	if v, ok := p.Sysctls[AppArmorRestrict]; ok && v != "0" {
		out = append(out, blocker{what: AppArmorRestrict + " is " + v + " (AppArmor takes the capabilities of a user namespace away)", set: AppArmorRestrict + "=0"})
	}
	return out
}

// blocker is a reason user namespaces are not available, and the sysctl setting that lifts it
// ("" when no setting does).
type blocker struct{ what, set string }

func whys(bs []blocker) string {
	var out []string
	for _, b := range bs {
		out = append(out, b.what)
	}
	return strings.Join(out, "; ")
}

// fixes says how to lift bs, or what to check when no setting explains the failure.
func fixes(bs []blocker) string {
	var sets []string
	for _, b := range bs {
		if b.set == "" {
			return "use a kernel built with CONFIG_USER_NS, or run it as root"
		}
		sets = append(sets, b.set)
	}
	if len(sets) == 0 {
		return "check that no security module (AppArmor, SELinux) or container runtime (its seccomp profile) forbids unprivileged user namespaces (`unshare --user --map-root-user --mount true` must succeed), or run it as root"
	}
	fix := "allow unprivileged user namespaces with `sudo sysctl -w " + strings.Join(sets, " ") +
		"` (and the same settings in a file under /etc/sysctl.d/ to keep them after a reboot)"
	if slices.ContainsFunc(bs, func(b blocker) bool { return strings.HasPrefix(b.set, AppArmorRestrict) }) {
		fix += " or an AppArmor profile that allows userns to etcd-pilot-local"
	}
	return fix + ", or run it as root"
}

// needs says what the local cluster needs namespaces for, and who may create them.
const needs = "it needs mount namespaces of its own (a private /etc/hosts, one mount view per pod), which root may create and any other user only inside a user namespace"

func unavailable(p Probe, why, fix string) error {
	return fmt.Errorf("%w: %s; uid %d cannot have one: %s. To run it, %s", ErrUnavailable, needs, p.Euid, why, fix)
}

// Apply makes attr start its process in a new user namespace where p's effective uid and gid
// are 0, and nobody else is mapped; setgroups(2) is denied there, as the kernel requires for
// an unprivileged gid map. The caller adds the other namespaces (a mount namespace through
// Unshareflags, created after the maps are written, belongs to the new user namespace).
func Apply(attr *syscall.SysProcAttr, p Probe) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.Euid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.Egid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
}

// Inside reports whether this process runs in a user namespace other than the machine's
// (whose uid map is the identity over all ids).
func Inside() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return !isIdentityMap(string(b))
}

// isIdentityMap reports whether a uid_map's content is the initial user namespace's.
func isIdentityMap(m string) bool {
	f := strings.Fields(m)
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// SameAs reports whether the process pid runs in this process's user namespace. It is true
// when either namespace cannot be read.
func SameAs(pid int) bool {
	mine, err1 := os.Readlink("/proc/self/ns/user")
	theirs, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	return err1 != nil || err2 != nil || mine == theirs
}

// RootOf returns the uid, in this process's user namespace, that the user namespace of the
// process pid maps to root; ok is false when it maps none or cannot be read.
func RootOf(pid int) (uid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "0" {
			continue
		}
		if v, err := strconv.Atoi(f[1]); err == nil {
			return v, true
		}
	}
	return 0, false
}

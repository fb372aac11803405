package userns

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestCheck(t *testing.T) {
	user := func(sysctls map[string]string) Probe {
		return Probe{Euid: 1000, Egid: 1000, Supported: true, Sysctls: sysctls}
	}
	for _, tc := range []struct {
		name  string
		probe Probe
		mode  Mode
		// want are the parts of the error, none when it must succeed.
		want []string
	}{
		{name: "root", probe: Probe{Euid: 0, Sysctls: map[string]string{UnprivilegedClone: "0"}}, mode: AsRoot},
		{name: "user, allowed", probe: user(map[string]string{UnprivilegedClone: "1", MaxUserNamespaces: "63432", AppArmorRestrict: "0"}), mode: InUserNamespace},
		{name: "user, no settings", probe: user(map[string]string{}), mode: InUserNamespace},
		{name: "Debian's switch off", probe: user(map[string]string{UnprivilegedClone: "0", MaxUserNamespaces: "63432"}), mode: InUserNamespace, want: []string{
			"uid 1000 cannot have one: kernel.unprivileged_userns_clone is 0.",
			"`sudo sysctl -w kernel.unprivileged_userns_clone=1`",
			"/etc/sysctl.d/",
			"or run it as root",
		}},
		{name: "no user namespaces allowed", probe: user(map[string]string{MaxUserNamespaces: "0"}), mode: InUserNamespace, want: []string{
			"user.max_user_namespaces is 0.",
			"`sudo sysctl -w user.max_user_namespaces=15000`",
		}},
		{name: "Ubuntu's AppArmor restriction", probe: user(map[string]string{MaxUserNamespaces: "63432", AppArmorRestrict: "1"}), mode: InUserNamespace, want: []string{
			"kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor takes the capabilities of a user namespace away).",
			"`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
			"or an AppArmor profile that allows userns to etcd-pilot-local, or run it as root",
		}},
		{name: "two of them", probe: user(map[string]string{UnprivilegedClone: "0", MaxUserNamespaces: "0"}), mode: InUserNamespace, want: []string{
			"kernel.unprivileged_userns_clone is 0; user.max_user_namespaces is 0.",
			"`sudo sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000`",
		}},
		{name: "kernel without them", probe: Probe{Euid: 1000, Sysctls: map[string]string{}}, mode: InUserNamespace, want: []string{
			"this kernel has no user namespaces (built without CONFIG_USER_NS)",
			"use a kernel built with CONFIG_USER_NS, or run it as root",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, err := Check(tc.probe)
			if mode != tc.mode {
				t.Errorf("mode = %v, want %v", mode, tc.mode)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			msg := err.Error()
			for _, w := range append(tc.want, "mount namespaces of its own", "root may create") {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestExplain(t *testing.T) {
	// Settings that allow them, yet the start failed (a seccomp profile, say).
	err := Explain(Probe{Euid: 1000, Supported: true, Sysctls: map[string]string{MaxUserNamespaces: "63432"}}, syscall.EPERM)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EPERM) {
		t.Fatalf("err = %v, want it to wrap ErrUnavailable and EPERM", err)
	}
	for _, w := range []string{"creating one failed (operation not permitted).", "`unshare --user --map-root-user --mount true`", "or run it as root"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message lacks %q:\n%s", w, err)
		}
	}
	// A setting explains it.
	err = Explain(Probe{Euid: 1000, Supported: true, Sysctls: map[string]string{UnprivilegedClone: "0"}}, syscall.EPERM)
	if w := "creating one failed (operation not permitted): kernel.unprivileged_userns_clone is 0. To run it, allow"; !strings.Contains(err.Error(), w) {
		t.Errorf("message lacks %q:\n%s", w, err)
	}
}

func TestApply(t *testing.T) {
	attr := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	Apply(attr, Probe{Euid: 1000, Egid: 100})
	if attr.Cloneflags&syscall.CLONE_NEWUSER == 0 || attr.Unshareflags != syscall.CLONE_NEWNS {
		t.Errorf("flags: clone %#x, unshare %#x", attr.Cloneflags, attr.Unshareflags)
	}
	if len(attr.UidMappings) != 1 || attr.UidMappings[0] != (syscall.SysProcIDMap{ContainerID: 0, HostID: 1000, Size: 1}) {
		t.Errorf("uid map %+v", attr.UidMappings)
	}
	if len(attr.GidMappings) != 1 || attr.GidMappings[0] != (syscall.SysProcIDMap{ContainerID: 0, HostID: 100, Size: 1}) || attr.GidMappingsEnableSetgroups {
		t.Errorf("gid map %+v, setgroups %v", attr.GidMappings, attr.GidMappingsEnableSetgroups)
	}
}

func TestIdentityMap(t *testing.T) {
	if !isIdentityMap("         0          0 4294967295\n") {
		t.Error("the initial namespace's map is not the identity")
	}
	if isIdentityMap("         0       1000          1\n") {
		t.Error("a map of one user is the identity")
	}
	// This process and itself.
	if !SameAs(os.Getpid()) {
		t.Error("SameAs(own pid) = false")
	}
	if uid, ok := RootOf(os.Getpid()); !Inside() && (uid != 0 || !ok) {
		t.Errorf("RootOf(own pid) = %d, %v outside a user namespace, want 0, true", uid, ok)
	}
}

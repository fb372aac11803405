package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"
)

func TestShimArgsRoundTrip(t *testing.T) {
	spec := shimSpec{
		Binds: []bindMount{
			{Source: "/img", Target: "/usr/local/bin", ReadOnly: true},
			{Source: "/pods/x/volumes/data", Target: "/var/lib/etcd"},
		},
		Workdir: "/work",
		Argv:    []string{"/usr/local/bin/etcd", "--", "--name=x"},
	}
	args := shimArgs(spec)
	want := []string{"--ro-bind", "/img:/usr/local/bin", "--bind", "/pods/x/volumes/data:/var/lib/etcd", "--workdir", "/work", "--", "/usr/local/bin/etcd", "--", "--name=x"}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("shimArgs = %q, want %q", args, want)
	}
	got, err := parseShimArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, spec) {
		t.Fatalf("parseShimArgs(shimArgs(spec)) = %+v, want %+v", got, spec)
	}
}

func TestParseShimArgsErrors(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"/bin/true"},
		{"--"},
		{"--bind"},
		{"--bind", "/a", "--", "x"},
		{"--bind", "/a:relative", "--", "x"},
		{"--bind", ":/b", "--", "x"},
		{"--frob", "--", "x"},
	} {
		if _, err := parseShimArgs(args); err == nil {
			t.Errorf("parseShimArgs(%q) succeeded", args)
		}
	}
}

// TestShimRunsTheCommandInItsView runs the shim (this test binary) as the node does and checks
// that binds, read-only binds and the working directory are in place for the command, and
// that nothing shows on the host.
func TestShimRunsTheCommandInItsView(t *testing.T) {
	needNamespaces(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	src, ro, target := filepath.Join(tmp, "src"), filepath.Join(tmp, "ro"), filepath.Join(tmp, "target")
	for _, d := range []string{src, ro} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("from src"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := shimSpec{
		Binds: []bindMount{
			{Source: src, Target: target},
			{Source: ro, Target: filepath.Join(target, "ro"), ReadOnly: true},
		},
		Workdir: target,
		Argv: []string{"sh", "-c", `cat hello; echo; pwd
if touch ro/x 2>/dev/null; then echo ro writable; else echo ro read-only; fi
touch written`},
	}
	cmd := exec.Command(exe, append([]string{shimArg}, shimArgs(spec)...)...)
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.SysProcAttr = shimSysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("shim failed: %v: %s", err, out)
	}
	want := "from src\n" + target + "\nro read-only\n"
	if string(out) != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	// The write went through the bind into src; the host's target holds only the mount points.
	if _, err := os.Stat(filepath.Join(src, "written")); err != nil {
		t.Errorf("file written in the view is not in the bind source: %v", err)
	}
	entries, _ := os.ReadDir(target)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "" {
		t.Errorf("host target holds %v, want nothing (mounts must not leak)", names)
	}
}

func TestShimReportsAMissingCommand(t *testing.T) {
	needNamespaces(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, shimArg, "--", "no-such-command-here")
	cmd.Env = []string{"PATH=/nonexistent"}
	cmd.SysProcAttr = shimSysProcAttr()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != ShimFailedExitCode {
		t.Fatalf("err = %v, want exit status %d", err, ShimFailedExitCode)
	}
	if !strings.Contains(string(out), "no-such-command-here") {
		t.Errorf("output %q does not name the command", out)
	}
}

// TestShimMakesMissingMountPointsInAUserNamespace runs the shim as a user other than root runs
// it, in a user namespace where the machine's root is not mapped (as root, the namespace maps
// its root to nobody), with mount points missing on the machine under /, /var/lib and /dev: it
// must create them in copies of those folders that only its view sees, keep the rest of the
// folders' content, and leave nothing on the machine.
func TestShimMakesMissingMountPointsInAUserNamespace(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A folder the namespace's root can read and write whoever it is outside.
	tmp, err := os.MkdirTemp("", "shim-userns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	src, ro, logFile := filepath.Join(tmp, "src"), filepath.Join(tmp, "ro"), filepath.Join(tmp, "log")
	for _, d := range []string{src, ro} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("from src\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logFile, []byte("the log\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tmp, src, ro, logFile} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	tag := fmt.Sprintf("shim-userns-test-%d", time.Now().UnixNano())
	top, varLib, dev := "/"+tag, "/var/lib/"+tag, "/dev/"+tag
	spec := shimSpec{
		Binds: []bindMount{
			{Source: src, Target: top + "/data"},
			{Source: ro, Target: varLib, ReadOnly: true},
			{Source: logFile, Target: dev},
		},
		Workdir: top + "/work",
		Argv: []string{"sh", "-c", `cat ../data/hello; cat ` + dev + `; pwd
if touch ` + varLib + `/x 2>/dev/null; then echo ro writable; else echo ro read-only; fi
echo written > ../data/written
test -e /proc/self/status && test -c /dev/null && test -d /var/lib && test -s /etc/hosts && echo the rest is there`},
	}
	hostID := os.Geteuid()
	if hostID == 0 && !userns.Inside() {
		hostID = 65534
	}
	cmd := exec.Command(exe, append([]string{shimArg}, shimArgs(spec)...)...)
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.SysProcAttr = shimSysProcAttr()
	userns.Apply(cmd.SysProcAttr, userns.Probe{Euid: hostID, Egid: hostID})
	if hostID != os.Geteuid() {
		// Root becomes the namespace's root, nobody outside, as the user's id does itself.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Skipf("no user namespace to run the shim in: %v", err)
	}
	if err != nil {
		t.Fatalf("shim failed: %v: %s", err, out)
	}
	want := "from src\nthe log\n" + top + "/work\nro read-only\nthe rest is there\n"
	if string(out) != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(src, "written")); err != nil || string(b) != "written\n" {
		t.Errorf("the write through the bind: %q, %v", b, err)
	}
	for _, p := range []string{top, varLib, dev} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists on the machine (%v): the shim must create it in its own view only", p, err)
		}
	}
}

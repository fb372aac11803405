package node

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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

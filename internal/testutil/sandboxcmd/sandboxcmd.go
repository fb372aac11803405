// Package sandboxcmd gives tests the command that starts a chart render sandbox
// (charts.Budget.Command).
//
// A test binary is its own sandbox (it calls charts.ServeIfSandbox from an init function)
// when it is built as the operator's binary is: without the race detector and without cgo
// (see selfSandbox). Otherwise the sandbox is the operator's binary built as `make build`
// builds it (CGO_ENABLED=0, no race detector), once per test process.
package sandboxcmd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

var (
	once  sync.Once
	built string
	err   error
)

// Command returns the sandbox command for this test binary.
func Command() ([]string, error) {
	if selfSandbox {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return []string{exe, charts.SandboxArg}, nil
	}
	once.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			err = fmt.Errorf("failed to find the module's folder")
			return
		}
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		sweep()
		dir, derr := os.MkdirTemp("", fmt.Sprintf("%s%d-", folderPrefix, os.Getpid()))
		if derr != nil {
			err = derr
			return
		}
		built = filepath.Join(dir, "etcd-pilot")
		cmd := exec.Command("go", "build", "-o", built, ".")
		cmd.Dir = root
		// The race detector and cgo off, whatever the environment asks: a static binary, as
		// the operator's image holds.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS="+strings.ReplaceAll(os.Getenv("GOFLAGS"), "-race", ""))
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("failed to build the operator's binary for the render sandbox: %v\n%s", berr, out)
		}
	})
	if err != nil {
		return nil, err
	}
	return []string{built, charts.SandboxArg}, nil
}

// folderPrefix names the folders the sandbox binaries are built into:
// <prefix><pid of the test process>-<random>.
const folderPrefix = "etcd-pilot-sandbox-"

// sweep removes the folders of test processes that have ended (a test binary has no hook at
// its exit to remove its own): an 86 MB binary each, which runs of the suite would otherwise
// pile up. A folder of a process that still runs is kept; one whose name carries no process
// is removed once it is an hour old.
func sweep() {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), folderPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, named := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); named && err == nil && n > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
				continue
			}
		} else if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < time.Hour {
			continue
		}
		_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
	}
}

// MustCommand is Command for a test: it fails t when the command cannot be had.
func MustCommand(t interface {
	Helper()
	Fatal(...any)
}) []string {
	t.Helper()
	c, err := Command()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

//go:build !linux

package charts

import (
	"os"
	"os/exec"
	"runtime/debug"
)

// defaultSandboxCommand is the running executable.
func defaultSandboxCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return []string{exe, SandboxArg}
}

func setSandboxAttrs(*exec.Cmd) {}

// limitSelf sets only Go's own memory limit outside Linux: the operator runs on Linux, where
// the kernel enforces the budget (sandbox_linux.go); elsewhere the deadline still holds.
func limitSelf(memory, _ int64) error {
	debug.SetMemoryLimit(memory)
	return nil
}

func maxRSS(*os.ProcessState) int64 { return 0 }

func cpuLimitHit(*os.ProcessState, int64) bool { return false }

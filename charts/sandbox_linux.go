package charts

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

// defaultSandboxCommand is the running executable, whatever its path (and even when the file
// was replaced since it started).
func defaultSandboxCommand() []string { return []string{"/proc/self/exe", SandboxArg} }

// setSandboxAttrs makes the kernel kill the sandbox when the operator dies.
func setSandboxAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// limitSelf bounds the memory the process may map from now on to memory, and its CPU time to
// cpuSeconds (RLIMIT_CPU: the kernel kills it at the hard limit). Go's own memory limit is
// set below it, so the collector works harder before the hard limit stops the process.
//
// The bound is on the address space (RLIMIT_AS), relative to what the process has mapped
// when it starts, measured: a Go program reserves over a GiB of address space at start
// (VmSize 1.2 GiB for an empty program, 1.6 GiB for this binary, some 80 MiB more or less
// from run to run), so an absolute RLIMIT_AS says little, but it grows only as the heap
// reserves arenas (64 MiB each). The writable data (RLIMIT_DATA) is bounded the same way, and
// does not do alone: the kernel does not count a MAP_FIXED mapping laid over a PROT_NONE
// reservation, which is how Go's heap grows, and `repeat 400000000` reached 420 MiB of
// resident memory under RLIMIT_DATA = VmData + 64 MiB; under both it dies at 40 MiB.
func limitSelf(memory, cpuSeconds int64) error {
	size, data, err := vmSizes()
	if err != nil {
		return err
	}
	as, ds := uint64(size+memory), uint64(data+memory)
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
		return fmt.Errorf("failed to set RLIMIT_AS: %w", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: ds, Max: ds}); err != nil {
		return fmt.Errorf("failed to set RLIMIT_DATA: %w", err)
	}
	if cpuSeconds > 0 {
		c := uint64(cpuSeconds)
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: c, Max: c}); err != nil {
			return fmt.Errorf("failed to set RLIMIT_CPU: %w", err)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	debug.SetMemoryLimit(int64(ms.Sys-ms.HeapReleased) + memory/4*3)
	return nil
}

// vmSizes are the process's VmSize and VmData in bytes (/proc/self/status).
func vmSizes() (size, data int64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, fmt.Errorf("failed to read /proc/self/status: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		for field, into := range map[string]*int64{"VmSize:": &size, "VmData:": &data} {
			v, ok := bytes.CutPrefix(sc.Bytes(), []byte(field))
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("failed to parse %s %q: %w", field, v, err)
			}
			*into = kb << 10
		}
	}
	if size == 0 || data == 0 {
		return 0, 0, fmt.Errorf("no VmSize or VmData in /proc/self/status")
	}
	return size, data, nil
}

// maxRSS is the peak resident memory of an ended child, in bytes (Linux counts KiB).
func maxRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

// cpuLimitHit reports whether the kernel killed the child for its CPU time: killed by
// SIGKILL or SIGXCPU after using at least the CPU seconds it was allowed (its own limit,
// rounded to whole seconds).
func cpuLimitHit(ps *os.ProcessState, cpuSeconds int64) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || (ws.Signal() != syscall.SIGKILL && ws.Signal() != syscall.SIGXCPU) {
		return false
	}
	used := ps.UserTime() + ps.SystemTime()
	return used >= time.Duration(cpuSeconds)*time.Second-100*time.Millisecond
}

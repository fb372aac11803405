package localcluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc identifies a process across pid reuse: its pid and its start time.
type Proc struct {
	Pid   int
	Start uint64 // clock ticks after boot (field 22 of /proc/PID/stat)
	Cmd   string
}

func (p Proc) String() string { return fmt.Sprintf("pid %d (%s)", p.Pid, p.Cmd) }

// readProc returns pid's parent and identity, or ok false when it is gone or a zombie.
func readProc(pid int) (ppid int, p Proc, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, Proc{}, false
	}
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, Proc{}, false
	}
	fields := strings.Fields(s[end+1:]) // fields 3 (state) onwards
	if len(fields) < 20 || fields[0] == "Z" {
		return 0, Proc{}, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return ppid, Proc{Pid: pid, Start: start, Cmd: s[open+1 : end]}, true
}

// Descendants returns the live descendants of pid (children, their children...).
func Descendants(pid int) []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]Proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, p, ok := readProc(n); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.Pid)
		}
		queue = queue[1:]
	}
	return out
}

// MergeProcs returns the union of a and b.
func MergeProcs(a, b []Proc) []Proc {
	out := slices.Clone(a)
	for _, p := range b {
		if !slices.ContainsFunc(out, func(q Proc) bool { return q.Pid == p.Pid && q.Start == p.Start }) {
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether p still runs (the same process, not a later one with its pid).
func (p Proc) alive() bool {
	_, now, ok := readProc(p.Pid)
	return ok && now.Start == p.Start
}

// KillLeftovers waits up to grace for procs to exit, then kills those still running and
// returns them.
func KillLeftovers(procs []Proc, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		var left []Proc
		for _, p := range procs {
			if p.alive() {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var out []string
			for _, p := range left {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
				out = append(out, p.String())
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

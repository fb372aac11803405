package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupFS = "/sys/fs/cgroup"

// hierarchies lists the mounted cgroup v1 hierarchies (cpu, memory, pids, name=systemd as
// systemd, ...), as folders under /sys/fs/cgroup.
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // cpu,cpuacct links
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 hierarchy is mounted under /sys/fs/cgroup")
	}
	return out, nil
}

// makeCgroup creates rel (a path such as /etcd-pilot-lane/lane-node-1) in every hierarchy;
// in cpuset, each new level gets its parent's CPUs and memory nodes, without which no task
// can join it.
func makeCgroup(rel string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("failed to create cgroup %s: %w", dir, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
						continue
					}
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("failed to set %s of %s: %w", f, dir, err)
					}
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into rel of the pids hierarchy: every process it starts, and those
// they start (containerd's shims, which leave their parent), stay there to be found.
func joinCgroup(rel string, pid int) error {
	return os.WriteFile(filepath.Join(cgroupFS, "pids", rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// cgroupProcs lists the processes in rel of the pids hierarchy and every cgroup below it.
func cgroupProcs(rel string) []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join(cgroupFS, "pids", rel), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroup kills every process in rel (pids hierarchy) but self, until none is left or
// timeout passes, and returns those left.
func killCgroup(rel string, self int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range cgroupProcs(rel) {
			if pid != self {
				left = append(left, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroup removes rel and every cgroup below it from every hierarchy, deepest first.
// A cgroup with a process left in it stays, and is reported.
func removeCgroup(rel string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, rel), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(a, b int) bool { return len(dirs[a]) > len(dirs[b]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("failed to remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

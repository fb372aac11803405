package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning is returned by ReadState when no local cluster runs in the folder.
var ErrNotRunning = errors.New("no local cluster is running")

// State describes a running local cluster, for the commands that act on it from another
// process (exec, down, node, kill-pod, operator). The up process writes it to DIR/state.json
// once it runs in its mount namespace and removes it when it has stopped everything.
type State struct {
	// Pid is the up process: the one in the cluster's mount namespace, which stops everything
	// on SIGTERM.
	Pid int `json:"pid"`
	// Dir is the cluster's folder, absolute.
	Dir string `json:"dir"`
	// Kubeconfig is the admin kubeconfig (written once the API server is ready).
	Kubeconfig string `json:"kubeconfig"`
	// KubeBinDir holds kubectl; EtcdBinDir holds etcdctl.
	KubeBinDir string `json:"kubeBinDir"`
	EtcdBinDir string `json:"etcdBinDir"`
	// Socket is the control socket (see ServeControl).
	Socket string `json:"socket"`
	// Runtime is RuntimeContainerd for the real-node lane (whose up process also has a
	// network namespace of its own, which exec enters), empty for the process nodes.
	Runtime string `json:"runtime,omitempty"`
	// Started is when the up process started.
	Started time.Time `json:"started"`
}

// StatePath returns the path of the state file of the cluster in dir.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// WriteState writes st to StatePath(st.Dir), replacing it atomically.
func WriteState(st *State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode the state: %w", err)
	}
	path := StatePath(st.Dir)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("failed to write the state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to write the state: %w", err)
	}
	return nil
}

// ReadState returns the state of the cluster running in dir, or an error wrapping
// ErrNotRunning when there is none (no state file, or its process is gone: a stale file left
// by a killed up process).
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(StatePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNotRunning, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read the state of the local cluster: %w", err)
	}
	st := &State{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", StatePath(dir), err)
	}
	if !Alive(st.Pid) {
		return nil, fmt.Errorf("%w in %s (process %d of %s is gone)", ErrNotRunning, dir, st.Pid, StatePath(dir))
	}
	return st, nil
}

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

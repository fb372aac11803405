package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process whose output goes to a log file. It runs in a process group of
// its own, so a Ctrl-C at the terminal reaches only the local cluster's foreground process,
// which then stops its children in order; and it is killed if the thread that started it dies,
// as a backstop when the parent itself is killed.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed

	stopOnce sync.Once
	stopping chan struct{}
}

// StartProcess starts bin with args, env appended to this process's environment, and its
// output written to logPath (truncated first when truncate is set, else appended).
func StartProcess(name, bin string, args, env []string, logPath string, truncate bool) (*Process, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if truncate {
		flags |= os.O_TRUNC
	}
	logf, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("failed to open the log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{}), stopping: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process exited; call it after Done is closed.
func (p *Process) Err() error { return p.err }

// Stopping reports whether Stop was called.
func (p *Process) Stopping() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and returns once the
// process has exited. It may be called more than once and concurrently.
func (p *Process) Stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		close(p.stopping)
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			<-p.done
		}
		// Anything the process left in its group (none of the components fork, but a pod
		// command might) goes too.
		_ = syscall.Kill(pgid, syscall.SIGKILL)
	})
	<-p.done
}

// ExitError describes an unexpected exit with the end of the process's log.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.Name, p.err, p.LogPath, TailFile(p.LogPath, 15))
}

// TailFile returns the last n lines of the file at path, or a note saying why it cannot.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.ReplaceAll(string(bytes.Join(lines, []byte("\n"))), "\n", "\n  ")
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago. Another
// process may take one before the caller binds it; the caller's start-up then fails and says so.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("failed to find a free port: %w", err)
		}
		// Held open until all are picked, so no port is handed out twice.
		defer l.Close()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("failed to find a free port: not a TCP address")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

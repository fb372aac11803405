package localcluster

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/controlplane"
)

// Bounds of the back-off between restarts of a crashing operator.
const (
	operatorBackoffMin = time.Second
	operatorBackoffMax = 30 * time.Second
	// operatorStopGrace is how long the operator may take to exit after SIGTERM.
	operatorStopGrace = 10 * time.Second
	// operatorHealthy is how long a run must last for the back-off to reset.
	operatorHealthy = time.Minute
)

// supervisor runs one process (the operator) and restarts it when it exits, with exponential
// back-off, while it is wanted. Tests stop and start it to check that the etcd clusters keep
// serving without their operator.
type supervisor struct {
	name    string
	bin     string
	args    []string
	env     []string
	extra   []string // added to env by start
	fresh   bool     // set by start: the next crash back-off starts over
	logPath string
	log     logr.Logger

	mu      sync.Mutex
	wanted  bool
	proc    *controlplane.Process
	wake    chan struct{}
	stopped chan struct{} // closed when run returns
}

func newSupervisor(name, bin string, args, env []string, logPath string, log logr.Logger) *supervisor {
	return &supervisor{name: name, bin: bin, args: args, env: env, logPath: logPath, log: log, wanted: true, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// run keeps the process running while wanted, until ctx ends; it then stops the process and
// returns.
func (s *supervisor) run(ctx context.Context) {
	defer close(s.stopped)
	backoff := operatorBackoffMin
	for {
		// The check and the start happen under the lock, so a concurrent stop either sees
		// the new process or keeps it from starting.
		s.mu.Lock()
		if !s.wanted {
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		if s.fresh {
			backoff, s.fresh = operatorBackoffMin, false
		}
		started := time.Now()
		p, err := controlplane.StartProcess(s.name, s.bin, s.args, append(append([]string(nil), s.env...), s.extra...), s.logPath, false)
		s.proc = p
		s.mu.Unlock()
		if err != nil {
			s.log.Error(err, "failed to start", "process", s.name)
		} else {
			s.log.Info("started", "process", s.name, "pid", p.Pid())
			select {
			case <-ctx.Done():
				p.Stop(operatorStopGrace)
				return
			case <-p.Done():
			}
			s.mu.Lock()
			s.proc = nil
			s.mu.Unlock()
			if p.Stopping() { // stopped on request: not a crash, no back-off
				s.log.Info("stopped on request", "process", s.name)
				continue
			}
			s.log.Error(p.Err(), "exited; restarting after back-off", "process", s.name, "backoff", backoff, "log", s.logPath)
		}
		if time.Since(started) > operatorHealthy {
			backoff = operatorBackoffMin
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, operatorBackoffMax)
	}
}

// stop stops the process and keeps it stopped until start. It returns once the process has
// exited.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.wanted = false
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.Stop(operatorStopGrace)
	}
	poke(s.wake)
}

// start lets the process run again (at once, without waiting out a back-off), with extra
// environment variables when extra is not nil.
func (s *supervisor) start(extra []string) {
	s.mu.Lock()
	if extra != nil {
		s.extra = extra
	}
	s.wanted, s.fresh = true, true
	s.mu.Unlock()
	poke(s.wake)
}

package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeKind names a probe as events and logs do.
type probeKind string

const (
	startupProbe   probeKind = "Startup"
	livenessProbe  probeKind = "Liveness"
	readinessProbe probeKind = "Readiness"
)

// probe runs c's probes for the run of p until ctx ends (p exits): the startup probe until it
// succeeds, then liveness and readiness side by side. A failed startup or liveness probe
// kills p; readiness results set the container's readiness.
func (w *podWorker) probe(ctx context.Context, pod *corev1.Pod, c *container, p *process, ip string) {
	spec := c.spec
	if spec.StartupProbe != nil {
		ok := w.probeLoop(ctx, pod, startupProbe, spec.StartupProbe, &spec, p, ip, false, func(ok bool) bool {
			if ok {
				w.setProbeResult(c, p, func() { c.started = true })
			}
			return true // stop either way: started, or killed
		})
		if !ok {
			return
		}
	}
	if spec.LivenessProbe != nil {
		go w.probeLoop(ctx, pod, livenessProbe, spec.LivenessProbe, &spec, p, ip, true, func(ok bool) bool {
			return !ok // a failure kills the process: nothing left to probe
		})
	}
	if spec.ReadinessProbe != nil {
		w.probeLoop(ctx, pod, readinessProbe, spec.ReadinessProbe, &spec, p, ip, false, func(ok bool) bool {
			w.setProbeResult(c, p, func() { c.probeReady = ok })
			return false
		})
	}
}

// setProbeResult applies set to c when p is still c's process, and wakes the worker.
func (w *podWorker) setProbeResult(c *container, p *process, set func()) {
	w.mu.Lock()
	current := c.proc == p
	if current {
		set()
	}
	w.mu.Unlock()
	if current {
		w.poke()
	}
}

// probeLoop runs probe every period from the process's start plus the initial delay, counting
// consecutive successes and failures. When a threshold is reached and the result differs from
// the last one (initially success when initiallyOK, else failure), it calls onResult, and
// stops when onResult returns true. A failed startup or liveness result kills the process
// first. It returns whether the last result was a success.
func (w *podWorker) probeLoop(ctx context.Context, pod *corev1.Pod, kind probeKind, pr *corev1.Probe, ctr *corev1.Container, p *process, ip string, initiallyOK bool, onResult func(ok bool) bool) bool {
	period := seconds(pr.PeriodSeconds, 10)
	if limit := w.n.cfg.MaxProbePeriod; limit > 0 && kind != livenessProbe {
		period = min(period, limit)
	}
	timeout := seconds(pr.TimeoutSeconds, 1)
	successThreshold := max(int(pr.SuccessThreshold), 1)
	failureThreshold := max(int(pr.FailureThreshold), 1)
	if kind != readinessProbe {
		successThreshold = 1 // the API requires it of startup and liveness probes
	}
	result := initiallyOK
	first := true
	successes, failures := 0, 0
	next := p.startedAt.Add(time.Duration(pr.InitialDelaySeconds) * time.Second)
	for {
		wait := time.Until(next)
		if wait < 0 {
			wait = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return result
		case <-t.C:
		}
		next = time.Now().Add(period)

		pctx, cancel := context.WithTimeout(ctx, timeout)
		ok, msg := w.runProbe(pctx, pr, ctr, p, ip)
		cancel()
		if ctx.Err() != nil {
			return result
		}
		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
			w.n.event(pod, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind, msg)
		}
		var changed bool
		switch {
		case ok && successes >= successThreshold && (!result || first):
			result, changed = true, true
		case !ok && failures >= failureThreshold && (result || first):
			result, changed = false, true
		}
		if !changed {
			continue
		}
		first = false
		w.log.V(1).Info("Probe result", "container", ctr.Name, "probe", kind, "success", result, "message", msg)
		if !result && kind != readinessProbe {
			grace := gracePeriod(pod, 0)
			if pr.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
			}
			w.n.event(pod, corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", ctr.Name, strings.ToLower(string(kind)))
			w.kill(p, grace, killedByProbe)
		}
		if onResult(result) {
			return result
		}
	}
}

func seconds(s int32, def int) time.Duration {
	if s <= 0 {
		s = int32(def)
	}
	return time.Duration(s) * time.Second
}

// runProbe runs one probe attempt within ctx and says whether it succeeded, and why not.
func (w *podWorker) runProbe(ctx context.Context, pr *corev1.Probe, ctr *corev1.Container, p *process, ip string) (bool, string) {
	switch {
	case pr.HTTPGet != nil:
		return httpProbe(ctx, pr.HTTPGet, ctr, ip)
	case pr.TCPSocket != nil:
		return tcpProbe(ctx, pr.TCPSocket, ctr, ip)
	case pr.Exec != nil:
		return w.execProbe(ctx, pr.Exec, p)
	default:
		return false, "the process node supports httpGet, tcpSocket and exec probes only"
	}
}

// probePort resolves a probe's port, by number or by the name of one of the container's
// ports.
func probePort(port intstr.IntOrString, ctr *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range ctr.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", ctr.Name, port.StrVal)
}

func httpProbe(ctx context.Context, g *corev1.HTTPGetAction, ctr *corev1.Container, ip string) (bool, string) {
	port, err := probePort(g.Port, ctr)
	if err != nil {
		return false, err.Error()
	}
	host := g.Host
	if host == "" {
		host = ip
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	if parsed, err := url.Parse(path); err == nil {
		u.Path, u.RawQuery = parsed.Path, parsed.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/etcd-pilot")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify probe certificates either
			Proxy:             nil,
		},
		// A redirect counts as success, as for the kubelet when it leaves the host.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, ""
	}
	return false, fmt.Sprintf("HTTP probe failed with statuscode: %d: %s", resp.StatusCode, bytes.TrimSpace(body))
}

func tcpProbe(ctx context.Context, s *corev1.TCPSocketAction, ctr *corev1.Container, ip string) (bool, string) {
	port, err := probePort(s.Port, ctr)
	if err != nil {
		return false, err.Error()
	}
	host := s.Host
	if host == "" {
		host = ip
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false, err.Error()
	}
	conn.Close()
	return true, ""
}

// execProbe runs the probe's command in the container's mount view, with its environment
// and working directory, and succeeds when it exits 0.
func (w *podWorker) execProbe(ctx context.Context, e *corev1.ExecAction, p *process) (bool, string) {
	if len(e.Command) == 0 {
		return false, "exec probe has no command"
	}
	argv := w.shimArgv(p.view, e.Command)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = p.env
	cmd.SysProcAttr = shimSysProcAttr()
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = time.Second
	cmd.Cancel = func() error {
		// The probe's whole process group, not only its first process.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	err := cmd.Run()
	if err == nil {
		return true, ""
	}
	if ctx.Err() != nil {
		return false, fmt.Sprintf("command timed out: %v", e.Command)
	}
	msg := strings.TrimSpace(out.String())
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return false, fmt.Sprintf("command %v failed: %v: %s", e.Command, err, msg)
}

// Package minio runs a real S3 server for tests: the MinIO server that hack/build-minio.sh
// builds into bin/minio (a test-only tool under AGPL-3.0; the operator never links it). Only
// tests import this package.
package minio

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

const (
	// startTimeout bounds how long the server may take to report ready.
	startTimeout = time.Minute
	// pollInterval is how often Start asks whether the server is ready.
	pollInterval = 50 * time.Millisecond
)

// Server is one running MinIO server with one empty bucket.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:<port> (or the host StartOn names).
	Endpoint string
	// AccessKey and SecretKey are the root user's credentials.
	AccessKey string
	SecretKey string
	// Bucket exists and is empty when Start returns.
	Bucket string
}

// Start runs bin/minio (or $MINIO) on free loopback ports with its data in a temporary folder,
// waits until it is ready, creates Server.Bucket, and stops the server when t's cleanup runs.
// It fails the test when the binary is missing: run `make tools` or hack/build-minio.sh.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1")
}

// StartOn is Start on free ports of host, a local address (the real-node lane's bridge, which
// its pods reach as a store outside the cluster).
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	bin := binary(t)
	s := &Server{AccessKey: "etcd-pilot-test", SecretKey: "etcd-pilot-test-secret", Bucket: "backups"}
	data := t.TempDir()

	// MinIO binds the ports itself, so a port found free here can be taken before it does: then
	// it exits, and we try again with other ports (any early exit is retried, twice).
	var p *proc
	var out *testutil.SyncBuffer
	for attempt := 1; ; attempt++ {
		addr, console := freeAddr(t, host), freeAddr(t, host)
		s.Endpoint = "http://" + addr
		out = &testutil.SyncBuffer{}
		cmd := exec.Command(bin, "server", data, "--address", addr, "--console-address", console, "--quiet")
		cmd.Env = append(os.Environ(),
			"MINIO_ROOT_USER="+s.AccessKey,
			"MINIO_ROOT_PASSWORD="+s.SecretKey,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"MINIO_CI_CD=1", // no terminal colors, no prompts
		)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var err error
		if p, err = startProc(cmd); err != nil {
			t.Fatalf("failed to start %s: %v", bin, err)
		}
		if err = waitReady(s.Endpoint, p); err == nil {
			break
		}
		exitedEarly := isDone(p.done)
		p.stop()
		if attempt == 3 || !exitedEarly {
			t.Fatalf("MinIO did not become ready at %s: %v\n%s", s.Endpoint, err, out.String())
		}
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("MinIO output:\n%s", out.String())
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if err := s.Client(t).MakeBucket(ctx, s.Bucket, miniogo.MakeBucketOptions{}); err != nil {
		t.Fatalf("failed to create bucket %s: %v", s.Bucket, err)
	}
	// The root user works before MinIO's IAM does: until it has loaded, a request with any
	// other key is answered "IAM sub-system not initialized yet" instead of access denied.
	stranger, err := miniogo.New(strings.TrimPrefix(s.Endpoint, "http://"), &miniogo.Options{
		Creds: credentials.NewStaticV4("iam-readiness-probe", "not-a-secret", ""),
	})
	if err != nil {
		t.Fatalf("failed to create a client for %s: %v", s.Endpoint, err)
	}
	for {
		_, err := stranger.BucketExists(ctx, s.Bucket)
		if err == nil || !strings.Contains(err.Error(), "not initialized") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("MinIO's IAM did not initialize at %s: %v", s.Endpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Client returns a minio-go client for the server with the root user's credentials, for what
// the code under test does not do itself (creating buckets, listing incomplete uploads).
func (s *Server) Client(t testing.TB) *miniogo.Client {
	t.Helper()
	c, err := miniogo.New(strings.TrimPrefix(s.Endpoint, "http://"), &miniogo.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
	})
	if err != nil {
		t.Fatalf("failed to create a client for %s: %v", s.Endpoint, err)
	}
	return c
}

// binary returns $MINIO, else <repository root>/bin/minio.
func binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MINIO"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("MINIO=%s: %v", p, err)
		}
		return p
	}
	p := filepath.Join(testutil.RepoRoot(t), "bin", "minio")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no MinIO server at %s (%v): run `make tools` or hack/build-minio.sh to build it, or set MINIO", p, err)
	}
	return p
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("failed to find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady polls MinIO's readiness endpoint until it answers 200, the process exits, or
// startTimeout passes.
func waitReady(endpoint string, p *proc) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		resp, err := client.Get(endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readiness: %s", resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("the server exited: %v", p.err)
		case <-time.After(pollInterval):
		}
	}
	return fmt.Errorf("not ready after %s: %w", startTimeout, last)
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// proc is a started server process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's, once done is closed
}

func startProc(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop ends the server's process group: SIGTERM, then SIGKILL if it has not exited in 10s.
func (p *proc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

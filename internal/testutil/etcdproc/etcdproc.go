// Package etcdproc runs real etcd processes for tests: the release binaries that
// hack/build-etcd.sh builds into bin/etcd/v<Version>/. Only tests import it.
package etcdproc

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Version is the etcd release the tests run (without the leading v).
const Version = "3.6.16"

const (
	// readyTimeout bounds how long a started etcd may take to report ready.
	readyTimeout = 30 * time.Second
	// pollInterval is how often Start asks whether etcd is ready.
	pollInterval = 50 * time.Millisecond
)

// Binary returns the path of one of etcd's release binaries (etcd, etcdctl, etcdutl) in
// bin/etcd/v<Version>; $ETCD overrides etcd's. It fails the test when the binary is missing:
// run `make tools` or hack/build-etcd.sh.
func Binary(t testing.TB, name string) string {
	t.Helper()
	bin := ""
	if name == "etcd" {
		bin = os.Getenv("ETCD")
	}
	if bin == "" {
		// This file is internal/testutil/etcdproc/etcdproc.go: the repository root is three up.
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "..", "bin", "etcd", "v"+Version, name)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s binary missing (%v): run hack/build-etcd.sh %s or make tools", name, err, Version)
	}
	return bin
}

// Start runs a real one-member etcd, named m0, with its data in a temporary folder and any
// extra flags, and returns its client URL. It listens on ip, a loopback address the caller
// gives no other test, at the fixed ports 2379 (client), 2380 (peer) and 2381 (metrics); it
// returns once /readyz answers and kills the process when t's cleanup runs.
func Start(t testing.TB, ip string, flags ...string) string {
	t.Helper()
	client := fmt.Sprintf("http://%s:2379", ip)
	peer := fmt.Sprintf("http://%s:2380", ip)
	metrics := fmt.Sprintf("http://%s:2381", ip)
	cmd := exec.Command(Binary(t, "etcd"), append([]string{
		"--name=m0", "--data-dir=" + t.TempDir(),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--listen-metrics-urls=" + metrics,
		"--initial-cluster=m0=" + peer, "--initial-cluster-state=new", "--log-level=error"}, flags...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Another etcd already on these addresses would answer the readiness check for this one,
	// and the test would run against a process it does not own.
	if conn, err := net.DialTimeout("tcp", ip+":2379", time.Second); err == nil {
		conn.Close()
		t.Fatalf("etcd's client address %s:2379 is already served by another process: another test (or a second copy of this one) uses %s", ip, ip)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start etcd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; exited <- nil })
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("etcd at %s exited before it was ready (another process on its addresses?): %v", client, err)
		default:
		}
		resp, err := http.Get(metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client
			}
		}
		time.Sleep(pollInterval)
	}
	t.Fatalf("etcd at %s did not become ready within %s", client, readyTimeout)
	return ""
}

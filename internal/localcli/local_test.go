package localcli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLocalFlagsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantPos []string
		wantDir string
	}{
		{args: []string{"stop", "local-node-1"}, wantPos: []string{"stop", "local-node-1"}, wantDir: ".local"},
		{args: []string{"stop", "local-node-1", "--dir", "/tmp/x"}, wantPos: []string{"stop", "local-node-1"}, wantDir: "/tmp/x"},
		{args: []string{"--dir=/tmp/x", "stop", "local-node-1"}, wantPos: []string{"stop", "local-node-1"}, wantDir: "/tmp/x"},
		{args: []string{"stop", "--dir", "/tmp/x", "local-node-1"}, wantPos: []string{"stop", "local-node-1"}, wantDir: "/tmp/x"},
	} {
		fs, dir := newLocalFlagSet("node", io.Discard)
		pos, err := localFlags(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.wantPos) || *dir != tc.wantDir {
			t.Errorf("localFlags(%q) = %q, dir %q, %v; want %q, dir %q", tc.args, pos, *dir, err, tc.wantPos, tc.wantDir)
		}
	}
	fs, _ := newLocalFlagSet("node", io.Discard)
	if _, err := localFlags(fs, []string{"stop", "--bogus"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
	fs, _ = newLocalFlagSet("node", io.Discard)
	if _, err := localFlags(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + 15},
	} {
		code, err := exitCode(exec.Command("sh", "-c", tc.script).Run())
		if err != nil || code != tc.want {
			t.Errorf("%s: got %d, %v; want %d", tc.script, code, err, tc.want)
		}
	}
	if _, err := exitCode(exec.Command("/nonexistent/command").Run()); err == nil {
		t.Error("a command that could not start gave no error")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{args: nil, wantCode: 2, wantErr: "Usage: etcd-pilot-local up|exec|down|node|kill-pod|apiserver|operator|image"},
		{args: []string{"bogus"}, wantCode: 2, wantErr: `unknown command "bogus"`},
		{args: []string{"local", "up"}, wantCode: 2, wantErr: `unknown command "local"`},
		{args: []string{"node", "reboot", "n1"}, wantCode: 1, wantErr: "usage: node stop|start NAME"},
		{args: []string{"operator"}, wantCode: 1, wantErr: "usage: operator stop|start"},
		{args: []string{"kill-pod"}, wantCode: 1, wantErr: "usage: kill-pod NAMESPACE/NAME"},
		{args: []string{"exec", "--dir", t.TempDir()}, wantCode: 1, wantErr: "name the command to run"},
		{args: []string{"exec", "--dir", t.TempDir(), "--", "true"}, wantCode: 1, wantErr: "no local cluster is running"},
		{args: []string{"up", "--dir", t.TempDir(), "--operator-binary", filepath.Join(t.TempDir(), "etcd-pilot")}, wantCode: 1, wantErr: "is missing: run make build"},
		{args: []string{"shim", "--bogus"}, wantCode: 127, wantErr: "shim"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, nil, &stdout, &stderr)
		if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.wantCode, tc.wantErr)
		}
	}
}

func TestOperatorBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "etcd-pilot-local")
	// Next to the local binary by default, as make build puts both into bin/.
	if _, err := operatorBinary("", exe); err == nil || !strings.Contains(err.Error(), "run make build") || !strings.Contains(err.Error(), filepath.Join(dir, "etcd-pilot")) {
		t.Errorf("a missing default operator binary: %v, want the path and \"run make build\"", err)
	}
	op := filepath.Join(dir, "etcd-pilot")
	if err := os.WriteFile(op, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := operatorBinary("", exe); err != nil || got != op {
		t.Errorf("the default operator binary: %q, %v; want %s", got, err, op)
	}
	// --operator-binary wins, and a relative path becomes absolute.
	other := filepath.Join(t.TempDir(), "my-operator")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := operatorBinary(other, exe); err != nil || got != other {
		t.Errorf("--operator-binary %s: %q, %v", other, got, err)
	}
	t.Chdir(filepath.Dir(other))
	if got, err := operatorBinary("my-operator", exe); err != nil || got != other {
		t.Errorf("--operator-binary my-operator: %q, %v; want %s", got, err, other)
	}
	if _, err := operatorBinary(filepath.Join(dir, "missing"), exe); err == nil || !strings.Contains(err.Error(), "is missing: run make build") {
		t.Errorf("a missing --operator-binary: %v", err)
	}
}

package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os/exec"
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

func TestLocalUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{args: []string{"local"}, wantCode: 2, wantErr: "Usage"},
		{args: []string{"local", "bogus"}, wantCode: 2, wantErr: `unknown command "local bogus"`},
		{args: []string{"local", "node", "reboot", "n1"}, wantCode: 1, wantErr: "usage: local node stop|start NAME"},
		{args: []string{"local", "operator"}, wantCode: 1, wantErr: "usage: local operator stop|start"},
		{args: []string{"local", "kill-pod"}, wantCode: 1, wantErr: "usage: local kill-pod NAMESPACE/NAME"},
		{args: []string{"local", "exec", "--dir", t.TempDir()}, wantCode: 1, wantErr: "name the command to run"},
		{args: []string{"local", "exec", "--dir", t.TempDir(), "--", "true"}, wantCode: 1, wantErr: "no local cluster is running"},
		{args: []string{"local", "shim", "--bogus"}, wantCode: 127, wantErr: "shim"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, nil, &stdout, &stderr)
		if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.wantCode, tc.wantErr)
		}
	}
}

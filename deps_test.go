package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// The local cluster is a binary of its own (cmd/etcd-pilot-local): the operator's binary, and
// so its image, must not link it, directly or through any package it imports.
func TestOperatorDoesNotLinkTheLocalCluster(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the operator's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps .: %v\n%s", err, stderr)
	}
	const module = "github.com/etcd-pilot/etcd-pilot"
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != module {
		t.Fatalf("go list -deps . did not end with the operator's main package %s: %q", module, deps)
	}
	for _, p := range deps {
		for _, banned := range []string{module + "/internal/localcluster", module + "/internal/localcli"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("the operator binary depends on %s; only cmd/etcd-pilot-local may", p)
			}
		}
	}
}

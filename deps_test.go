package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// The local cluster is a binary of its own (cmd/etcd-pilot-local): the operator's binary, and
// so its image, must not link it, directly or through any package it imports. Nor may it link
// the MinIO server (AGPL-3.0), which hack/build-minio.sh builds only for tests; its client
// module, github.com/minio/minio-go/v7 (Apache-2.0), is a different path and allowed.
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
	banned := []struct{ path, why string }{
		{module + "/internal/localcluster", "only cmd/etcd-pilot-local may"},
		{module + "/internal/localcli", "only cmd/etcd-pilot-local may"},
		{"github.com/minio/minio", "the MinIO server is AGPL-3.0 and a test-only tool"},
		{"github.com/cert-manager/cert-manager", "cert-manager builds only in its tools module (hack/tools/certmanager, older k8s.io modules); the operator speaks to its Certificates unstructured"},
	}
	for _, p := range deps {
		for _, b := range banned {
			if p == b.path || strings.HasPrefix(p, b.path+"/") {
				t.Errorf("the operator binary depends on %s; %s", p, b.why)
			}
		}
	}
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

func TestSplitImage(t *testing.T) {
	for _, c := range []struct{ image, repo, tag, digest string }{
		{"etcd-pilot:0.1.0", "etcd-pilot", "0.1.0", ""},
		{"team/etcd-pilot:v1", "team/etcd-pilot", "v1", ""},
		{"mirror:5000/team/etcd-pilot:v1", "mirror:5000/team/etcd-pilot", "v1", ""},
		{"mirror:5000/etcd-pilot@sha256:abc", "mirror:5000/etcd-pilot", "", "sha256:abc"},
		{"etcd-pilot:v1@sha256:abc", "etcd-pilot", "v1", "sha256:abc"},
	} {
		repo, tag, digest, err := splitImage(c.image)
		if err != nil || repo != c.repo || tag != c.tag || digest != c.digest {
			t.Errorf("splitImage(%q) = %q %q %q %v", c.image, repo, tag, digest, err)
		}
	}
	for _, bad := range []string{"etcd-pilot", "mirror:5000/etcd-pilot", ":v1"} {
		if _, _, _, err := splitImage(bad); err == nil {
			t.Errorf("splitImage(%q) accepts an image without a tag or digest", bad)
		}
	}
}

// kubectl returns the kubectl that hack/build-kube.sh builds (it builds it on first use).
func kubectl(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "build-kube.sh"), "kubectl")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-kube.sh kubectl: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kubectl")
}

// The manifests are config/'s, built by kustomize, with the operator's image and
// --agent-image set to the one asked for; the committed config/ is left as it was.
func TestRunBuildsTheManifests(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(root, "config")
	before, err := os.ReadFile(filepath.Join(config, "manager", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	const image = "mirror:5000/team/etcd-pilot:v1.2.3"
	if err := run(options{config: config, kubectl: kubectl(t, root), image: image, version: "v1.2.3", out: out}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(config, "manager", "kustomization.yaml"))
	if !bytes.Equal(before, after) {
		t.Error("run changed config/manager/kustomization.yaml")
	}
	for _, m := range manifests {
		b, err := os.ReadFile(filepath.Join(out, m.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "# etcd-pilot v1.2.3: ") {
			t.Errorf("%s starts with %q", m.file, strings.SplitN(string(b), "\n", 2)[0])
		}
		kinds := map[string]int{}
		var d appsv1.Deployment
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", m.file, err)
			}
			kinds[meta.Kind]++
			if meta.Kind == "Deployment" {
				if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, k := range []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Service", "Deployment"} {
			if kinds[k] == 0 {
				t.Errorf("%s has no %s: %v", m.file, k, kinds)
			}
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.Image != image || !slices.Contains(c.Args, "--agent-image="+image) {
			t.Errorf("%s: image %s, args %q", m.file, c.Image, c.Args)
		}
		if namespaced := slices.Contains(c.Args, "--watch-namespace=$(POD_NAMESPACE)"); namespaced != (m.overlay == "namespaced") {
			t.Errorf("%s: --watch-namespace %v", m.file, namespaced)
		}
	}
}

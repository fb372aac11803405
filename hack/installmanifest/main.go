// Command installmanifest writes etcd-pilot's versioned install manifests: config/default as
// install.yaml and config/namespaced as install-namespaced.yaml, built by kustomize (kubectl's,
// the one `kubectl apply -k` runs) with the operator's image set to -image, as
// `kustomize edit set image` would set it in config/manager. The Deployment's --agent-image
// follows the image through config/manager's replacement. `make install-manifest` runs it.
//
// Usage: go run ./hack/installmanifest -kubectl bin/k8s/v1.37.1/kubectl -image REPO:TAG -version V -o dist
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// operatorImageName is the image name config/manager/kustomization.yaml's images: entry
// replaces (the name in manager.yaml).
const operatorImageName = "etcd-pilot"

// manifests are the kustomizations built, by output file name.
var manifests = []struct{ file, overlay string }{
	{"install.yaml", "default"},
	{"install-namespaced.yaml", "namespaced"},
}

func main() {
	var o options
	flag.StringVar(&o.config, "config", "config", "the kustomize folder (the repository's config/)")
	flag.StringVar(&o.kubectl, "kubectl", "kubectl", "the kubectl binary whose kustomize builds the manifests")
	flag.StringVar(&o.image, "image", "", "the operator's image, REPOSITORY[:TAG][@DIGEST]")
	flag.StringVar(&o.version, "version", "", "the version, written in the manifests' header")
	flag.StringVar(&o.out, "o", "dist", "the output folder")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "installmanifest:", err)
		os.Exit(1)
	}
}

type options struct {
	config, kubectl, image, version, out string
}

// run builds every manifest into o.out and returns the paths written.
func run(o options) error {
	if o.image == "" || o.version == "" {
		return errors.New("-image and -version are required")
	}
	repo, tag, digest, err := splitImage(o.image)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "installmanifest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Edit a copy: the committed config/ keeps the image the local cluster runs.
	cfg := filepath.Join(tmp, "config")
	if err := os.CopyFS(cfg, os.DirFS(o.config)); err != nil {
		return fmt.Errorf("failed to copy %s: %w", o.config, err)
	}
	if err := setImage(filepath.Join(cfg, "manager", "kustomization.yaml"), repo, tag, digest); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for _, m := range manifests {
		cmd := exec.Command(o.kubectl, "kustomize", filepath.Join(cfg, m.overlay))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		built, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("failed to build config/%s with %s kustomize: %w: %s", m.overlay, o.kubectl, err, strings.TrimSpace(stderr.String()))
		}
		if err := checkImage(built, o.image); err != nil {
			return fmt.Errorf("config/%s: %w", m.overlay, err)
		}
		header := fmt.Sprintf("# etcd-pilot %s: built from config/%s with the image %s.\n# kubectl apply --server-side -f %s\n", o.version, m.overlay, o.image, m.file)
		if err := os.WriteFile(filepath.Join(o.out, m.file), append([]byte(header), built...), 0o644); err != nil {
			return err
		}
		fmt.Println(filepath.Join(o.out, m.file))
	}
	return nil
}

// splitImage splits REPOSITORY[:TAG][@DIGEST]; a port in the repository's host is no tag.
func splitImage(image string) (repo, tag, digest string, err error) {
	repo = image
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo, digest = repo[:i], repo[i+1:]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo, tag = repo[:i], repo[i+1:]
	}
	if repo == "" || (tag == "" && digest == "") {
		return "", "", "", fmt.Errorf("image %q needs a repository and a tag or digest", image)
	}
	return repo, tag, digest, nil
}

// setImage sets the operator's entry of the images: list of the kustomization at path, as
// `kustomize edit set image etcd-pilot=IMAGE` does.
func setImage(path, repo, tag, digest string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	k := map[string]any{}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("failed to parse %s: %w", path, err)
	}
	images, _ := k["images"].([]any)
	found := false
	for _, e := range images {
		m, ok := e.(map[string]any)
		if !ok || m["name"] != operatorImageName {
			continue
		}
		found = true
		delete(m, "newTag")
		delete(m, "digest")
		m["newName"] = repo
		if tag != "" {
			m["newTag"] = tag
		}
		if digest != "" {
			m["digest"] = digest
		}
	}
	if !found {
		return fmt.Errorf("%s has no images: entry named %s to set", path, operatorImageName)
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// checkImage fails unless the operator's Deployment in the built stream runs image and hands
// it to backup pods (--agent-image).
func checkImage(stream []byte, image string) error {
	for _, doc := range strings.Split(string(stream), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "manager" {
				continue
			}
			if c.Image != image {
				return fmt.Errorf("the Deployment runs %s, not %s", c.Image, image)
			}
			for _, a := range c.Args {
				if a == "--agent-image="+image {
					return nil
				}
			}
			return fmt.Errorf("the Deployment's args %q do not hand %s to backup pods (--agent-image)", c.Args, image)
		}
	}
	return errors.New("no Deployment with a manager container")
}

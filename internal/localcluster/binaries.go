package localcluster

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modulePath is the module whose go.mod marks the repository root (the hack/tools modules
// have go.mod files of their own).
const modulePath = "github.com/etcd-pilot/etcd-pilot"

// Versions of the binaries the local cluster runs.
const (
	// KubeVersion is the Kubernetes release hack/build-kube.sh builds.
	KubeVersion = "v1.37.1"
	// EtcdVersion is the etcd release of the API server's store and of etcdctl on the PATH of
	// `local exec`. Pods may run any etcd release built into bin/etcd.
	EtcdVersion = "3.6.16"
)

// kubeComponents are the Kubernetes binaries the local cluster needs.
var kubeComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// Binaries are the folders of the binaries the local cluster runs.
type Binaries struct {
	// Root is the repository root: hack/ builds, config/crd/bases holds the CRDs.
	Root string
	// Kube holds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.
	Kube string
	// Etcd holds etcd, etcdctl and etcdutl of EtcdVersion.
	Etcd string
	// EtcdRoot holds one folder per etcd release, v<version>, which pods' images map to.
	EtcdRoot string
}

// FindRoot returns the repository root: the first folder holding the module's go.mod, walking
// up from each of dirs in turn (callers pass the working directory and the executable's).
func FindRoot(dirs ...string) (string, error) {
	for _, start := range dirs {
		if start == "" {
			continue
		}
		for dir := start; ; {
			if declaresModule(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("failed to find the etcd-pilot repository (a go.mod of module %s) above %s; run etcd-pilot from a clone", modulePath, strings.Join(dirs, " or "))
}

func declaresModule(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// LocateBinaries returns the binary folders under root without building anything.
func LocateBinaries(root string) Binaries {
	return Binaries{
		Root:     root,
		Kube:     filepath.Join(root, "bin", "k8s", KubeVersion),
		Etcd:     filepath.Join(root, "bin", "etcd", "v"+EtcdVersion),
		EtcdRoot: filepath.Join(root, "bin", "etcd"),
	}
}

// EnsureBinaries builds what is missing of the Kubernetes components and etcd EtcdVersion
// with the repository's hack scripts (cached: present binaries are not rebuilt). The scripts'
// progress goes to progress.
func EnsureBinaries(root string, progress io.Writer) (Binaries, error) {
	b := LocateBinaries(root)
	if err := runScript(root, progress, b.Kube, "hack/build-kube.sh", kubeComponents...); err != nil {
		return b, err
	}
	if err := runScript(root, progress, b.Etcd, "hack/build-etcd.sh", EtcdVersion); err != nil {
		return b, err
	}
	return b, nil
}

// runScript runs a build script that prints its output folder, and checks it printed want.
func runScript(root string, progress io.Writer, want, script string, args ...string) error {
	cmd := exec.Command(filepath.Join(root, script), args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failed to build with %s %s: %w", script, strings.Join(args, " "), err)
	}
	if got := strings.TrimSpace(out.String()); got != want {
		return fmt.Errorf("%s built into %s, want %s", script, got, want)
	}
	return nil
}

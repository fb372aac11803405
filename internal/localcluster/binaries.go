package localcluster

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/internal/repo"
)

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

// FindRoot returns the repository root; see repo.FindRoot.
func FindRoot(dirs ...string) (string, error) { return repo.FindRoot(dirs...) }

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

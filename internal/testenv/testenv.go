package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	etcdpilotv1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/repo"
)

const (
	// A slow 2-core machine running a test binary in parallel with others can take well
	// over envtest's default 20s to bring kube-apiserver up.
	controlPlaneStartTimeout = 2 * time.Minute
	controlPlaneStopTimeout  = time.Minute
	// namespaceDeleteTimeout bounds the cleanup of a test's namespace.
	namespaceDeleteTimeout = 30 * time.Second
)

// Env is a running envtest control plane with the etcd-pilot CRDs installed.
type Env struct {
	// Config connects to the API server as a cluster admin.
	Config *rest.Config
	// Scheme holds the client-go kinds and etcd-pilot's v1alpha1 kinds.
	Scheme *runtime.Scheme
	// Client is an uncached controller-runtime client using Scheme: reads see the API
	// server's state at once.
	Client client.Client

	env *envtest.Environment
}

// Start starts kube-apiserver and etcd with envtest and installs the CRDs of
// <repo root>/config/crd/bases. The repository root is found by walking up from the working
// directory to the repository's go.mod, so Start works from any package's test binary.
//
// The binaries come from $KUBEBUILDER_ASSETS if it is set, else from <repo root>/bin/envtest;
// when neither holds kube-apiserver and etcd, Start returns an error saying how to build them.
// The caller must call Stop when done, also after a failed test run, or the processes leak.
func Start() (*Env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root)
	if err != nil {
		return nil, err
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("failed to add client-go kinds to the scheme: %w", err)
	}
	if err := etcdpilotv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("failed to add etcd-pilot kinds to the scheme: %w", err)
	}

	env := &envtest.Environment{
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: controlPlaneStartTimeout,
		ControlPlaneStopTimeout:  controlPlaneStopTimeout,
	}
	cfg, err := env.Start()
	if err != nil {
		// Start can fail after some processes came up (for example while installing CRDs).
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("failed to stop the partly started control plane: %w", stopErr))
		}
		return nil, fmt.Errorf("failed to start the envtest control plane (assets %s): %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("failed to create a client: %w", err), env.Stop())
	}
	return &Env{Config: cfg, Scheme: scheme, Client: c, env: env}, nil
}

// Stop stops the control plane. The Env must not be used afterwards.
func (e *Env) Stop() error {
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("failed to stop the envtest control plane: %w", err)
	}
	return nil
}

// Namespace creates a namespace for the calling test, named after t.Name() plus a random
// suffix (so parallel tests and -count=N runs never share one), and deletes it when the test
// ends. envtest runs no namespace controller, so the namespace and its objects linger in the
// Terminating phase until the control plane stops; tests must not rely on their removal.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())}}
	ctx, cancel := context.WithTimeout(context.Background(), namespaceDeleteTimeout)
	defer cancel()
	if err := e.Client.Create(ctx, ns); err != nil {
		t.Fatalf("failed to create a namespace for %s: %v", t.Name(), err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), namespaceDeleteTimeout)
		defer cancel()
		if err := e.Client.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("failed to delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// generatedSuffixLen is the length of the random suffix the API server appends to a
// GenerateName.
const generatedSuffixLen = 5

// namespacePrefix turns a test name into a GenerateName prefix: lower case, runs of anything
// outside [a-z0-9] folded into one '-', short enough that prefix+suffix fits DNS-1123's 63
// characters, ending in '-' before the suffix.
func namespacePrefix(testName string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	base := b.String()
	const maxBase = 63 - generatedSuffixLen - 1 // room for "-" and the suffix
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	base = strings.Trim(base, "-")
	if base == "" {
		base = "test"
	}
	return base + "-"
}

// repoRoot finds the repository root from the working directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("failed to get the working directory: %w", err)
	}
	return repo.FindRoot(wd)
}

// assetsDir picks the folder holding kube-apiserver and etcd: $KUBEBUILDER_ASSETS when set
// (envtest itself prefers it over any other folder), else <root>/bin/envtest.
func assetsDir(root string) (string, error) {
	const hint = "run `make envtest-assets` (hack/envtest-assets.sh builds kube-apiserver and etcd from source) " +
		"and set KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh), or leave KUBEBUILDER_ASSETS unset to use bin/envtest"
	if dir, ok := os.LookupEnv("KUBEBUILDER_ASSETS"); ok {
		if missing := missingBinaries(dir); len(missing) > 0 {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%q lacks %s: %s", dir, strings.Join(missing, " and "), hint)
		}
		return dir, nil
	}
	dir := filepath.Join(root, "bin", "envtest")
	if missing := missingBinaries(dir); len(missing) > 0 {
		return "", fmt.Errorf("envtest binaries not found: %s lacks %s and KUBEBUILDER_ASSETS is unset: %s",
			dir, strings.Join(missing, " and "), hint)
	}
	return dir, nil
}

// missingBinaries lists which of the control-plane binaries dir lacks (following symlinks).
func missingBinaries(dir string) []string {
	var missing []string
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	return missing
}

// Package testutil holds the helpers several test suites share: polling until a condition
// holds, golden files, and the EtcdCluster fixtures of charts/testdata/fixtures. Only tests
// import it.
package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 100 * time.Millisecond

// Eventually polls cond until it returns nil, and fails the test with cond's last error when
// timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(PollInterval)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}

// Golden compares got with the golden file at path, or rewrites the file when update is set.
// regenerate is the command that rewrites it, named in the failure.
func Golden(t testing.TB, path string, got []byte, update bool, regenerate string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s to create it)", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run %s if the change is intended)\n--- got\n%s\n--- want\n%s", path, regenerate, got, want)
	}
}

// Fixture is one EtcdCluster of charts/testdata/fixtures.
type Fixture struct {
	// Name is the file name without .yaml.
	Name    string
	Cluster *v1alpha1.EtcdCluster
}

// Fixtures reads every fixture in dir (charts/testdata/fixtures), sorted by name, decoded
// strictly so a misspelled field fails the test instead of silently falling back to a default.
func Fixtures(t testing.TB, dir string) []Fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures in %s", dir)
	}
	sort.Strings(paths)
	var out []Fixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c := &v1alpha1.EtcdCluster{}
		if err := yaml.UnmarshalStrict(data, c); err != nil {
			t.Fatalf("failed to decode fixture %s: %v", p, err)
		}
		out = append(out, Fixture{Name: strings.TrimSuffix(filepath.Base(p), ".yaml"), Cluster: c})
	}
	return out
}

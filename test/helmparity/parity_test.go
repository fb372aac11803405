// Package helmparity checks that the operator's in-process render of the etcd-cluster chart
// gives the same objects as `helm template` with the Helm CLI of the release the charts package
// links, for the values the operator computes. A platform team that runs the chart with Helm
// gets what the operator would apply.
package helmparity

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// helmVersion is the Helm release that hack/build-helm.sh builds; keep it in step with the
// helm.sh/helm/v3 requirement in go.mod.
const helmVersion = "v3.22.0"

// repoRoot returns the repository's root: this package is at test/helmparity.
func repoRoot(t *testing.T) string { return testutil.RepoRoot(t) }

// helmBinary returns the Helm CLI: $HELM, else bin/helm/<version>/helm, built with
// hack/build-helm.sh when it is missing.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HELM=%s: %v", p, err)
		}
		return p
	}
	p := filepath.Join(root, "bin", "helm", helmVersion, "helm")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	script := filepath.Join(root, "hack", "build-helm.sh")
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("no helm at %s and no %s: run make tools, or set HELM", p, script)
	}
	t.Logf("building helm %s with %s (first use only; a few minutes)", helmVersion, script)
	cmd := exec.CommandContext(t.Context(), script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("failed to build helm with %s: %v (run make tools, or set HELM)", script, err)
	}
	if built := strings.TrimSpace(string(out)); built != "" {
		p = built
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s did not produce %s: %v", script, p, err)
	}
	return p
}

type fixture struct {
	name    string
	cluster *v1alpha1.EtcdCluster
}

func loadFixtures(t *testing.T, root string) []fixture {
	t.Helper()
	var out []fixture
	for _, f := range testutil.Fixtures(t, filepath.Join(root, "charts", "testdata", "fixtures")) {
		out = append(out, fixture{name: f.Name, cluster: f.Cluster})
	}
	return out
}

func TestHelmTemplateParity(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	chartDir := filepath.Join(root, "charts", charts.ChartDir)
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}

	// Keep Helm away from the user's configuration and caches.
	home := t.TempDir()
	env := append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
	)

	for _, f := range loadFixtures(t, root) {
		t.Run(f.name, func(t *testing.T) {
			vals, err := values.Compute(f.cluster, values.DefaultOperator())
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			b, err := yaml.Marshal(vals)
			if err != nil {
				t.Fatal(err)
			}
			valuesFile := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(valuesFile, b, 0o600); err != nil {
				t.Fatal(err)
			}

			cmd := exec.CommandContext(t.Context(), helm, "template", f.cluster.Name, chartDir,
				"-n", f.cluster.Namespace, "-f", valuesFile)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr.String())
			}
			fromHelm, err := decode(out)
			if err != nil {
				t.Fatalf("failed to decode the output of helm template: %v\n%s", err, out)
			}

			rendered, err := r.Render(charts.Release{Name: f.cluster.Name, Namespace: f.cluster.Namespace}, vals)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			fromRenderer, err := byKey(rendered)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			compare(t, fromHelm, fromRenderer)
		})
	}
}

// TestHelmTemplateParityChartAlone renders the plain values files of charts/testdata/values
// (the chart without the operator) with the Helm CLI and the renderer: `helm template` alone
// accepts them (schema included) and gives the same objects.
func TestHelmTemplateParityChartAlone(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	chartDir := filepath.Join(root, "charts", charts.ChartDir)
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
	)
	paths, err := filepath.Glob(filepath.Join(root, "charts", "testdata", "values", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no values files in charts/testdata/values: %v", err)
	}
	rel := charts.Release{Name: "etcd", Namespace: "db"}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".yaml"), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), helm, "template", rel.Name, chartDir, "-n", rel.Namespace, "-f", p)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr.String())
			}
			fromHelm, err := decode(out)
			if err != nil {
				t.Fatalf("failed to decode the output of helm template: %v\n%s", err, out)
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			vals := map[string]any{}
			if err := yaml.Unmarshal(data, &vals); err != nil {
				t.Fatal(err)
			}
			rendered, err := r.Render(rel, vals)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			fromRenderer, err := byKey(rendered)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if _, ok := fromHelm["NetworkPolicy/"+rel.Namespace+"/"+rel.Name]; !ok && strings.Contains(string(data), "networkPolicy:") {
				t.Errorf("helm template rendered no NetworkPolicy for %s", p)
			}
			compare(t, fromHelm, fromRenderer)
		})
	}
}

// decode parses helm's output with the same kubectl-style decoder the charts package uses,
// dropping empty documents (Helm's "# Source:" comments are not data).
func decode(stream []byte) (map[string]*unstructured.Unstructured, error) {
	objs, err := charts.DecodeManifests(string(stream))
	if err != nil {
		return nil, err
	}
	return byKey(objs)
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

func byKey(objs []*unstructured.Unstructured) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		k := key(o)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("two objects %s", k)
		}
		out[k] = o
	}
	return out, nil
}

func compare(t *testing.T, helm, renderer map[string]*unstructured.Unstructured) {
	t.Helper()
	keys := map[string]bool{}
	for k := range helm {
		keys[k] = true
	}
	for k := range renderer {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		h, r := helm[k], renderer[k]
		switch {
		case h == nil:
			t.Errorf("%s: rendered by the operator, not by helm template", k)
		case r == nil:
			t.Errorf("%s: rendered by helm template, not by the operator", k)
		case !reflect.DeepEqual(h.Object, r.Object):
			t.Errorf("%s differs (- helm template, + operator):\n%s", k, diff(t, h.Object, r.Object))
		}
	}
}

// diff is a unified diff of two objects as YAML. Where the YAML is the same but the objects
// differ, the difference is in Go types (an int64 against a float64): it prints both with
// their types.
func diff(t *testing.T, a, b map[string]any) string {
	t.Helper()
	ay, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	by, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ay, by) {
		return fmt.Sprintf("same YAML, different Go values:\n%#v\n%#v", a, b)
	}
	s, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(ay)), B: difflib.SplitLines(string(by)),
		FromFile: "helm template", ToFile: "operator", Context: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

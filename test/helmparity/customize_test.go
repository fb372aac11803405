package helmparity

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// helmResult runs the Helm CLI and returns its output (standard output and error) and its
// error, for the tests that expect a refusal.
func helmResult(t *testing.T, helm string, env []string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), helm, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

func writeValues(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHelmLintClusterChartValues runs `helm lint --strict` on the cluster's chart with every
// fixture's computed values and every chart-alone values file: no errors, no warnings.
func TestHelmLintClusterChartValues(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	chartDir := filepath.Join(root, "charts", charts.ChartDir)
	env := helmEnv(t)
	for _, f := range loadFixtures(t, root) {
		t.Run(f.name, func(t *testing.T) {
			vals, err := values.Compute(f.cluster, values.DefaultOperator())
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if out, err := helmResult(t, helm, env, "lint", "--strict", chartDir, "-n", f.cluster.Namespace, "-f", writeValues(t, vals)); err != nil {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
		})
	}
	paths, err := filepath.Glob(filepath.Join(root, "charts", "testdata", "values", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no values files in charts/testdata/values: %v", err)
	}
	for _, p := range paths {
		t.Run("alone/"+strings.TrimSuffix(filepath.Base(p), ".yaml"), func(t *testing.T) {
			if out, err := helmResult(t, helm, env, "lint", "--strict", chartDir, "-f", p); err != nil {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestHelmRefusesLikeTheRenderer: values outside the restricted Pod Security profile and
// ETCD_ variables are refused by `helm template` too, with the same message.
func TestHelmRefusesLikeTheRenderer(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	chartDir := filepath.Join(root, "charts", charts.ChartDir)
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	env := helmEnv(t)
	for name, c := range map[string]struct {
		values map[string]any
		want   string
	}{
		"privileged": {map[string]any{"containerSecurityContext": map[string]any{"privileged": true}},
			"at '/containerSecurityContext/privileged': value must be false"},
		"hostPath": {map[string]any{"extraVolumes": []any{map[string]any{"name": "h", "hostPath": map[string]any{"path": "/"}}}},
			"at '/extraVolumes/0/hostPath': value must be 'absent: the restricted Pod Security profile forbids hostPath volumes'"},
		"ETCD_ env": {map[string]any{"extraEnv": []any{map[string]any{"name": "ETCD_NAME", "value": "x"}}},
			"at '/extraEnv/0/name': value must be 'a name that does not start with ETCD_"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helmResult(t, helm, env, "template", "etcd", chartDir, "-f", writeValues(t, c.values))
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("helm template: %v, output:\n%s\nwant a refusal with %q", err, out, c.want)
			}
			if _, err := r.Render(charts.Release{Name: "etcd", Namespace: "default"}, c.values); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Render: %v, want a refusal with %q", err, c.want)
			}
		})
	}
}

// TestHelmTemplateParitySubchart renders a parent chart with etcd-cluster as a dependency and
// global values (charts.TestSubchart checks what they do) with the Helm CLI and the renderer.
func TestHelmTemplateParitySubchart(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "Chart.yaml"), []byte("apiVersion: v2\nname: platform\nversion: 1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parentValues := `global:
  imageRegistry: mirror.example.com
  imagePullSecrets: [mirror-pull]
  commonLabels: {team: storage}
  commonAnnotations: {owner: platform@example.com}
  somethingElse: {for: another subchart}
etcd-cluster:
  replicas: 5
  imagePullSecrets: [{name: etcd-pull}]
  monitoring: {podMonitor: {enabled: true}}
`
	if err := os.WriteFile(filepath.Join(parent, "values.yaml"), []byte(parentValues), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(parent, "charts", charts.ChartDir), os.DirFS(filepath.Join(root, "charts", charts.ChartDir))); err != nil {
		t.Fatal(err)
	}
	rel := charts.Release{Name: "etcd", Namespace: "db"}
	out, err := helmResult(t, helm, helmEnv(t), "template", rel.Name, parent, "-n", rel.Namespace)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	fromHelm, err := decode(out)
	if err != nil {
		t.Fatalf("failed to decode the output of helm template: %v\n%s", err, out)
	}
	r, err := charts.FromDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := r.Render(rel, nil)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	fromRenderer, err := byKey(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fromHelm["PodMonitor/db/etcd"]; !ok {
		t.Errorf("helm template rendered no PodMonitor from the parent's values")
	}
	compare(t, fromHelm, fromRenderer)
}

package helmparity

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

// helmEnv keeps the Helm CLI away from the user's configuration, caches and clusters.
func helmEnv(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	return append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
	)
}

// runHelm runs the Helm CLI and returns its standard output; it fails the test on an error.
func runHelm(t *testing.T, helm string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), helm, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// operatorChartCases are value sets of charts/etcd-pilot that lint and template cleanly.
var operatorChartCases = []struct {
	name string
	set  []string
}{
	{name: "defaults"},
	{name: "namespaced", set: []string{"namespaced=true"}},
	{name: "monitoring", set: []string{"metrics.serviceMonitor.enabled=true", "rbac.metricsReader.subjects[0].name=prometheus", "rbac.metricsReader.subjects[0].namespace=monitoring"}},
	{name: "insecure-metrics", set: []string{"metrics.secure=false", "metrics.serviceMonitor.enabled=true"}},
	{name: "custom", set: []string{"image.repository=mirror/etcd-pilot", "image.tag=v9", "replicaCount=1", "leaderElection.enabled=false", "serviceAccount.create=false", "serviceAccount.name=existing", "rbac.userRoles=false", "extraArgs[0]=--etcd-timeout=5s"}},
}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// Both charts pass `helm lint --strict` with the real Helm CLI: the cluster's chart with its
// defaults, the operator's with each value set.
func TestHelmLintBothCharts(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	env := helmEnv(t)
	runHelm(t, helm, env, "lint", "--strict", filepath.Join(root, "charts", charts.ChartDir))
	for _, c := range operatorChartCases {
		t.Run(c.name, func(t *testing.T) {
			out := runHelm(t, helm, env, append([]string{"lint", "--strict", filepath.Join(root, "charts", "etcd-pilot")}, setArgs(c.set)...)...)
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// `helm template` of the operator's chart gives what Helm's engine in-process gives for the
// same values (the charts package's tests hold that render to config/), and with
// --include-crds the CRDs of config/crd/bases.
func TestOperatorChartHelmTemplateParity(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	env := helmEnv(t)
	chartDir := filepath.Join(root, "charts", "etcd-pilot")
	c, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	const release, namespace = "pilot", "ops"
	for _, tc := range operatorChartCases {
		t.Run(tc.name, func(t *testing.T) {
			out := runHelm(t, helm, env, append([]string{"template", release, chartDir, "-n", namespace}, setArgs(tc.set)...)...)
			fromHelm, err := decode(out)
			if err != nil {
				t.Fatalf("failed to decode the output of helm template: %v\n%s", err, out)
			}

			vals := map[string]any{}
			for _, s := range tc.set {
				if err := charts.ParseSet(s, vals); err != nil {
					t.Fatal(err)
				}
			}
			top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			files, err := engine.Render(c, top)
			if err != nil {
				t.Fatal(err)
			}
			for name := range files {
				if strings.HasSuffix(name, "NOTES.txt") {
					delete(files, name)
				}
			}
			_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
			if err != nil {
				t.Fatal(err)
			}
			var objs []*unstructured.Unstructured
			for _, m := range manifests {
				o, err := charts.DecodeManifests(m.Content)
				if err != nil {
					t.Fatal(err)
				}
				objs = append(objs, o...)
			}
			fromEngine, err := byKey(objs)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, fromHelm, fromEngine)
		})
	}

	t.Run("crds", func(t *testing.T) {
		out := runHelm(t, helm, env, "template", release, chartDir, "-n", namespace, "--include-crds")
		objs, err := charts.DecodeManifests(string(out))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				got[o.GetName()] = o
			}
		}
		paths, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no CRDs in config/crd/bases: %v", err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			w, err := charts.DecodeManifests(string(b))
			if err != nil || len(w) != 1 {
				t.Fatalf("%s: %v", p, err)
			}
			g, ok := got[w[0].GetName()]
			if !ok {
				t.Errorf("helm template --include-crds renders no CRD %s", w[0].GetName())
				continue
			}
			compare(t, map[string]*unstructured.Unstructured{"crd": g}, map[string]*unstructured.Unstructured{"crd": w[0]})
		}
		if len(got) != len(paths) {
			t.Errorf("helm template --include-crds renders %d CRDs, config/crd/bases holds %d", len(got), len(paths))
		}
	})
}

// The cluster's chart renders with its defaults through the Helm CLI (the other tests of this
// package compare it with the operator's render).
func TestClusterChartHelmTemplate(t *testing.T) {
	root := repoRoot(t)
	out := runHelm(t, helmBinary(t, root), helmEnv(t), "template", "etcd", filepath.Join(root, "charts", charts.ChartDir), "-n", "db")
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := objs["StatefulSet/db/etcd"]; !ok {
		t.Errorf("helm template of the cluster's chart renders no StatefulSet: %v", objs)
	}
}

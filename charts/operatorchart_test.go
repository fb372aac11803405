package charts_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

// The operator's own chart, charts/etcd-pilot, installs what config/ installs. These tests
// render it with Helm's engine (as `helm template` does) and hold it to config/: the same
// CRDs byte for byte, the same RBAC rules, and the same manager container. What differs on
// purpose is listed in the chart's values.yaml: no Namespace object, names after the release,
// and --operator-pod-labels naming the release's pod labels.

const operatorChartDir = "etcd-pilot"

// configDir is the repository's config/, from this package's folder.
var configDir = filepath.Join("..", "config")

// operatorRender is one render of the operator's chart.
type operatorRender struct {
	objects []*unstructured.Unstructured
	notes   string
}

// loadOperatorChart loads charts/etcd-pilot from disk, as `helm install` does.
func loadOperatorChart(tb testing.TB) *chart.Chart {
	tb.Helper()
	c, err := loader.LoadDir(operatorChartDir)
	if err != nil {
		tb.Fatalf("failed to load %s: %v", operatorChartDir, err)
	}
	return c
}

// renderOperatorChart renders the chart for a release with values over its defaults
// (values.schema.json checked), as `helm template NAME charts/etcd-pilot -n NAMESPACE`.
func renderOperatorChart(c *chart.Chart, name, namespace string, vals map[string]any) (operatorRender, error) {
	top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return operatorRender{}, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return operatorRender{}, err
	}
	var out operatorRender
	for n, content := range files {
		if strings.HasSuffix(n, "NOTES.txt") {
			out.notes = content
			delete(files, n)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return operatorRender{}, err
	}
	for _, m := range manifests {
		objs, err := charts.DecodeManifests(m.Content)
		if err != nil {
			return operatorRender{}, err
		}
		out.objects = append(out.objects, objs...)
	}
	return out, nil
}

func mustRenderOperatorChart(tb testing.TB, name, namespace string, vals map[string]any) operatorRender {
	tb.Helper()
	r, err := renderOperatorChart(loadOperatorChart(tb), name, namespace, vals)
	if err != nil {
		tb.Fatalf("failed to render %s: %v", operatorChartDir, err)
	}
	return r
}

// configObjects reads the objects of a kustomization folder of config/: its resources,
// following folders, without running its transformers (images, patches, namespace).
func configObjects(tb testing.TB, dir string) []*unstructured.Unstructured {
	tb.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	readYAML(tb, filepath.Join(dir, "kustomization.yaml"), &k)
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, configObjects(tb, p)...)
			continue
		}
		out = append(out, configFile(tb, p)...)
	}
	return out
}

// configFile reads the objects of one YAML file.
func configFile(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	objs, err := charts.DecodeManifests(string(b))
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return objs
}

func readYAML(tb testing.TB, path string, into any) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

func typedDeployment(tb testing.TB, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	tb.Helper()
	d := &appsv1.Deployment{}
	toTyped(tb, find(tb, objs, "Deployment", name), d)
	return d
}

func rulesOf(tb testing.TB, objs []*unstructured.Unstructured, kind, name string) []rbacv1.PolicyRule {
	tb.Helper()
	switch kind {
	case "ClusterRole":
		r := &rbacv1.ClusterRole{}
		toTyped(tb, find(tb, objs, kind, name), r)
		return r.Rules
	case "Role":
		r := &rbacv1.Role{}
		toTyped(tb, find(tb, objs, kind, name), r)
		return r.Rules
	}
	tb.Fatalf("no rules in a %s", kind)
	return nil
}

func managerContainer(tb testing.TB, d *appsv1.Deployment) corev1.Container {
	tb.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return c
		}
	}
	tb.Fatalf("the Deployment %s has no manager container", d.Name)
	return corev1.Container{}
}

// namespacedPatchArgs returns the args config/namespaced's JSON patch appends to the
// manager's.
func namespacedPatchArgs(tb testing.TB) []string {
	tb.Helper()
	var k struct {
		Patches []struct {
			Target struct{ Kind, Name string } `json:"target"`
			Patch  string                      `json:"patch"`
		} `json:"patches"`
	}
	readYAML(tb, filepath.Join(configDir, "namespaced", "kustomization.yaml"), &k)
	var args []string
	for _, p := range k.Patches {
		if p.Target.Kind != "Deployment" {
			continue
		}
		var ops []struct {
			Op, Path string
			Value    any
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			tb.Fatalf("config/namespaced's patch: %v", err)
		}
		for _, op := range ops {
			if op.Op != "add" || op.Path != "/spec/template/spec/containers/0/args/-" {
				tb.Fatalf("config/namespaced's patch does %s %s, which this test does not know: compare it with the chart by hand and teach the test", op.Op, op.Path)
			}
			args = append(args, op.Value.(string))
		}
	}
	if len(args) == 0 {
		tb.Fatal("config/namespaced adds no args to the manager")
	}
	return args
}

// withoutArg drops the arg with the prefix and returns its value.
func withoutArg(args []string, prefix string) ([]string, string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return slices.Delete(slices.Clone(args), i, i+1), v, true
		}
	}
	return args, "", false
}

func TestOperatorChartCRDsAreConfigs(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(configDir, "crd", "bases", "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	got, err := filepath.Glob(filepath.Join(operatorChartDir, "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	base := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = filepath.Base(p)
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(base(got), base(want)) {
		t.Fatalf("charts/etcd-pilot/crds holds %v, config/crd/bases %v: run make manifests", base(got), base(want))
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(operatorChartDir, "crds", filepath.Base(p)))
		if !bytes.Equal(a, b) {
			t.Errorf("charts/etcd-pilot/crds/%s differs from config/crd/bases: run make manifests", filepath.Base(p))
		}
	}
	// Helm installs them: it finds every CRD in crds/.
	if n := len(loadOperatorChart(t).CRDObjects()); n != len(want) {
		t.Errorf("Helm finds %d CRDs in the chart, want %d", n, len(want))
	}
}

// The chart takes the roles' rules from copies of config/'s files (make manifests copies
// them): they must be current.
func TestOperatorChartRBACFilesAreConfigs(t *testing.T) {
	copies := map[string]string{
		"role.yaml":                    filepath.Join("rbac", "role.yaml"),
		"editor_role.yaml":             filepath.Join("rbac", "editor_role.yaml"),
		"viewer_role.yaml":             filepath.Join("rbac", "viewer_role.yaml"),
		"metrics_reader_role.yaml":     filepath.Join("rbac", "metrics_reader_role.yaml"),
		"namespaced_role.yaml":         filepath.Join("namespaced", "role.yaml"),
		"namespaced_cluster_role.yaml": filepath.Join("namespaced", "cluster_role.yaml"),
	}
	entries, err := os.ReadDir(filepath.Join(operatorChartDir, "files", "rbac"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := copies[e.Name()]; !ok {
			t.Errorf("charts/etcd-pilot/files/rbac/%s is a copy of nothing in config/", e.Name())
		}
	}
	for file, src := range copies {
		a, err := os.ReadFile(filepath.Join(configDir, src))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(operatorChartDir, "files", "rbac", file))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/etcd-pilot/files/rbac/%s is not config/%s (%v): run make manifests", file, src, err)
		}
	}
}

// Installed as config/default installs it (release etcd-pilot in etcd-pilot-system), the chart
// renders the same objects under the same names, apart from the Namespace and the CRDs
// (crds/, checked above).
func TestOperatorChartRendersConfigDefaultsObjects(t *testing.T) {
	r := mustRenderOperatorChart(t, "etcd-pilot", "etcd-pilot-system", nil)
	keys := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, o := range objs {
			if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			out = append(out, o.GetKind()+"/"+o.GetName())
		}
		sort.Strings(out)
		return out
	}
	want, got := keys(configObjects(t, filepath.Join(configDir, "default"))), keys(r.objects)
	if !slices.Equal(got, want) {
		t.Errorf("the chart renders\n  %v\nconfig/default holds\n  %v", got, want)
	}
	for _, o := range r.objects {
		if o.GetNamespace() != "" && o.GetNamespace() != "etcd-pilot-system" {
			t.Errorf("%s %s is in namespace %s, not the release's", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
}

func TestOperatorChartRBACIsConfigs(t *testing.T) {
	rbacDir, nsDir := filepath.Join(configDir, "rbac"), filepath.Join(configDir, "namespaced")
	// The roles people and scrapers bind to: same rules, same aggregation labels.
	userRoles := func(t *testing.T, objs []*unstructured.Unstructured, prefix string) {
		for file, suffix := range map[string]string{"editor_role.yaml": "editor", "viewer_role.yaml": "viewer", "metrics_reader_role.yaml": "metrics-reader"} {
			want := configFile(t, filepath.Join(rbacDir, file))[0]
			got := find(t, objs, "ClusterRole", prefix+"-"+suffix)
			if w, g := rulesOf(t, []*unstructured.Unstructured{want}, "ClusterRole", want.GetName()), rulesOf(t, objs, "ClusterRole", got.GetName()); !reflect.DeepEqual(g, w) {
				t.Errorf("ClusterRole %s's rules differ from config/rbac/%s:\n got %v\nwant %v", got.GetName(), file, g, w)
			}
			for k, v := range want.GetLabels() {
				if got.GetLabels()[k] != v {
					t.Errorf("ClusterRole %s lacks the label %s=%s of config/rbac/%s", got.GetName(), k, v, file)
				}
			}
		}
	}

	t.Run("cluster-wide", func(t *testing.T) {
		objs := mustRenderOperatorChart(t, "etcd-pilot", "etcd-pilot-system", nil).objects
		want := rulesOf(t, configFile(t, filepath.Join(rbacDir, "role.yaml")), "ClusterRole", "etcd-pilot-manager")
		if got := rulesOf(t, objs, "ClusterRole", "etcd-pilot-manager"); !reflect.DeepEqual(got, want) {
			t.Errorf("the manager's ClusterRole differs from config/rbac/role.yaml:\n got %v\nwant %v", got, want)
		}
		b := &rbacv1.ClusterRoleBinding{}
		toTyped(t, find(t, objs, "ClusterRoleBinding", "etcd-pilot-manager"), b)
		if b.RoleRef.Name != "etcd-pilot-manager" || len(b.Subjects) != 1 || b.Subjects[0].Name != "etcd-pilot" || b.Subjects[0].Namespace != "etcd-pilot-system" {
			t.Errorf("the binding %v does not bind the manager's role to the ServiceAccount", b)
		}
		for _, o := range objs {
			if o.GetKind() == "Role" || o.GetKind() == "RoleBinding" {
				t.Errorf("cluster-wide mode renders %s %s", o.GetKind(), o.GetName())
			}
		}
		userRoles(t, objs, "etcd-pilot")
	})

	t.Run("namespaced", func(t *testing.T) {
		objs := mustRenderOperatorChart(t, "pilot", "team-a", map[string]any{"namespaced": true}).objects
		want := rulesOf(t, configFile(t, filepath.Join(nsDir, "role.yaml")), "Role", "etcd-pilot-manager")
		if got := rulesOf(t, objs, "Role", "pilot-manager"); !reflect.DeepEqual(got, want) {
			t.Errorf("the manager's Role differs from config/namespaced/role.yaml:\n got %v\nwant %v", got, want)
		}
		if ns := find(t, objs, "Role", "pilot-manager").GetNamespace(); ns != "team-a" {
			t.Errorf("the Role is in %q, not the release's namespace", ns)
		}
		want = rulesOf(t, configFile(t, filepath.Join(nsDir, "cluster_role.yaml")), "ClusterRole", "etcd-pilot-manager-cluster-scoped")
		if got := rulesOf(t, objs, "ClusterRole", "pilot-team-a-manager-cluster-scoped"); !reflect.DeepEqual(got, want) {
			t.Errorf("the cluster-scoped ClusterRole differs from config/namespaced/cluster_role.yaml:\n got %v\nwant %v", got, want)
		}
		for _, o := range objs {
			if o.GetKind() == "ClusterRole" && o.GetName() == "pilot-team-a-manager" {
				t.Error("namespaced mode renders the cluster-wide ClusterRole")
			}
			// Cluster-scoped names carry the namespace: a release of the same name in another
			// namespace must not take them over.
			if (o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding") && !strings.HasPrefix(o.GetName(), "pilot-team-a-") {
				t.Errorf("%s %s does not carry the namespace in its name", o.GetKind(), o.GetName())
			}
		}
		userRoles(t, objs, "pilot-team-a")
	})
}

// The manager container is config/manager/manager.yaml's: args, ports, probes, security
// contexts, env, command, resources; in namespaced mode with config/namespaced's extra args.
func TestOperatorChartDeploymentIsConfigs(t *testing.T) {
	var cfg *appsv1.Deployment
	for _, o := range configFile(t, filepath.Join(configDir, "manager", "manager.yaml")) {
		if o.GetKind() == "Deployment" {
			cfg = &appsv1.Deployment{}
			toTyped(t, o, cfg)
		}
	}
	if cfg == nil {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
	want := managerContainer(t, cfg)

	for _, mode := range []struct {
		name      string
		vals      map[string]any
		extraArgs []string
	}{
		{name: "cluster-wide"},
		{name: "namespaced", vals: map[string]any{"namespaced": true}, extraArgs: namespacedPatchArgs(t)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			const release, namespace = "etcd-pilot", "etcd-pilot-system"
			d := typedDeployment(t, mustRenderOperatorChart(t, release, namespace, mode.vals).objects, release)
			got := managerContainer(t, d)

			// --agent-image names the container's image in both (kustomize's replacement
			// keeps it so in config/).
			gotArgs, agent, ok := withoutArg(got.Args, "--agent-image=")
			if !ok || agent != got.Image {
				t.Errorf("the chart's --agent-image is %q, its image %q", agent, got.Image)
			}
			wantArgs, cfgAgent, ok := withoutArg(want.Args, "--agent-image=")
			if !ok || cfgAgent != want.Image {
				t.Errorf("config/manager's --agent-image is %q, its image %q", cfgAgent, want.Image)
			}
			// Documented difference: the chart names its pods' labels, which must select them.
			gotArgs, podLabels, ok := withoutArg(gotArgs, "--operator-pod-labels=")
			if !ok {
				t.Error("the chart does not pass --operator-pod-labels")
			} else if sel, err := labels.Parse(podLabels); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("--operator-pod-labels=%s does not select the pods' labels %v (%v)", podLabels, d.Spec.Template.Labels, err)
			}
			wantArgs = append(wantArgs, mode.extraArgs...)
			if !slices.Equal(gotArgs, wantArgs) {
				t.Errorf("args differ from config's:\n got %q\nwant %q", gotArgs, wantArgs)
			}

			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"command", got.Command, want.Command},
				{"ports", got.Ports, want.Ports},
				{"env", got.Env, want.Env},
				{"liveness probe", got.LivenessProbe, want.LivenessProbe},
				{"readiness probe", got.ReadinessProbe, want.ReadinessProbe},
				{"startup probe", got.StartupProbe, want.StartupProbe},
				{"container security context", got.SecurityContext, want.SecurityContext},
				{"resources", got.Resources, want.Resources},
				{"pod security context", d.Spec.Template.Spec.SecurityContext, cfg.Spec.Template.Spec.SecurityContext},
				{"termination grace period", d.Spec.Template.Spec.TerminationGracePeriodSeconds, cfg.Spec.Template.Spec.TerminationGracePeriodSeconds},
				{"replicas", d.Spec.Replicas, cfg.Spec.Replicas},
				{"ServiceAccount", d.Spec.Template.Spec.ServiceAccountName, cfg.Spec.Template.Spec.ServiceAccountName},
				{"the name label of the pods", d.Spec.Template.Labels["app.kubernetes.io/name"], cfg.Spec.Template.Labels["app.kubernetes.io/name"]},
			} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("%s differ from config/manager/manager.yaml's:\n got %+v\nwant %+v", c.what, c.got, c.want)
				}
			}
			// Both spread the replicas over nodes, each selecting its own pods.
			for _, a := range []struct {
				what string
				d    *appsv1.Deployment
			}{{"the chart", d}, {"config/manager", cfg}} {
				if err := prefersOtherNodes(a.d); err != nil {
					t.Errorf("%s: %v", a.what, err)
				}
			}
			if got.Image != "etcd-pilot:"+loadOperatorChart(t).Metadata.AppVersion {
				t.Errorf("the default image is %s, want etcd-pilot:<appVersion>", got.Image)
			}
		})
	}
}

// prefersOtherNodes checks that d's pods prefer nodes without another of its pods.
func prefersOtherNodes(d *appsv1.Deployment) error {
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		return fmt.Errorf("no preferred pod anti-affinity: %+v", a)
	}
	term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	switch {
	case err != nil:
		return err
	case term.TopologyKey != "kubernetes.io/hostname":
		return fmt.Errorf("topology key %s", term.TopologyKey)
	case term.LabelSelector == nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)):
		return fmt.Errorf("selector %v does not select the pods' labels %v", term.LabelSelector, d.Spec.Template.Labels)
	}
	return nil
}

// The metrics Service is config/manager/metrics_service.yaml's and selects the operator's pods.
func TestOperatorChartMetricsService(t *testing.T) {
	want := &corev1.Service{}
	toTyped(t, configFile(t, filepath.Join(configDir, "manager", "metrics_service.yaml"))[0], want)
	objs := mustRenderOperatorChart(t, "etcd-pilot", "etcd-pilot-system", nil).objects
	got := &corev1.Service{}
	toTyped(t, find(t, objs, "Service", "etcd-pilot-metrics"), got)
	if !reflect.DeepEqual(got.Spec.Ports, want.Spec.Ports) {
		t.Errorf("ports differ from config's:\n got %+v\nwant %+v", got.Spec.Ports, want.Spec.Ports)
	}
	d := typedDeployment(t, objs, "etcd-pilot")
	if !labels.SelectorFromSet(got.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the Service's selector %v does not select the pods' labels %v", got.Spec.Selector, d.Spec.Template.Labels)
	}
	target := got.Spec.Ports[0].TargetPort.StrVal
	if !slices.ContainsFunc(managerContainer(t, d).Ports, func(p corev1.ContainerPort) bool { return p.Name == target }) {
		t.Errorf("the Service targets the port %q, which the manager does not name", target)
	}

	// Plain HTTP when metrics are not secure: the port's name says so, and so does the flag.
	objs = mustRenderOperatorChart(t, "etcd-pilot", "etcd-pilot-system", map[string]any{"metrics": map[string]any{"secure": false}}).objects
	toTyped(t, find(t, objs, "Service", "etcd-pilot-metrics"), got)
	if got.Spec.Ports[0].Name != "http" {
		t.Errorf("the port of insecure metrics is named %q", got.Spec.Ports[0].Name)
	}
	if !slices.Contains(managerContainer(t, typedDeployment(t, objs, "etcd-pilot")).Args, "--metrics-secure=false") {
		t.Error("metrics.secure=false does not pass --metrics-secure=false")
	}
}

func TestOperatorChartServiceMonitor(t *testing.T) {
	for _, secure := range []bool{true, false} {
		objs := mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"metrics": map[string]any{"secure": secure, "serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}}}).objects
		sm := find(t, objs, "ServiceMonitor", "pilot")
		if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetLabels()["release"] != "prom" {
			t.Errorf("ServiceMonitor %s, labels %v", sm.GetAPIVersion(), sm.GetLabels())
		}
		svc := &corev1.Service{}
		toTyped(t, find(t, objs, "Service", "pilot-metrics"), svc)
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if !labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) {
			t.Errorf("the ServiceMonitor selects %v, the metrics Service has %v", sel, svc.Labels)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("endpoints %v", eps)
		}
		ep := eps[0].(map[string]any)
		wantScheme := map[bool]string{true: "https", false: "http"}[secure]
		if ep["port"] != svc.Spec.Ports[0].Name || ep["scheme"] != wantScheme {
			t.Errorf("secure=%v: the ServiceMonitor scrapes port %v over %v; the Service's port is %s", secure, ep["port"], ep["scheme"], svc.Spec.Ports[0].Name)
		}
		if ep["honorLabels"] != true {
			t.Errorf("secure=%v: honorLabels %v: the operator's namespace label would become exported_namespace", secure, ep["honorLabels"])
		}
		if _, hasToken := ep["bearerTokenFile"]; hasToken != secure {
			t.Errorf("secure=%v: bearerTokenFile set: %v", secure, hasToken)
		}
	}
	for _, o := range mustRenderOperatorChart(t, "pilot", "ops", nil).objects {
		if o.GetKind() == "ServiceMonitor" || o.GetKind() == "PrometheusRule" {
			t.Errorf("the defaults render a %s", o.GetKind())
		}
	}
}

// The PrometheusRule carries the rule groups of files/alerts.yaml; without them, enabling it
// fails and names the file.
func TestOperatorChartPrometheusRule(t *testing.T) {
	vals := map[string]any{"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}}
	c := loadOperatorChart(t)
	alerts, err := os.ReadFile(filepath.Join(operatorChartDir, "files", "alerts.yaml"))
	if os.IsNotExist(err) {
		_, err := renderOperatorChart(c, "pilot", "ops", vals)
		if err == nil || !strings.Contains(err.Error(), "files/alerts.yaml") {
			t.Errorf("prometheusRule.enabled without files/alerts.yaml: %v, want an error naming the file", err)
		}
		// The rules another file would bring render as they are.
		alerts = []byte("groups:\n  - name: etcd-pilot\n    rules:\n      - alert: EtcdPilotDown\n        expr: absent(up{job=\"etcd-pilot-metrics\"} == 1)\n        for: 5m\n        annotations:\n          summary: 'no operator answers: {{ $labels.job }}'\n")
		c.Files = append(c.Files, &chart.File{Name: "files/alerts.yaml", Data: alerts})
	} else if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.Unmarshal(alerts, &want); err != nil || len(want.Groups) == 0 {
		t.Fatalf("files/alerts.yaml is no rule file with groups: %v", err)
	}
	r, err := renderOperatorChart(c, "pilot", "ops", vals)
	if err != nil {
		t.Fatal(err)
	}
	pr := find(t, r.objects, "PrometheusRule", "pilot")
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	// Compare through JSON-like values: the decoder makes integers int64, YAML float64 or int.
	var got struct {
		Groups []any `json:"groups"`
	}
	b, _ := yaml.Marshal(map[string]any{"groups": groups})
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Groups, want.Groups) {
		t.Errorf("the PrometheusRule's groups differ from files/alerts.yaml:\n got %v\nwant %v", got.Groups, want.Groups)
	}
	if pr.GetLabels()["release"] != "prom" || pr.GetNamespace() != "ops" {
		t.Errorf("PrometheusRule labels %v namespace %s", pr.GetLabels(), pr.GetNamespace())
	}
}

func TestOperatorChartValues(t *testing.T) {
	objs := mustRenderOperatorChart(t, "pilot", "ops", map[string]any{
		"image":            map[string]any{"repository": "mirror/team/etcd-pilot", "tag": "v9.9.9", "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "pull"}},
		"replicaCount":     3,
		"nodeSelector":     map[string]any{"role": "ops"},
		"tolerations":      []any{map[string]any{"key": "ops", "operator": "Exists"}},
		"affinity":         map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": 1, "podAffinityTerm": map[string]any{"topologyKey": "kubernetes.io/hostname"}}}}},
		"resources":        map[string]any{"limits": map[string]any{"memory": "1Gi"}},
		"extraArgs":        []any{"--etcd-timeout=5s"},
		"podLabels":        map[string]any{"team": "ops"},
	}).objects
	d := typedDeployment(t, objs, "pilot")
	c := managerContainer(t, d)
	spec := d.Spec.Template.Spec
	switch {
	case c.Image != "mirror/team/etcd-pilot:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways:
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	case !slices.Contains(c.Args, "--agent-image=mirror/team/etcd-pilot:v9.9.9"):
		t.Errorf("backup pods do not run the operator's image: %q", c.Args)
	case c.Args[len(c.Args)-1] != "--etcd-timeout=5s":
		t.Errorf("extraArgs: %q", c.Args)
	case len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "pull":
		t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
	case *d.Spec.Replicas != 3 || spec.NodeSelector["role"] != "ops" || len(spec.Tolerations) != 1 || spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil ||
		len(spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight != 1: // the given affinity replaces the default
		t.Errorf("placement: replicas %d nodeSelector %v tolerations %v affinity %v", *d.Spec.Replicas, spec.NodeSelector, spec.Tolerations, spec.Affinity)
	case c.Resources.Limits.Memory().String() != "1Gi" || c.Resources.Requests.Cpu().String() != "50m": // Helm merges maps with the defaults
		t.Errorf("resources %v", c.Resources)
	case d.Spec.Template.Labels["team"] != "ops" || d.Spec.Selector.MatchLabels["team"] != "":
		t.Errorf("podLabels: pod %v selector %v", d.Spec.Template.Labels, d.Spec.Selector.MatchLabels)
	}

	d = typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"image": map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)}}).objects, "pilot")
	if img := managerContainer(t, d).Image; img != "etcd-pilot@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("a digest gives the image %s", img)
	}

	// Leader election off (one replica): no --leader-elect.
	d = typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false}}).objects, "pilot")
	if slices.Contains(managerContainer(t, d).Args, "--leader-elect") {
		t.Error("leaderElection.enabled=false still passes --leader-elect")
	}
	if d.Spec.Template.Spec.Affinity != nil {
		t.Errorf("one replica has an anti-affinity to itself: %+v", d.Spec.Template.Spec.Affinity)
	}

	// The Pod Security level is the admin's: restricted unless the values relax it.
	for level, want := range map[any]string{nil: "restricted", "baseline": "baseline", "privileged": "privileged"} {
		vals := map[string]any{}
		if level != nil {
			vals["podSecurityLevel"] = level
		}
		args := managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", vals).objects, "pilot")).Args
		if !slices.Contains(args, "--pod-security-level="+want) {
			t.Errorf("podSecurityLevel %v: args %q, want --pod-security-level=%s", level, args, want)
		}
	}

	// Cluster-scoped issuers are the admin's to allow: off unless the values say so.
	for allow, want := range map[bool]bool{false: false, true: true} {
		args := managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"allowClusterIssuers": allow}).objects, "pilot")).Args
		if slices.Contains(args, "--allow-cluster-issuers") != want {
			t.Errorf("allowClusterIssuers %v: args %q", allow, args)
		}
	}

	// The admin's extra SANs of secure-by-default clusters: none unless the values list some.
	if args := managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", nil).objects, "pilot")).Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--default-extra-sans") }) {
		t.Errorf("default values: args %q carry --default-extra-sans", args)
	}
	args := managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"defaultExtraSANs": []any{"127.0.0.1", "etcd.example"}}).objects, "pilot")).Args
	if !slices.Contains(args, "--default-extra-sans=127.0.0.1,etcd.example") {
		t.Errorf("defaultExtraSANs: args %q", args)
	}
	if _, err := renderOperatorChart(loadOperatorChart(t), "pilot", "ops", map[string]any{"defaultExtraSANs": []any{"a,--allow-cluster-issuers"}}); err == nil {
		t.Errorf("defaultExtraSANs took a comma and a flag")
	}

	// No ServiceAccount of its own: the pods run as the one named, and the bindings name it.
	objs = mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"serviceAccount": map[string]any{"create": false, "name": "existing"}}).objects
	if sa := typedDeployment(t, objs, "pilot").Spec.Template.Spec.ServiceAccountName; sa != "existing" {
		t.Errorf("serviceAccountName %s", sa)
	}
	b := &rbacv1.ClusterRoleBinding{}
	toTyped(t, find(t, objs, "ClusterRoleBinding", "pilot-manager"), b)
	if b.Subjects[0].Name != "existing" {
		t.Errorf("the binding names %s", b.Subjects[0].Name)
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" {
			t.Errorf("serviceAccount.create=false renders ServiceAccount %s", o.GetName())
		}
	}

	// The metrics reader bound to a scraper; the user roles left out.
	objs = mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"rbac": map[string]any{"userRoles": false, "metricsReader": map[string]any{"create": true, "subjects": []any{map[string]any{"name": "prometheus", "namespace": "monitoring"}}}}}).objects
	toTyped(t, find(t, objs, "ClusterRoleBinding", "pilot-metrics-reader"), b)
	if b.RoleRef.Name != "pilot-metrics-reader" || b.Subjects[0].Name != "prometheus" || b.Subjects[0].Namespace != "monitoring" {
		t.Errorf("metrics reader binding %+v", b)
	}
	for _, o := range objs {
		if strings.HasSuffix(o.GetName(), "-editor") || strings.HasSuffix(o.GetName(), "-viewer") {
			t.Errorf("rbac.userRoles=false renders %s %s", o.GetKind(), o.GetName())
		}
	}
}

func TestOperatorChartSchemaRefusesInvalidValues(t *testing.T) {
	c := loadOperatorChart(t)
	for name, vals := range map[string]map[string]any{
		"unknown key":               {"replicas": 2},
		"misspelled nested key":     {"metrics": map[string]any{"serviceMonitor": map[string]any{"enable": true}}},
		"no image repository":       {"image": map[string]any{"repository": ""}},
		"pull policy":               {"image": map[string]any{"pullPolicy": "Sometimes"}},
		"digest without algorithm":  {"image": map[string]any{"digest": "abc"}},
		"metrics port":              {"metrics": map[string]any{"port": 70000}},
		"extra arg without dashes":  {"extraArgs": []any{"etcd-timeout=5s"}},
		"namespaced as a string":    {"namespaced": "yes"},
		"unknown pod security":      {"podSecurityLevel": "none"},
		"subject without namespace": {"rbac": map[string]any{"metricsReader": map[string]any{"subjects": []any{map[string]any{"name": "p"}}}}},
	} {
		if _, err := renderOperatorChart(c, "pilot", "ops", vals); err == nil {
			t.Errorf("%s: values %v render", name, vals)
		}
	}
}

func TestOperatorChartNotes(t *testing.T) {
	r := mustRenderOperatorChart(t, "pilot", "team-a", map[string]any{"namespaced": true})
	for _, want := range []string{"namespace team-a only", "kubectl -n team-a apply -f config/samples/etcdcluster.yaml", "https://pilot-metrics.team-a.svc:8443/metrics", "pilot-team-a-metrics-reader", "kubectl apply --server-side -f charts/etcd-pilot/crds/"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt does not say %q:\n%s", want, r.notes)
		}
	}
	r = mustRenderOperatorChart(t, "etcd-pilot", "etcd-pilot-system", nil)
	if !strings.Contains(r.notes, "every namespace") {
		t.Errorf("NOTES.txt of the cluster-wide mode:\n%s", r.notes)
	}
}

// The operator's chart is deterministic too.
func TestOperatorChartIsDeterministic(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(operatorChartDir, "templates", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no templates found: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if calls := forbiddenCalls(string(data)); len(calls) > 0 {
			t.Errorf("%s calls %v: the chart must render the same objects every time", p, calls)
		}
	}
}

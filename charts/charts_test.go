package charts_test

import (
	"bytes"
	"flag"
	"fmt"
	"k8s.io/utils/ptr"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current output")

const (
	fixtureDir = "testdata/fixtures"
	goldenDir  = "testdata/golden"
)

type fixture struct {
	name    string
	cluster *v1alpha1.EtcdCluster
	values  map[string]any
}

func (f fixture) release() charts.Release {
	return charts.Release{Name: f.cluster.Name, Namespace: f.cluster.Namespace}
}

// loadFixtures decodes every EtcdCluster fixture strictly and computes its chart values, in
// file name order.
func loadFixtures(tb testing.TB) []fixture {
	tb.Helper()
	var out []fixture
	for _, f := range testutil.Fixtures(tb, fixtureDir) {
		v, err := values.Compute(f.Cluster, values.DefaultOperator())
		if err != nil {
			tb.Fatalf("failed to compute values of fixture %s: %v", f.Name, err)
		}
		out = append(out, fixture{name: f.Name, cluster: f.Cluster, values: v})
	}
	return out
}

func fixtureNamed(tb testing.TB, name string) fixture {
	tb.Helper()
	for _, f := range loadFixtures(tb) {
		if f.name == name {
			return f
		}
	}
	tb.Fatalf("no fixture %s", name)
	return fixture{}
}

func newRenderer(tb testing.TB) *charts.Renderer {
	tb.Helper()
	r, err := charts.Embedded()
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func render(tb testing.TB, r *charts.Renderer, rel charts.Release, v map[string]any) []*unstructured.Unstructured {
	tb.Helper()
	objs, err := r.Render(rel, v)
	if err != nil {
		tb.Fatalf("Render: %v", err)
	}
	return objs
}

// stream marshals objects to a YAML stream in their order.
func stream(tb testing.TB, objs []*unstructured.Unstructured) []byte {
	tb.Helper()
	var buf bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			tb.Fatal(err)
		}
		buf.Write(b)
	}
	return buf.Bytes()
}

func TestRenderGolden(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			got := stream(t, render(t, r, f.release(), f.values))
			testutil.Golden(t, filepath.Join(goldenDir, f.name+".yaml"), got, *update, "go test ./charts -update")
		})
	}
}

// chartAloneDir holds plain values files for the chart without the operator (helm template
// -f FILE); each renders for chartAloneRelease into goldenDir/alone. test/helmparity renders
// them with the Helm CLI too.
const chartAloneDir = "testdata/values"

var chartAloneRelease = charts.Release{Name: "etcd", Namespace: "db"}

func TestRenderChartAloneGolden(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(chartAloneDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no values files in %s: %v", chartAloneDir, err)
	}
	r := newRenderer(t)
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			v := map[string]any{}
			if err := yaml.Unmarshal(data, &v); err != nil {
				t.Fatal(err)
			}
			got := stream(t, render(t, r, chartAloneRelease, v))
			testutil.Golden(t, filepath.Join(goldenDir, "alone", name+".yaml"), got, *update, "go test ./charts -update")
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	for _, f := range loadFixtures(t) {
		// Two renderers, so the second render is not a cache hit.
		a := stream(t, render(t, newRenderer(t), f.release(), f.values))
		b := stream(t, render(t, newRenderer(t), f.release(), f.values))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two renders differ:\n%s\n---- and ----\n%s", f.name, a, b)
		}
	}
}

func TestRenderCache(t *testing.T) {
	f := fixtureNamed(t, "five-members-tuned")
	r := newRenderer(t)
	first := render(t, r, f.release(), f.values)
	want := stream(t, first)

	// Change everything the caller got back: labels, nested maps, lists.
	for _, o := range first {
		o.SetLabels(map[string]string{"mutated": "true"})
		o.SetName("mutated")
		if o.GetKind() == "StatefulSet" {
			if err := unstructured.SetNestedField(o.Object, int64(42), "spec", "replicas"); err != nil {
				t.Fatal(err)
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			containers[0].(map[string]any)["args"] = []any{"--mutated"}
		}
	}
	first[0] = nil

	second := render(t, r, f.release(), f.values)
	if got := stream(t, second); !bytes.Equal(got, want) {
		t.Fatalf("a cached render changed after the caller mutated an earlier result:\n%s", got)
	}
	third := render(t, r, f.release(), f.values)
	if !reflect.DeepEqual(second, third) {
		t.Errorf("two cache hits differ")
	}
	for i := range second {
		if second[i] == third[i] {
			t.Errorf("cache hits share object %d", i)
		}
	}
	// A fresh renderer (a cache miss) agrees with the cache, to the Go types of the values
	// (the cache keeps JSON: integers must come back as int64, as a render decodes them).
	fresh := render(t, newRenderer(t), f.release(), f.values)
	if got := stream(t, fresh); !bytes.Equal(got, want) {
		t.Errorf("a cache hit differs from a fresh render")
	}
	if !reflect.DeepEqual(fresh, second) {
		t.Errorf("a cache hit's objects differ from a fresh render's in their Go values")
	}

	// The release is part of the key.
	other := render(t, r, charts.Release{Name: "other", Namespace: f.cluster.Namespace}, f.values)
	if other[0].GetName() == second[0].GetName() {
		t.Errorf("a render for another release came from the cache: %s", other[0].GetName())
	}
}

func TestInstallOrder(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		objs := render(t, r, f.release(), f.values)
		var kinds []string
		for _, o := range objs {
			kinds = append(kinds, o.GetKind())
		}
		sts := slices.Index(kinds, "StatefulSet")
		if sts < 0 || slices.Index(kinds[sts+1:], "StatefulSet") >= 0 {
			t.Fatalf("%s: want exactly one StatefulSet, got kinds %v", f.name, kinds)
		}
		for i, k := range kinds[:sts] {
			if !slices.Contains([]string{"NetworkPolicy", "ServiceAccount", "Service", "PodDisruptionBudget"}, k) {
				t.Errorf("%s: unexpected %s at %d before the StatefulSet: %v", f.name, k, i, kinds)
			}
		}
		// Helm installs kinds it does not know last: the PodMonitor, once the pods it watches
		// exist.
		var last []string
		if podMonitorEnabled(f.values) {
			last = []string{"PodMonitor"}
		}
		if after := kinds[sts+1:]; !slices.Equal(after, last) {
			t.Errorf("%s: objects after the StatefulSet: %v, want %v", f.name, after, last)
		}
		want := []string{"ServiceAccount", "Service", "Service"}
		if pdb, _ := f.values["podDisruptionBudget"].(map[string]any); pdb["enabled"] != false {
			want = append(want, "PodDisruptionBudget")
		}
		if np := f.cluster.Spec.NetworkPolicy; np != nil && np.Enabled != nil && *np.Enabled {
			// Before the pods, so that no member starts unguarded.
			want = append(want, "NetworkPolicy")
		} else if slices.Contains(kinds, "NetworkPolicy") {
			t.Errorf("%s: a NetworkPolicy without spec.networkPolicy.enabled: %v", f.name, kinds)
		}
		for _, k := range want {
			i := slices.Index(kinds, k)
			if i < 0 || i > sts {
				t.Errorf("%s: %s missing or after the StatefulSet: %v", f.name, k, kinds)
			}
		}
	}
}

func toTyped(tb testing.TB, o *unstructured.Unstructured, into any) {
	tb.Helper()
	// Unknown fields fail too: a misspelled field in a template must not vanish silently.
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		tb.Fatalf("failed to convert %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func find(tb testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	tb.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	tb.Fatalf("no %s %s in the render", kind, name)
	return nil
}

func statefulSet(tb testing.TB, objs []*unstructured.Unstructured, name string) *appsv1.StatefulSet {
	tb.Helper()
	s := &appsv1.StatefulSet{}
	toTyped(tb, find(tb, objs, "StatefulSet", name), s)
	return s
}

func TestEveryObjectConverts(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		for _, o := range render(t, r, f.release(), f.values) {
			var into any
			switch o.GetKind() {
			case "ServiceAccount":
				into = &corev1.ServiceAccount{}
			case "Service":
				into = &corev1.Service{}
			case "PodDisruptionBudget":
				into = &policyv1.PodDisruptionBudget{}
			case "StatefulSet":
				into = &appsv1.StatefulSet{}
			case "NetworkPolicy":
				into = &networkingv1.NetworkPolicy{}
			case "PodMonitor":
				into = &podMonitor{}
			default:
				t.Errorf("%s: unexpected kind %s", f.name, o.GetKind())
				continue
			}
			toTyped(t, o, into)
			if o.GetNamespace() != f.cluster.Namespace {
				t.Errorf("%s: %s %s in namespace %q, want %q", f.name, o.GetKind(), o.GetName(), o.GetNamespace(), f.cluster.Namespace)
			}
			l := o.GetLabels()
			if l[v1alpha1.LabelCluster] != f.cluster.Name || l[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
				t.Errorf("%s: %s %s lacks the inventory labels: %v", f.name, o.GetKind(), o.GetName(), l)
			}
		}
	}
}

func TestStatefulSet(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			objs := render(t, r, f.release(), f.values)
			s := statefulSet(t, objs, f.cluster.Name)
			if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("podManagementPolicy = %q, want Parallel", s.Spec.PodManagementPolicy)
			}
			if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
				t.Errorf("updateStrategy = %q, want OnDelete", s.Spec.UpdateStrategy.Type)
			}
			if s.Spec.ServiceName != f.cluster.Name {
				t.Errorf("serviceName = %q, want the headless Service %q", s.Spec.ServiceName, f.cluster.Name)
			}

			pod := s.Spec.Template.Spec
			psc := pod.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Errorf("pod securityContext.runAsNonRoot not true: %+v", psc)
			}
			if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod seccompProfile not RuntimeDefault: %+v", psc)
			}
			if len(pod.Containers) == 0 || pod.Containers[0].Name != "etcd" {
				t.Fatalf("the first container is not etcd: %+v", pod.Containers)
			}
			c := pod.Containers[0]
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Fatalf("container has no securityContext")
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("allowPrivilegeEscalation not false")
			case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
				t.Errorf("container runAsNonRoot not true")
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("readOnlyRootFilesystem not true")
			case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || slices.ContainsFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c != "NET_BIND_SERVICE" }):
				t.Errorf("capabilities = %+v, want drop ALL and add nothing but NET_BIND_SERVICE", sc.Capabilities)
			case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault && sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost:
				t.Errorf("container seccompProfile not RuntimeDefault or Localhost")
			case sc.Privileged != nil && *sc.Privileged:
				t.Errorf("container is privileged")
			}

			listeners := 0
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--listen-") {
					listeners++
					if !strings.Contains(a, "://$(POD_IP):") {
						t.Errorf("listener %q not bound to $(POD_IP)", a)
					}
				}
			}
			if listeners != 3 {
				t.Errorf("%d --listen-* args, want peer, client and metrics: %v", listeners, c.Args)
			}
			if all := stream(t, objs); bytes.Contains(all, []byte("0.0.0.0")) {
				t.Errorf("the render mentions 0.0.0.0")
			}

			if f.cluster.Spec.Version == "3.5.9" {
				checkTCPProbes(t, c)
			} else {
				checkLivezProbes(t, c)
			}

			ephemeral := f.cluster.Spec.Storage.Ephemeral != nil && *f.cluster.Spec.Storage.Ephemeral
			if ephemeral != (len(s.Spec.VolumeClaimTemplates) == 0) {
				t.Errorf("ephemeral = %v but %d volume claim templates", ephemeral, len(s.Spec.VolumeClaimTemplates))
			}
		})
	}
}

func checkLivezProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := "/livez"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe = %+v, want GET %s on the metrics port", name, p, want)
		}
	}
}

func checkTCPProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.TCPSocket == nil || p.TCPSocket.Port.String() != "client" || p.HTTPGet != nil {
			t.Errorf("%s probe = %+v, want a TCP check of the client port", name, p)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("readiness probe = %+v, want GET /health on the metrics port", p)
	}
}

// The /livez branch starts at 3.5.11; check the versions either side of the boundary.
func TestProbeVersionBoundary(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	for version, livez := range map[string]bool{"3.5.9": false, "3.5.10": false, "3.5.11": true, "3.5.35": true, "3.6.0": true, "3.7.0": true} {
		v := values.Merge(f.values, map[string]any{"etcd": map[string]any{"version": version}})
		c := statefulSet(t, render(t, r, f.release(), v), f.cluster.Name).Spec.Template.Spec.Containers[0]
		if livez {
			checkLivezProbes(t, c)
		} else {
			checkTCPProbes(t, c)
		}
	}
}

func TestPodDisruptionBudgetKeepsQuorum(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	for n := 1; n <= 9; n++ {
		v := values.Merge(f.values, map[string]any{"replicas": n})
		objs := render(t, r, f.release(), v)
		pdb := &policyv1.PodDisruptionBudget{}
		toTyped(t, find(t, objs, "PodDisruptionBudget", f.cluster.Name), pdb)
		want := n/2 + 1
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != fmt.Sprint(want) {
			t.Errorf("replicas %d: minAvailable = %v, want %d", n, pdb.Spec.MinAvailable, want)
		}
		if pdb.Spec.MaxUnavailable != nil {
			t.Errorf("replicas %d: maxUnavailable set as well", n)
		}
		// Operator mode: replicas and the initial cluster are the operator's.
		s := statefulSet(t, objs, f.cluster.Name)
		if s.Spec.Replicas != nil || argValue(s, "--initial-cluster=") != "" || argValue(s, "--initial-cluster-state=") != "" {
			t.Errorf("replicas %d: with a membership ConfigMap the chart still sets replicas %v or the initial cluster", n, s.Spec.Replicas)
		}
		if env := s.Spec.Template.Spec.Containers[0].EnvFrom; len(env) != 1 || env[0].ConfigMapRef == nil || env[0].ConfigMapRef.Name != f.cluster.Name+"-membership" {
			t.Errorf("replicas %d: envFrom %+v", n, env)
		}

		// The chart alone: every ordinal in the first formation.
		alone := values.Merge(v, map[string]any{"operator": map[string]any{"membershipConfigMap": ""}})
		s = statefulSet(t, render(t, r, f.release(), alone), f.cluster.Name)
		if s.Spec.Replicas == nil || int(*s.Spec.Replicas) != n {
			t.Errorf("replicas %d: StatefulSet replicas = %v", n, s.Spec.Replicas)
		}
		if got := strings.Count(argValue(s, "--initial-cluster="), "=http://"); got != n {
			t.Errorf("replicas %d: --initial-cluster has %d members", n, got)
		}
		if len(s.Spec.Template.Spec.Containers[0].EnvFrom) != 0 {
			t.Errorf("replicas %d: the chart alone reads a membership ConfigMap", n)
		}
	}
}

func argValue(s *appsv1.StatefulSet, prefix string) string {
	for _, a := range s.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v
		}
	}
	return ""
}

func TestServices(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		objs := render(t, r, f.release(), f.values)
		headless := &corev1.Service{}
		toTyped(t, find(t, objs, "Service", f.cluster.Name), headless)
		if headless.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: headless Service clusterIP = %q, want None", f.name, headless.Spec.ClusterIP)
		}
		if !headless.Spec.PublishNotReadyAddresses {
			t.Errorf("%s: headless Service does not publish not-ready addresses", f.name)
		}
		client := &corev1.Service{}
		toTyped(t, find(t, objs, "Service", f.cluster.Name+"-client"), client)
		if client.Spec.ClusterIP == corev1.ClusterIPNone || client.Spec.PublishNotReadyAddresses {
			t.Errorf("%s: client Service must route to ready members only: %+v", f.name, client.Spec)
		}
	}
}

func TestSchemaRefusesInvalidValues(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	tests := []struct {
		name  string
		over  map[string]any
		field string // named in the error
	}{
		{"replicas 0", map[string]any{"replicas": 0}, "replicas"},
		{"replicas 10", map[string]any{"replicas": 10}, "replicas"},
		{"replicas not an integer", map[string]any{"replicas": 2.5}, "replicas"},
		{"version latest", map[string]any{"etcd": map[string]any{"version": "latest"}}, "version"},
		{"version with v prefix", map[string]any{"etcd": map[string]any{"version": "v3.6.16"}}, "version"},
		{"unknown top-level key", map[string]any{"replica": 3}, "replica"},
		{"unknown etcd key", map[string]any{"etcd": map[string]any{"dataDir": "/x"}}, "dataDir"},
		{"extraArgs with dashes", map[string]any{"etcd": map[string]any{"extraArgs": map[string]any{"--log-level": "debug"}}}, "--log-level"},
		{"storage size", map[string]any{"storage": map[string]any{"size": "1 GB"}}, "size"},
		{"pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
		{"cluster state", map[string]any{"etcd": map[string]any{"initialClusterState": "joining"}}, "initialClusterState"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Render(f.release(), values.Merge(f.values, tt.over))
			if err == nil {
				t.Fatalf("Render accepted %v", tt.over)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not blame the schema and %s", err, tt.field)
			}
		})
	}
	// And the error is not cached as a success: the valid values still render.
	render(t, r, f.release(), f.values)
}

// nondeterministic are the template functions (Helm's and sprig's) whose output depends on
// randomness, the clock or the cluster. A chart that uses one renders differently each time,
// which would make every reconcile an apply and defeat the render cache.
var nondeterministic = regexp.MustCompile(`^(rand\w*|shuffle|uuidv4|genCA\w*|genPrivateKey|genSelfSignedCert\w*|genSignedCert\w*|htpasswd|bcrypt|encryptAES|lookup|now|ago|unixEpoch|date\w*|mustDate\w*|htmlDate\w*|toDate|mustToDate)$`)

var (
	action   = regexp.MustCompile(`(?s)\{\{-?(.*?)-?\}\}`)
	quoted   = regexp.MustCompile("(?s)\"(?:[^\"\\\\]|\\\\.)*\"|`[^`]*`")
	funcName = regexp.MustCompile(`(?:^|[^.\w$])([A-Za-z_]\w*)`)
)

// forbiddenCalls returns the nondeterministic functions that a template's actions name,
// ignoring comments, string literals and fields (.Values.now is fine).
func forbiddenCalls(tpl string) []string {
	var out []string
	for _, m := range action.FindAllStringSubmatch(tpl, -1) {
		body := strings.TrimSpace(m[1])
		if strings.HasPrefix(body, "/*") {
			continue
		}
		body = quoted.ReplaceAllString(body, `""`)
		for _, id := range funcName.FindAllStringSubmatch(body, -1) {
			if nondeterministic.MatchString(id[1]) {
				out = append(out, id[1])
			}
		}
	}
	return out
}

func TestForbiddenCallsFinds(t *testing.T) {
	tests := map[string][]string{
		`{{ now | date "2006" }}`:                         {"now", "date"},
		`{{- randAlphaNum 16 | b64enc }}`:                 {"randAlphaNum"},
		`{{ $ca := genCA "etcd" 365 }}`:                   {"genCA"},
		`{{ (lookup "v1" "Secret" "ns" "n").data }}`:      {"lookup"},
		`{{ include "x" (dict "a" (uuidv4)) }}`:           {"uuidv4"},
		`{{ .Values.now }} {{ $.Values.random }}`:         nil,
		`{{/* now and rand are fine in a comment */}}`:    nil,
		`{{ printf "lookup %s" .Release.Name }}`:          nil,
		`{{ default "now" .Values.x }} now outside {{ }}`: nil,
	}
	for tpl, want := range tests {
		if got := forbiddenCalls(tpl); !reflect.DeepEqual(got, want) {
			t.Errorf("forbiddenCalls(%q) = %v, want %v", tpl, got, want)
		}
	}
}

func TestChartIsDeterministic(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(charts.ChartDir, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no templates found")
	}
	sort.Strings(paths)
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

// BenchmarkRenderCold renders values the cache has not seen: each iteration is for another
// release, so it is a true miss (Helm's engine, sorting and decoding).
func BenchmarkRenderCold(b *testing.B) {
	f := fixtureNamed(b, "five-members-tuned")
	r := newRenderer(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rel := charts.Release{Name: fmt.Sprintf("cold-%d", i), Namespace: f.cluster.Namespace}
		if _, err := r.Render(rel, f.values); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderWarm renders values the cache holds: hashing the values and copying the
// cached objects.
func BenchmarkRenderWarm(b *testing.B) {
	f := fixtureNamed(b, "five-members-tuned")
	r := newRenderer(b)
	if _, err := r.Render(f.release(), f.values); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Render(f.release(), f.values); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRenderClientSwitchPhases renders the phases a switch of the client port between plain
// and TLS passes through (internal/plan/tlsswitch picks them), for a spec that asks for TLS
// (plain -> Both -> TLS) and for one that no longer has tls.client (TLS -> Both -> plain, the
// Secret taken from the live pod template).
func TestRenderClientSwitchPhases(t *testing.T) {
	r := newRenderer(t)
	on := fixtureNamed(t, "tls").cluster.DeepCopy()
	on.Spec.TLS.Peer = nil
	off := on.DeepCopy()
	off.Spec.TLS = nil
	auth := true
	for _, c := range []struct {
		name    string
		cluster *v1alpha1.EtcdCluster
		phase   values.Phase
		listen  string
	}{
		{"switch-on-both", on, values.Phase{Client: v1alpha1.ClientTLSBoth}, "https://$(POD_IP):2379,http://$(POD_IP):2379"},
		{"switch-on-tls", on, values.Phase{Client: v1alpha1.ClientTLSOnly}, "https://$(POD_IP):2379"},
		{"switch-off-both", off, values.Phase{Client: v1alpha1.ClientTLSBoth,
			LiveClient: &charts.TLSSideValues{SecretName: "secure-server-tls", ClientCertAuth: &auth}}, "https://$(POD_IP):2379,http://$(POD_IP):2379"},
		{"switch-off-plain", off, values.Phase{Client: v1alpha1.ClientTLSPlain}, "http://$(POD_IP):2379"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := values.ComputeAt(c.cluster, values.DefaultOperator(), memory.Of(c.cluster), c.phase)
			if err != nil {
				t.Fatal(err)
			}
			var sts []*unstructured.Unstructured
			for _, o := range render(t, r, charts.Release{Name: c.cluster.Name, Namespace: c.cluster.Namespace}, v) {
				if o.GetKind() == "StatefulSet" {
					sts = append(sts, o)
				}
			}
			got := stream(t, sts)
			if !bytes.Contains(got, []byte("--listen-client-urls="+c.listen+"\n")) {
				t.Errorf("the StatefulSet does not listen on %s", c.listen)
			}
			testutil.Golden(t, filepath.Join(goldenDir, c.name+".yaml"), got, *update, "go test ./charts -update")
		})
	}
	if _, err := values.ComputeAt(off, values.DefaultOperator(), memory.Of(off), values.Phase{Client: v1alpha1.ClientTLSBoth}); err == nil || !strings.Contains(err.Error(), "put tls.client back") {
		t.Errorf("a TLS phase without tls.client nor a live Secret: %v, want a refusal", err)
	}
}

// TestRenderPeerSwitchPhases renders the phases a switch of the peer side between plain and
// TLS passes through (internal/plan/peerswitch picks them): a second peer listener on the
// transition port, the peer certificate mounted whenever a listener is https (from the spec,
// or from the live pod template once tls.peer is gone), the advertised URL on the transition
// port while URLs move towards it, and the transition port admitted by the NetworkPolicy.
func TestRenderPeerSwitchPhases(t *testing.T) {
	r := newRenderer(t)
	on := fixtureNamed(t, "tls").cluster.DeepCopy()
	on.Spec.TLS.Client = nil
	on.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), RestrictEgress: true}
	off := on.DeepCopy()
	off.Spec.TLS = nil
	for _, c := range []struct {
		name      string
		cluster   *v1alpha1.EtcdCluster
		phase     values.PeerPhase
		listen    string
		advertise string
		certs     bool
	}{
		{"peer-switch-on-1", on, values.PeerPhase{Main: "http", Transition: "https", AdvertiseTransition: true},
			"http://$(POD_IP):2380,https://$(POD_IP):2382", "https://$(POD_NAME).secure.prod.svc.cluster.local:2382", true},
		{"peer-switch-on-2", on, values.PeerPhase{Main: "https", Transition: "https"},
			"https://$(POD_IP):2380,https://$(POD_IP):2382", "https://$(POD_NAME).secure.prod.svc.cluster.local:2380", true},
		{"peer-switch-off-1", off, values.PeerPhase{Main: "https", Transition: "http", AdvertiseTransition: true, LiveSecret: "secure-peer-tls"},
			"https://$(POD_IP):2380,http://$(POD_IP):2382", "http://$(POD_NAME).secure.prod.svc.cluster.local:2382", true},
		{"peer-switch-off-2", off, values.PeerPhase{Main: "http", Transition: "http", LiveSecret: "secure-peer-tls"},
			"http://$(POD_IP):2380,http://$(POD_IP):2382", "http://$(POD_NAME).secure.prod.svc.cluster.local:2380", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := values.ComputeAt(c.cluster, values.DefaultOperator(), memory.Of(c.cluster), values.Phase{Peer: &c.phase})
			if err != nil {
				t.Fatal(err)
			}
			var objs []*unstructured.Unstructured
			for _, o := range render(t, r, charts.Release{Name: c.cluster.Name, Namespace: c.cluster.Namespace}, v) {
				if o.GetKind() == "StatefulSet" || o.GetKind() == "NetworkPolicy" {
					objs = append(objs, o)
				}
			}
			got := stream(t, objs)
			for _, want := range []string{"--listen-peer-urls=" + c.listen + "\n", "--initial-advertise-peer-urls=" + c.advertise + "\n", "name: peer-transition\n", "port: 2382\n"} {
				if !bytes.Contains(got, []byte(want)) {
					t.Errorf("the render has no %q", want)
				}
			}
			if has := bytes.Contains(got, []byte("--peer-cert-file=")); has != c.certs {
				t.Errorf("peer certificate flags: %v, want %v", has, c.certs)
			}
			testutil.Golden(t, filepath.Join(goldenDir, c.name+".yaml"), got, *update, "go test ./charts -update")
		})
	}
	if _, err := values.ComputeAt(off, values.DefaultOperator(), memory.Of(off), values.Phase{Peer: &values.PeerPhase{Main: "https", Transition: "http"}}); err == nil || !strings.Contains(err.Error(), "put tls.peer back") {
		t.Errorf("a TLS peer phase without tls.peer nor a live Secret: %v, want a refusal", err)
	}
}

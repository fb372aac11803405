package values_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"k8s.io/utils/ptr"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// fixtureDir holds the EtcdCluster fixtures shared with the charts package's golden tests.
const fixtureDir = "../../charts/testdata/fixtures"

// fixtures returns every fixture by name (the file name without .yaml).
func fixtures(t *testing.T) map[string]*v1alpha1.EtcdCluster {
	out := map[string]*v1alpha1.EtcdCluster{}
	for _, f := range testutil.Fixtures(t, fixtureDir) {
		out[f.Name] = f.Cluster
	}
	return out
}

func TestComputeGolden(t *testing.T) {
	for name, c := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			v, err := values.Compute(c, values.DefaultOperator())
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			got, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, filepath.Join("testdata", name+".values.yaml"), got, *update, "go test ./internal/values -update")
		})
	}
}

func TestComputeIsDeterministic(t *testing.T) {
	for name, c := range fixtures(t) {
		a, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := values.Compute(c.DeepCopy(), values.DefaultOperator())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two computations differ:\n%v\n%v", name, a, b)
		}
	}
}

// deepCopyMap copies a JSON-like map, so a test can check that Merge left its inputs alone.
func deepCopyMap(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	if m == nil {
		return nil
	}
	return runtime.DeepCopyJSON(m)
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name       string
		base, over map[string]any
		want       map[string]any
	}{{
		name: "empty over keeps base",
		base: map[string]any{"replicas": int64(3)},
		over: map[string]any{},
		want: map[string]any{"replicas": int64(3)},
	}, {
		name: "nil base",
		base: nil,
		over: map[string]any{"replicas": int64(5)},
		want: map[string]any{"replicas": int64(5)},
	}, {
		name: "nested maps merge key by key",
		base: map[string]any{"etcd": map[string]any{"version": "3.6.16", "extraArgs": map[string]any{"log-level": "info"}}},
		over: map[string]any{"etcd": map[string]any{"clusterDomain": "example.local", "extraArgs": map[string]any{"max-txn-ops": "256"}}},
		want: map[string]any{"etcd": map[string]any{
			"version":       "3.6.16",
			"clusterDomain": "example.local",
			"extraArgs":     map[string]any{"log-level": "info", "max-txn-ops": "256"},
		}},
	}, {
		name: "scalar replaces scalar",
		base: map[string]any{"replicas": int64(3), "priorityClassName": "a"},
		over: map[string]any{"priorityClassName": "b"},
		want: map[string]any{"replicas": int64(3), "priorityClassName": "b"},
	}, {
		name: "lists replace, never append",
		base: map[string]any{"tolerations": []any{map[string]any{"key": "a"}}},
		over: map[string]any{"tolerations": []any{map[string]any{"key": "b"}}},
		want: map[string]any{"tolerations": []any{map[string]any{"key": "b"}}},
	}, {
		name: "scalar replaces map",
		base: map[string]any{"affinity": map[string]any{"nodeAffinity": map[string]any{}}},
		over: map[string]any{"affinity": "none"},
		want: map[string]any{"affinity": "none"},
	}, {
		name: "map replaces scalar",
		base: map[string]any{"resources": "none"},
		over: map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}},
		want: map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}},
	}, {
		name: "nil deletes a top-level key",
		base: map[string]any{"replicas": int64(3), "nodeSelector": map[string]any{"a": "b"}},
		over: map[string]any{"nodeSelector": nil},
		want: map[string]any{"replicas": int64(3)},
	}, {
		name: "nil deletes a nested key",
		base: map[string]any{"podLabels": map[string]any{"a": "1", "b": "2"}},
		over: map[string]any{"podLabels": map[string]any{"a": nil}},
		want: map[string]any{"podLabels": map[string]any{"b": "2"}},
	}, {
		name: "nil for a missing key is a no-op",
		base: map[string]any{"replicas": int64(3)},
		over: map[string]any{"missing": nil},
		want: map[string]any{"replicas": int64(3)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, over := deepCopyMap(t, tt.base), deepCopyMap(t, tt.over)
			got := values.Merge(tt.base, tt.over)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Merge() = %#v, want %#v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.base, base) {
				t.Errorf("Merge changed base: %#v, was %#v", tt.base, base)
			}
			if !reflect.DeepEqual(tt.over, over) {
				t.Errorf("Merge changed over: %#v, was %#v", tt.over, over)
			}
		})
	}
}

func TestTypedRefusesExtraArgs(t *testing.T) {
	tests := []struct {
		name      string
		args      map[string]v1alpha1.EtcdFlagValue
		wantNames []string // each must appear in the error
		notNamed  string   // an allowed flag that must not appear
	}{{
		name:      "owned",
		args:      map[string]v1alpha1.EtcdFlagValue{"data-dir": "/tmp", "initial-cluster": "x=http://x"},
		wantNames: []string{"owned by etcd-pilot", "data-dir", "initial-cluster"},
	}, {
		name:      "unsafe",
		args:      map[string]v1alpha1.EtcdFlagValue{"force-new-cluster": "true", "unsafe-no-fsync": "true"},
		wantNames: []string{"owned by etcd-pilot", "force-new-cluster", "unsafe-no-fsync"},
	}, {
		name:      "typed",
		args:      map[string]v1alpha1.EtcdFlagValue{"quota-backend-bytes": "1", "heartbeat-interval": "100"},
		wantNames: []string{"typed fields", "quota-backend-bytes", "heartbeat-interval"},
	}, {
		name:      "unknown",
		args:      map[string]v1alpha1.EtcdFlagValue{"no-such-flag": "1", "--log-level": "debug"},
		wantNames: []string{"unknown", "no-such-flag", "--log-level"},
	}, {
		name:      "all three kinds at once, allowed ones not named",
		args:      map[string]v1alpha1.EtcdFlagValue{"name": "x", "snapshot-count": "1", "bogus": "1", "log-level": "debug"},
		wantNames: []string{"name", "snapshot-count", "bogus"},
		notNamed:  "log-level",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{}
			c.Name = "c"
			c.Spec.Etcd.ExtraArgs = tt.args
			_, err := values.Typed(c, values.DefaultOperator())
			if err == nil {
				t.Fatalf("Typed accepted extraArgs %v", tt.args)
			}
			for _, n := range tt.wantNames {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("error %q does not name %q", err, n)
				}
			}
			if tt.notNamed != "" && strings.Contains(err.Error(), tt.notNamed) {
				t.Errorf("error %q names the allowed flag %s", err, tt.notNamed)
			}
			if _, err := values.Compute(c, values.DefaultOperator()); err == nil {
				t.Errorf("Compute accepted extraArgs %v", tt.args)
			}
		})
	}

	t.Run("allowed flags pass", func(t *testing.T) {
		c := &v1alpha1.EtcdCluster{}
		c.Spec.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"log-level": "debug", "max-request-bytes": "1048576", "experimental-initial-corrupt-check": "true"}
		v, err := values.Typed(c, values.DefaultOperator())
		if err != nil {
			t.Fatalf("Typed: %v", err)
		}
		if want := map[string]string{"log-level": "debug", "max-request-bytes": "1048576", "experimental-initial-corrupt-check": "true"}; !reflect.DeepEqual(v.Etcd.ExtraArgs, want) {
			t.Errorf("extraArgs = %v, want %v", v.Etcd.ExtraArgs, c.Spec.Etcd.ExtraArgs)
		}
	})
}

func TestTypedDefaults(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "d", "ns"
	v, err := values.Typed(c, values.DefaultOperator())
	if err != nil {
		t.Fatal(err)
	}
	if v.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", v.Replicas)
	}
	if v.Etcd.Version != v1alpha1.DefaultVersion {
		t.Errorf("etcd.version = %q, want %q", v.Etcd.Version, v1alpha1.DefaultVersion)
	}
	if v.Storage.Size != "1Gi" {
		t.Errorf("storage.size = %q, want 1Gi", v.Storage.Size)
	}
	if v.Storage.Ephemeral || v.Storage.StorageClassName != "" {
		t.Errorf("storage = %+v, want persistent on the default class", v.Storage)
	}
	if v.Image.Repository != "" {
		t.Errorf("image.repository = %q, want empty (the chart's default)", v.Image.Repository)
	}
	if v.ManagedBy != v1alpha1.ManagedByValue || v.CommonLabels[v1alpha1.LabelCluster] != "d" {
		t.Errorf("managedBy = %q, commonLabels = %v: want the inventory", v.ManagedBy, v.CommonLabels)
	}

	// Explicit values win over the defaults.
	replicas, size := int32(5), resource.MustParse("10Gi")
	c.Spec.Replicas, c.Spec.Version, c.Spec.Storage.Size = &replicas, "3.5.35", &size
	v, err = values.Typed(c, values.DefaultOperator())
	if err != nil {
		t.Fatal(err)
	}
	if v.Replicas != 5 || v.Etcd.Version != "3.5.35" || v.Storage.Size != "10Gi" {
		t.Errorf("replicas, version, size = %d, %q, %q; want 5, 3.5.35, 10Gi", v.Replicas, v.Etcd.Version, v.Storage.Size)
	}
}

func TestTypedAutoCompaction(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	v, err := values.Typed(c, values.DefaultOperator())
	if err != nil {
		t.Fatal(err)
	}
	if v.Etcd.AutoCompactionMode != "" || v.Etcd.AutoCompactionRetention != "" {
		t.Errorf("auto compaction = %q/%q, want unset", v.Etcd.AutoCompactionMode, v.Etcd.AutoCompactionRetention)
	}
	c.Spec.Etcd.AutoCompactionRetention = "30m"
	if v, err = values.Typed(c, values.DefaultOperator()); err != nil {
		t.Fatal(err)
	}
	if v.Etcd.AutoCompactionMode != "periodic" {
		t.Errorf("mode = %q, want periodic when only a retention is set", v.Etcd.AutoCompactionMode)
	}
	c.Spec.Etcd.AutoCompactionMode, c.Spec.Etcd.AutoCompactionRetention = v1alpha1.AutoCompactionRevision, "10000"
	if v, err = values.Typed(c, values.DefaultOperator()); err != nil {
		t.Fatal(err)
	}
	if v.Etcd.AutoCompactionMode != "revision" || v.Etcd.AutoCompactionRetention != "10000" {
		t.Errorf("auto compaction = %q/%q, want revision/10000", v.Etcd.AutoCompactionMode, v.Etcd.AutoCompactionRetention)
	}
}

func TestClusterToken(t *testing.T) {
	tests := []struct {
		name, uid, want string
	}{
		{name: "c", uid: "", want: ""},
		{name: "c", uid: "0b0e3c52-2f0a-4c1e-8f5d-1d3e0c9a7b21", want: "c-0b0e3c52-2f0a-4c1e-8f5d-1d3e0c9a7b21"},
	}
	for _, tt := range tests {
		c := &v1alpha1.EtcdCluster{}
		c.Name, c.UID = tt.name, types.UID(tt.uid)
		v, err := values.Typed(c, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		if v.Etcd.ClusterToken != tt.want {
			t.Errorf("uid %q: clusterToken = %q, want %q", tt.uid, v.Etcd.ClusterToken, tt.want)
		}
		m, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		etcd := m["etcd"].(map[string]any)
		if got, ok := etcd["clusterToken"]; tt.want == "" && ok {
			// Left out, so the chart's own default ("<fullname>-<namespace>") applies.
			t.Errorf("uid %q: Compute set clusterToken %q, want it left out", tt.uid, got)
		} else if tt.want != "" && got != tt.want {
			t.Errorf("uid %q: Compute clusterToken = %v, want %q", tt.uid, got, tt.want)
		}
	}
}

func TestComputeKeepsInventory(t *testing.T) {
	tests := []struct {
		name      string
		overrides string
	}{
		// managedBy itself is refused (TestComputeRefusesGuardedChartValues).
		{"null commonLabels", `{"commonLabels": null}`},
		{"null cluster label", `{"commonLabels": {"etcdpilot.io/cluster": null}}`},
		{"other cluster label", `{"commonLabels": {"etcdpilot.io/cluster": "someone-else"}}`},
		{"commonLabels replaced by a scalar", `{"commonLabels": "none"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{}
			c.Name, c.Namespace = "inv", "ns"
			c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(tt.overrides)}
			m, err := values.Compute(c, values.DefaultOperator())
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			labels, ok := m["commonLabels"].(map[string]any)
			if !ok || labels[v1alpha1.LabelCluster] != "inv" {
				t.Errorf("commonLabels = %#v, want %s: inv", m["commonLabels"], v1alpha1.LabelCluster)
			}
			if m["managedBy"] != v1alpha1.ManagedByValue {
				t.Errorf("managedBy = %#v, want %q", m["managedBy"], v1alpha1.ManagedByValue)
			}
		})
	}

	t.Run("other labels are kept", func(t *testing.T) {
		c := &v1alpha1.EtcdCluster{}
		c.Name = "inv"
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"commonLabels": {"team": "a"}}`)}
		m, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{v1alpha1.LabelCluster: "inv", "team": "a"}
		if !reflect.DeepEqual(m["commonLabels"], want) {
			t.Errorf("commonLabels = %#v, want %#v", m["commonLabels"], want)
		}
	})
}

// guardedSample is a value of the JSON type t, as a user would write it.
func guardedSample(t string) any {
	switch t {
	case "string":
		return "x"
	case "integer":
		return 5
	case "boolean":
		return true
	case "object":
		return map[string]any{"a": "b"}
	case "array":
		return []any{map[string]any{"a": "b"}}
	}
	panic("no sample for type " + t)
}

// nested returns {"a": {"b": v}} for the path a.b.
func nested(path string, v any) map[string]any {
	parts := strings.Split(path, ".")
	out := map[string]any{parts[len(parts)-1]: v}
	for i := len(parts) - 2; i >= 0; i-- {
		out = map[string]any{parts[i]: out}
	}
	return out
}

func computeWithChartValues(t *testing.T, overrides any) (map[string]any, error) {
	t.Helper()
	raw, err := json.Marshal(overrides)
	if err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace, c.UID = "g", "ns", "0b0e3c52-2f0a-4c1e-8f5d-1d3e0c9a7b21"
	c.Spec.Chart.Values = &runtime.RawExtension{Raw: raw}
	return values.Compute(c, values.DefaultOperator())
}

// TestComputeRefusesGuardedChartValues checks that every key of v1alpha1.GuardedChartValues
// is refused with exactly its message, set to a value or to null (which would delete the
// computed value); api/v1alpha1's TestChartValuesGuardedKeys sends the same keys to the API
// server.
func TestComputeRefusesGuardedChartValues(t *testing.T) {
	for _, g := range v1alpha1.GuardedChartValues {
		for _, v := range []any{guardedSample(g.Type), nil} {
			t.Run(fmt.Sprintf("%s=%v", g.Path, v), func(t *testing.T) {
				_, err := computeWithChartValues(t, nested(g.Path, v))
				if err == nil {
					t.Fatalf("Compute accepted spec.chart.values.%s", g.Path)
				}
				if err.Error() != g.Message() {
					t.Errorf("error %q, want %q", err, g.Message())
				}
				if !strings.HasPrefix(err.Error(), "spec.chart.values."+g.Path+": ") {
					t.Errorf("error %q does not start with the key", err)
				}
			})
		}
	}

	t.Run("every key is reported, in list order", func(t *testing.T) {
		overrides := map[string]any{}
		var want []string
		for _, g := range v1alpha1.GuardedChartValues {
			overrides = values.Merge(overrides, nested(g.Path, guardedSample(g.Type)))
			want = append(want, g.Message())
		}
		_, err := computeWithChartValues(t, overrides)
		if err == nil || err.Error() != strings.Join(want, "; ") {
			t.Errorf("error %v\nwant %s", err, strings.Join(want, "; "))
		}
	})

	// A parent of guarded keys that is not an object would replace or delete them all.
	parents := []struct {
		name, overrides, want string
	}{
		{"null etcd", `{"etcd": null}`, "spec.chart.values.etcd: must be an object: a null would delete"},
		{"string image", `{"image": "etcd:latest"}`, "spec.chart.values.image: must be an object: a string would replace"},
		{"number storage", `{"storage": 5}`, "spec.chart.values.storage: must be an object: a number would replace"},
		{"list etcd, reported once", `{"etcd": [1]}`, "spec.chart.values.etcd: must be an object: a list would replace"},
	}
	for _, tt := range parents {
		t.Run(tt.name, func(t *testing.T) {
			var overrides any
			if err := json.Unmarshal([]byte(tt.overrides), &overrides); err != nil {
				t.Fatal(err)
			}
			_, err := computeWithChartValues(t, overrides)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), ";") {
				t.Errorf("error %v, want one refusal starting %q", err, tt.want)
			}
		})
	}
}

// TestComputeKeepsOpenChartValues checks that keys which only shape the pods and Services
// still pass and land in the values.
func TestComputeKeepsOpenChartValues(t *testing.T) {
	open := []string{
		`{"imagePullSecrets": [{"name": "pull"}]}`,
		`{"image": {"pullPolicy": "Always"}}`,
		`{"podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}}`,
		`{"terminationGracePeriodSeconds": 120}`,
		`{"serviceAccount": {"create": false, "name": "etcd"}}`,
		`{"service": {"type": "NodePort", "annotations": {"a": "b"}}}`,
		`{"podDisruptionBudget": {"enabled": false}}`,
		`{"commonLabels": {"team": "a"}}`,
		`{"etcd": {"clusterDomain": "cluster.example"}}`,
		`{"etcd": {"clientPort": 12379, "peerPort": 12380, "metricsPort": 12381}}`,
		`{"storage": {}}`,
		`{}`,
	}
	for _, raw := range open {
		t.Run(raw, func(t *testing.T) {
			var overrides map[string]any
			if err := json.Unmarshal([]byte(raw), &overrides); err != nil {
				t.Fatal(err)
			}
			got, err := computeWithChartValues(t, overrides)
			if err != nil {
				t.Fatalf("Compute refused %s: %v", raw, err)
			}
			// What was set is in the result (commonLabels gains the inventory label).
			if merged := values.Merge(got, overrides); !reflect.DeepEqual(merged, got) {
				t.Errorf("the values do not hold %s:\n%#v", raw, got)
			}
		})
	}
}

func TestComputeRefusesNonObjectChartValues(t *testing.T) {
	for _, raw := range []string{`[1, 2]`, `"replicas"`, `3`} {
		c := &v1alpha1.EtcdCluster{}
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(raw)}
		if _, err := values.Compute(c, values.DefaultOperator()); err == nil {
			t.Errorf("Compute accepted spec.chart.values %s", raw)
		}
	}
}

// The typed values marshal to plain JSON types, so the render cache key and the values file
// of `helm template -f` see the same data.
func TestComputeIsJSONRoundTrippable(t *testing.T) {
	for name, c := range fixtures(t) {
		m, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Errorf("%s: values change through JSON:\n%#v\n%#v", name, m, back)
		}
	}
}

// TestTypedVersionSteps checks that the rendered version is the next step towards
// spec.version from the versions etcd reports in status, and that a version below the
// cluster version is refused.
func TestTypedVersionSteps(t *testing.T) {
	cases := []struct {
		spec, clusterVersion, current, want, wantErr string
	}{
		{spec: "3.7.3", want: "3.7.3"},
		{spec: "3.7.3", clusterVersion: "3.5.0", current: "3.5.35", want: "3.6.16"},
		{spec: "3.7.3", clusterVersion: "3.6.0", current: "3.6.16", want: "3.7.3"},
		{spec: "3.6.16", clusterVersion: "3.5.0", current: "3.5.15", want: "3.5.35"},
		{spec: "3.5.35", clusterVersion: "3.5.0", current: "3.5.35", want: "3.5.35"},
		{spec: "3.5.35", clusterVersion: "3.6.0", current: "3.6.16", wantErr: "older than the cluster version 3.6"},
	}
	for _, tc := range cases {
		c := &v1alpha1.EtcdCluster{}
		c.Spec.Version, c.Status.ClusterVersion, c.Status.CurrentVersion = tc.spec, tc.clusterVersion, tc.current
		v, err := values.Typed(c, values.DefaultOperator())
		if tc.wantErr != "" {
			var ve *values.VersionError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: error %v, want a VersionError holding %q", tc, err, tc.wantErr)
			}
			continue
		}
		if err != nil || v.Etcd.Version != tc.want {
			t.Errorf("%+v: version %q, error %v; want %s", tc, v.Etcd.Version, err, tc.want)
		}
	}
}

func TestTrustGenerationRestartsMembersOnlyWithTLS(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "e", "ns"
	c.Spec.PodAnnotations = map[string]string{"team": "db"}
	c.Status.TrustGeneration = 2
	v, err := values.Typed(c, values.DefaultOperator())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.PodAnnotations[v1alpha1.AnnotationTrustGeneration]; ok {
		t.Fatal("a cluster without TLS carries a trust generation")
	}
	c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}}
	v, err = values.Typed(c, values.DefaultOperator())
	if err != nil {
		t.Fatal(err)
	}
	if v.PodAnnotations[v1alpha1.AnnotationTrustGeneration] != "2" || v.PodAnnotations["team"] != "db" {
		t.Fatalf("pod annotations %v", v.PodAnnotations)
	}
	if _, ok := c.Spec.PodAnnotations[v1alpha1.AnnotationTrustGeneration]; ok {
		t.Fatal("the spec's map was changed")
	}
}

func TestNetworkPolicyValues(t *testing.T) {
	op := values.Operator{Namespace: "ops", PodLabels: map[string]string{"app": "pilot"}}
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "np", "db"

	// Off (absent or enabled: false): no networkPolicy key at all, so the chart's default
	// (no policy) holds and clusters without one render as before, whatever the operator.
	for _, spec := range []*v1alpha1.NetworkPolicySpec{nil, {AllowedClients: []v1alpha1.NetworkPolicyPeer{{PodSelector: &v1alpha1.LabelSelector{}}}}} {
		c.Spec.NetworkPolicy = spec
		a, err := values.Compute(c, op)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a["networkPolicy"]; ok {
			t.Errorf("networkPolicy %+v: values hold networkPolicy %v", spec, a["networkPolicy"])
		}
		b, err := values.Compute(c, values.Operator{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("networkPolicy %+v: the operator's identity changes the values of a cluster without a policy", spec)
		}
	}

	c.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{
		Enabled:        ptr.To(true),
		RestrictEgress: true,
		AllowedClients: []v1alpha1.NetworkPolicyPeer{
			{NamespaceSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "apps"}}},
			{PodSelector: &v1alpha1.LabelSelector{MatchExpressions: []v1alpha1.LabelSelectorRequirement{{Key: "tier", Operator: "NotIn", Values: []string{"web"}}}}},
			{IPBlock: &v1alpha1.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"192.0.2.128/25"}}},
		},
		AllowedMetricsClients: []v1alpha1.NetworkPolicyPeer{{NamespaceSelector: &v1alpha1.LabelSelector{}}},
	}
	m, err := values.Compute(c, op)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"enabled":        true,
		"restrictEgress": true,
		"allowedClients": []any{
			map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "apps"}}},
			map[string]any{"podSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "NotIn", "values": []any{"web"}}}}},
			map[string]any{"ipBlock": map[string]any{"cidr": "192.0.2.0/24", "except": []any{"192.0.2.128/25"}}},
		},
		// {} stays {}: every namespace, not "no selector".
		"allowedMetricsClients": []any{map[string]any{"namespaceSelector": map[string]any{}}},
		"operator": map[string]any{
			"namespace":      "ops",
			"podLabels":      map[string]any{"app": "pilot"},
			"agentPodLabels": map[string]any{v1alpha1.LabelCluster: "np", values.LabelComponent: "backup"},
		},
	}
	if !reflect.DeepEqual(m["networkPolicy"], want) {
		t.Errorf("networkPolicy values\n%#v\nwant\n%#v", m["networkPolicy"], want)
	}

	// An operator whose namespace is unknown is left out; its backup pods are not.
	m, err = values.Compute(c, values.Operator{})
	if err != nil {
		t.Fatal(err)
	}
	got := m["networkPolicy"].(map[string]any)["operator"]
	if !reflect.DeepEqual(got, map[string]any{"agentPodLabels": map[string]any{v1alpha1.LabelCluster: "np", values.LabelComponent: "backup"}}) {
		t.Errorf("operator values without a namespace: %#v", got)
	}
}

// TestDefaultOperatorIsTheDeployment keeps values.DefaultOperator in step with
// config/manager/manager.yaml: the namespace the Deployment runs in, and labels its pods
// carry (the policy selects them by these).
func TestDefaultOperatorIsTheDeployment(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	op := values.DefaultOperator()
	found := false
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		found = true
		if d.Namespace != op.Namespace {
			t.Errorf("the Deployment runs in %q, DefaultOperator says %q", d.Namespace, op.Namespace)
		}
		for k, v := range op.PodLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("the Deployment's pods carry %v, not %s=%s", d.Spec.Template.Labels, k, v)
			}
		}
		var podNamespace bool
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			podNamespace = podNamespace || (e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !podNamespace {
			t.Errorf("the Deployment does not set POD_NAMESPACE from metadata.namespace: the operator would not know its namespace")
		}
	}
	if !found {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
	if l, err := labels.ConvertSelectorToLabelsMap(values.DefaultOperatorPodLabels); err != nil || !reflect.DeepEqual(map[string]string(l), op.PodLabels) {
		t.Errorf("DefaultOperatorPodLabels %q parses to %v (%v), DefaultOperator has %v", values.DefaultOperatorPodLabels, l, err, op.PodLabels)
	}
}

// TestTypedAtTakesThePassMemory: a pass's render depends on the memory it loaded at its
// start, not on what the object's status holds by the time it renders (a certificates step
// earlier in the pass may have recorded a new trust generation in status).
func TestTypedAtTakesThePassMemory(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace = "e", "ns"
	c.Spec.Version = "3.7.3"
	c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}}
	c.Status.ClusterVersion, c.Status.CurrentVersion, c.Status.TrustGeneration = "3.6.0", "3.6.16", 3
	m := memory.Memory{Running: versions.Running{ClusterVersion: "3.5.0", Lowest: "3.5.35"}, TrustGeneration: 2}
	v, err := values.TypedAt(c, values.DefaultOperator(), m, values.Phase{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Etcd.Version != "3.6.16" || v.PodAnnotations[v1alpha1.AnnotationTrustGeneration] != "2" {
		t.Fatalf("version %s, trust generation %q: want the memory's step 3.6.16 and generation 2", v.Etcd.Version, v.PodAnnotations[v1alpha1.AnnotationTrustGeneration])
	}
	// Outside a pass (etcd-pilot render), the memory is what the object's status records.
	if v, err = values.Typed(c, values.DefaultOperator()); err != nil || v.Etcd.Version != "3.7.3" || v.PodAnnotations[v1alpha1.AnnotationTrustGeneration] != "3" {
		t.Fatalf("Typed: version %s, generation %q, error %v", v.Etcd.Version, v.PodAnnotations[v1alpha1.AnnotationTrustGeneration], err)
	}
}

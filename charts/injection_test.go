package charts_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// hostileValues are chart values that tried to write more into a manifest than their own
// field: a line break followed by what a template would take as another list item or key.
var hostileValues = []struct {
	name   string
	values map[string]any
	// schema is a part of the schema's refusal.
	schema string
	// escaped reports whether the render without the schema kept the value inside its field.
	escaped func(t *testing.T, sts *appsv1.StatefulSet) bool
}{
	{name: "extraArgs value with a second flag",
		values: map[string]any{"etcd": map[string]any{"extraArgs": map[string]any{"log-level": "info\n            - --client-cert-auth=false"}}},
		schema: "/etcd/extraArgs/log-level",
		escaped: func(t *testing.T, sts *appsv1.StatefulSet) bool {
			return hasArg(sts, "--client-cert-auth")
		}},
	{name: "clusterDomain with a second flag",
		values: map[string]any{"etcd": map[string]any{"clusterDomain": "cluster.local\n            - --unsafe-no-fsync=true"}},
		schema: "/etcd/clusterDomain",
		escaped: func(t *testing.T, sts *appsv1.StatefulSet) bool {
			return hasArg(sts, "--unsafe-no-fsync")
		}},
	{name: "serviceAccount name with a pod field",
		values: map[string]any{"serviceAccount": map[string]any{"create": false, "name": "etcd\n      hostNetwork: true"}},
		schema: "/serviceAccount/name",
		escaped: func(t *testing.T, sts *appsv1.StatefulSet) bool {
			return sts.Spec.Template.Spec.HostNetwork
		}},
	{name: "claim label key with a claim field",
		values: map[string]any{"storage": map[string]any{"claimLabels": map[string]any{"a: b\n        namespace": "other"}}},
		schema: "/storage/claimLabels",
		escaped: func(t *testing.T, sts *appsv1.StatefulSet) bool {
			return sts.Spec.VolumeClaimTemplates[0].Labels["a"] == "b"
		}},
}

// hasArg reports whether the etcd container has an argument that starts with prefix.
func hasArg(sts *appsv1.StatefulSet, prefix string) bool {
	for _, a := range sts.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

// TestSchemaRefusesHostileValues: values.schema.json refuses each hostile value, so neither
// `helm template` nor the operator renders it.
func TestSchemaRefusesHostileValues(t *testing.T) {
	r := newRenderer(t)
	for _, h := range hostileValues {
		t.Run(h.name, func(t *testing.T) {
			_, err := r.Render(chartAloneRelease, values.Merge(r.DefaultValues(), h.values))
			if err == nil {
				t.Fatal("the chart's schema accepted the values")
			}
			if !strings.Contains(err.Error(), h.schema) {
				t.Errorf("the refusal does not name %s: %v", h.schema, err)
			}
		})
	}
}

// TestTemplatesQuoteWhatTheyWrite renders a copy of the chart without values.schema.json
// (a platform team's copy, or `helm template --skip-schema-validation`): each hostile value
// must stay inside its own field, because the templates quote what they write.
func TestTemplatesQuoteWhatTheyWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(charts.ChartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "values.schema.json")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if _, err := fs.Stat(os.DirFS(dir), "Chart.yaml"); err != nil {
		t.Fatal(err)
	}
	r, err := charts.FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hostileValues {
		t.Run(h.name, func(t *testing.T) {
			objs, err := r.Render(chartAloneRelease, h.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			sts := statefulSetOf(t, objs)
			if h.escaped(t, sts) {
				t.Fatalf("the value escaped its field: args %q", sts.Spec.Template.Spec.Containers[0].Args)
			}
		})
	}
}

func statefulSetOf(t *testing.T, objs []*unstructured.Unstructured) *appsv1.StatefulSet {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" {
			sts := &appsv1.StatefulSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
				t.Fatal(err)
			}
			return sts
		}
	}
	t.Fatal("no StatefulSet rendered")
	return nil
}

package postrender

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func sts() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": "etcd", "namespace": "ns"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "etcd", "image": "etcd:v3", "env": []any{map[string]any{"name": "A", "value": "1"}}},
			map[string]any{"name": "sidecar", "image": "s:1"},
		}}}},
	}}
}

func svc(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"spec":     map[string]any{"ports": []any{map[string]any{"name": "client", "port": int64(2379)}}},
	}}
}

func custom() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns"},
		"spec":     map[string]any{"items": []any{"a", "b"}, "keep": "yes"},
	}}
}

func raw(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

func TestStrategicMergeMergesListsByTheirKey(t *testing.T) {
	objs := []*unstructured.Unstructured{sts(), svc("etcd-client")}
	err := Apply(objs, []v1alpha1.ChartPatch{{
		Target:         v1alpha1.PatchTarget{Kind: "StatefulSet"},
		StrategicMerge: raw(`{"spec":{"template":{"spec":{"containers":[{"name":"etcd","env":[{"name":"GODEBUG","value":"x"}]}]}}}}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	cs, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	if len(cs) != 2 {
		t.Fatalf("containers %v: the merge replaced the list instead of merging by name", cs)
	}
	etcd := cs[0].(map[string]any)
	if etcd["image"] != "etcd:v3" || len(etcd["env"].([]any)) != 2 {
		t.Fatalf("etcd container %v: want the image kept and the env var added", etcd)
	}
}

func TestJSONPatchAndNumbersComeOutAsInt64(t *testing.T) {
	objs := []*unstructured.Unstructured{sts(), svc("etcd-client"), svc("etcd")}
	err := Apply(objs, []v1alpha1.ChartPatch{{
		Target: v1alpha1.PatchTarget{Kind: "Service", Name: "etcd-client"},
		JSON: []v1alpha1.JSONPatchOperation{
			{Op: "add", Path: "/metadata/annotations", Value: raw(`{"lb.example.com/internal":"true"}`)},
			{Op: "add", Path: "/spec/ports/-", Value: raw(`{"name":"extra","port":9000}`)},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if objs[1].GetAnnotations()["lb.example.com/internal"] != "true" {
		t.Fatalf("annotations %v", objs[1].GetAnnotations())
	}
	ports, _, _ := unstructured.NestedSlice(objs[1].Object, "spec", "ports")
	if p, ok := ports[1].(map[string]any)["port"].(int64); !ok || p != 9000 {
		t.Fatalf("port %#v: want int64 9000", ports[1])
	}
	if objs[2].GetAnnotations() != nil {
		t.Fatal("the patch reached a Service it does not name")
	}
}

func TestCustomKindsGetAMergePatch(t *testing.T) {
	objs := []*unstructured.Unstructured{custom()}
	if err := Apply(objs, []v1alpha1.ChartPatch{{Target: v1alpha1.PatchTarget{Kind: "Widget", Group: "example.com"}, StrategicMerge: raw(`{"spec":{"items":["c"]}}`)}}); err != nil {
		t.Fatal(err)
	}
	items, _, _ := unstructured.NestedStringSlice(objs[0].Object, "spec", "items")
	keep, _, _ := unstructured.NestedString(objs[0].Object, "spec", "keep")
	if strings.Join(items, ",") != "c" || keep != "yes" {
		t.Fatalf("items %v keep %q: want RFC 7386 semantics", items, keep)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		patch v1alpha1.ChartPatch
		want  string
	}{
		{"selects nothing", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Deployment"}, StrategicMerge: raw(`{}`)}, "spec.chart.patches[0] selects any Deployment, which the chart does not render"},
		{"wrong name", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service", Name: "nope"}, StrategicMerge: raw(`{}`)}, "selects Service nope"},
		{"renames", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "replace", Path: "/metadata/name", Value: raw(`"other"`)}}}, "may not change an object's apiVersion, kind, name or namespace"},
		{"failed test", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "test", Path: "/spec/ports/0/port", Value: raw(`1`)}}}, "failed to apply the JSON patch"},
		{"missing path", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "remove", Path: "/spec/nothing"}}}, "failed on Service etcd-client"},
		{"not an object", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, StrategicMerge: raw(`[1]`)}, "strategicMerge must be an object"},
		{"root test without value", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "test", Path: ""}}}, `path "" must start with /`},
		{"add without value", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/metadata/labels"}}}, "add needs value"},
		{"a label that is not a string", v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "Service"}, StrategicMerge: raw(`{"metadata":{"annotations":{"scrape":true}}}`)}, "metadata.annotations must map strings to strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []*unstructured.Unstructured{svc("etcd-client")}
			err := Apply(objs, []v1alpha1.ChartPatch{tc.patch})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// BenchmarkApply times a strategic-merge and a JSON patch over a StatefulSet and a Service,
// as every pass of a cluster with spec.chart.patches runs them.
func BenchmarkApply(b *testing.B) {
	patches := []v1alpha1.ChartPatch{
		{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, StrategicMerge: raw(`{"spec":{"template":{"spec":{"containers":[{"name":"etcd","env":[{"name":"GODEBUG","value":"x"}]}]}}}}`)},
		{Target: v1alpha1.PatchTarget{Kind: "Service"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/metadata/annotations", Value: raw(`{"a":"b"}`)}}},
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := Apply([]*unstructured.Unstructured{sts(), svc("etcd-client")}, patches); err != nil {
			b.Fatal(err)
		}
	}
}

package postrender

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// FuzzApply applies patches of any content (a JSON list of spec.chart.patches) to a
// StatefulSet, a Service and an object of a custom kind. It must not panic; a patch either
// fails with a message or leaves every object with its kind, name and namespace, its labels
// and annotations strings, and content that encodes to JSON.
func FuzzApply(f *testing.F) {
	for _, s := range []string{
		`[{"target":{"kind":"StatefulSet"},"strategicMerge":{"spec":{"template":{"spec":{"containers":[{"name":"etcd","env":[{"name":"B","value":"2"}]}]}}}}}]`,
		`[{"target":{"kind":"Service","name":"c"},"json":[{"op":"replace","path":"/spec/ports/0/port","value":1}]}]`,
		`[{"target":{"kind":"Widget","group":"example.com"},"strategicMerge":{"spec":{"items":null,"keep":{"x":1}}}}]`,
		`[{"target":{"kind":"StatefulSet"},"json":[{"op":"move","from":"/spec","path":"/status"}]}]`,
		`[{"target":{"kind":"StatefulSet"},"json":[{"op":"copy","from":"/metadata/name","path":"/metadata/labels/n"}]}]`,
		`[{"target":{"kind":"StatefulSet"},"json":[{"op":"add","path":"/metadata/labels","value":{"a":1}}]}]`,
		`[{"target":{"kind":"StatefulSet"},"json":[{"op":"test","path":"/kind","value":"StatefulSet"},{"op":"remove","path":"/metadata"}]}]`,
		`[{"target":{"kind":"Service"},"strategicMerge":{"metadata":{"name":"other"}}}]`,
		`[{"target":{"kind":"StatefulSet"},"strategicMerge":{"$patch":"delete"}}]`,
		`[{"target":{"kind":"StatefulSet"},"strategicMerge":{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"x"}]}}}}}]`,
		`[{"target":{"kind":"StatefulSet"},"strategicMerge":[1,2]}]`,
		`[{"target":{"kind":"StatefulSet"},"json":[{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"x"}}]}]`,
		`[{"target":{"kind":"Widget"},"json":[{"op":"add","path":"/spec/items/1e9","value":1}]}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var patches []v1alpha1.ChartPatch
		if err := json.Unmarshal(data, &patches); err != nil {
			return
		}
		objs := []*unstructured.Unstructured{sts(), svc("c"), custom()}
		before := make([][3]string, len(objs))
		for i, o := range objs {
			before[i] = [3]string{o.GetKind(), o.GetName(), o.GetNamespace()}
		}
		if err := Apply(objs, patches); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for i, o := range objs {
			if got := [3]string{o.GetKind(), o.GetName(), o.GetNamespace()}; got != before[i] {
				t.Fatalf("a patch changed %v into %v", before[i], got)
			}
			for _, field := range []string{"labels", "annotations"} {
				if _, _, err := unstructured.NestedStringMap(o.Object, "metadata", field); err != nil {
					t.Fatalf("a patch left %s %s with metadata.%s that are not strings: %v", o.GetKind(), o.GetName(), field, err)
				}
			}
			if _, err := o.MarshalJSON(); err != nil {
				t.Fatalf("%s %s does not encode after the patches: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
}

package chartcontract_test

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
)

// FuzzCheck runs the contract check on objects of any content: the embedded chart's render
// with one fuzzed JSON value written at a fuzzed path, and a fuzzed list of extra objects. It
// must not panic, and it must say what is wrong whenever it refuses.
func FuzzCheck(f *testing.F) {
	f.Add("spec.template.spec.containers", `[]`, `[]`)
	f.Add("spec.template.spec.containers", `[{"name":"etcd","args":7}]`, `[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"team-a"}}]`)
	f.Add("spec.template.spec.containers", `[{"name":"etcd","envFrom":[{"prefix":"ETCD_"},7],"env":[{"name":1}]}]`, `[]`)
	f.Add("spec.volumeClaimTemplates", `[{"metadata":{"name":"data","labels":7}}]`, `[]`)
	f.Add("spec.template.spec.volumes", `"x"`, `[{"kind":"Service","metadata":{"name":"etcd-client"},"spec":{"ports":[{"port":"x"}]}}]`)
	f.Add("spec.selector", `{"matchLabels":{"a":1}}`, `[{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"etcd","namespace":"team-a"}}]`)
	f.Add("spec.template.metadata", `null`, `[{"apiVersion":"v1","kind":"Service","metadata":{"name":"etcd"},"spec":{"clusterIP":5}}]`)
	f.Add("spec", `{"serviceName":["etcd"],"template":{"spec":{"containers":[{"name":"etcd","command":[1,2],"volumeMounts":[{"name":7}]}]}}}`, `[]`)
	base := render(f, cluster(nil))
	f.Fuzz(func(t *testing.T, path, value, extra string) {
		var v any
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			return
		}
		objs := make([]*unstructured.Unstructured, 0, len(base)+1)
		for _, o := range base {
			objs = append(objs, o.DeepCopy())
		}
		if s := find(objs, "StatefulSet", "etcd"); s != nil && path != "" {
			fields := splitPath(path)
			// SetNestedField deep-copies the value, which must be a JSON value.
			_ = unstructured.SetNestedField(s.Object, v, fields...)
		}
		var more []map[string]any
		if json.Unmarshal([]byte(extra), &more) == nil {
			for _, m := range more {
				if m != nil {
					objs = append(objs, &unstructured.Unstructured{Object: m})
				}
			}
		}
		err := chartcontract.Check(objs, contract(cluster(nil)))
		if err != nil {
			ce, ok := err.(*chartcontract.Error)
			if !ok || len(ce.Missing) == 0 {
				t.Fatalf("a refusal that names nothing: %#v", err)
			}
		}
	})
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return out
}

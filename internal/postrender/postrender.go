// Package postrender applies a cluster's spec.chart.patches to the objects its chart rendered:
// strategic-merge patches (JSON merge patches for kinds without a strategy) and RFC 6902 JSON
// patches, selected by kind and name. It is pure: objects in, objects out.
package postrender

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Apply applies patches in order to objs, in place. A patch that selects no object, that
// does not apply, or that changes an object's kind, name or namespace is an error naming the
// patch by its index in spec.chart.patches: nothing is applied then.
func Apply(objs []*unstructured.Unstructured, patches []v1alpha1.ChartPatch) error {
	for i, p := range patches {
		where := fmt.Sprintf("spec.chart.patches[%d]", i)
		matched := 0
		for _, o := range objs {
			if !selects(p.Target, o) {
				continue
			}
			matched++
			if err := patchOne(o, p); err != nil {
				return fmt.Errorf("%s failed on %s %s: %w", where, o.GetKind(), o.GetName(), err)
			}
		}
		if matched == 0 {
			return fmt.Errorf("%s selects %s, which the chart does not render", where, describe(p.Target))
		}
	}
	return nil
}

func describe(t v1alpha1.PatchTarget) string {
	s := t.Kind
	if t.Group != "" {
		s += "." + t.Group
	}
	if t.Name != "" {
		s += " " + t.Name
	} else {
		s = "any " + s
	}
	return s
}

func selects(t v1alpha1.PatchTarget, o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return gvk.Kind == t.Kind && (t.Group == "" || gvk.Group == t.Group) && (t.Name == "" || o.GetName() == t.Name)
}

func patchOne(o *unstructured.Unstructured, p v1alpha1.ChartPatch) error {
	orig, err := json.Marshal(o.Object)
	if err != nil {
		return fmt.Errorf("failed to encode the object: %w", err)
	}
	var out []byte
	switch {
	case p.StrategicMerge != nil && len(p.JSON) > 0:
		// Admission refuses it too; an object stored before that rule must not have one of
		// the two silently dropped.
		return errors.New("a chart patch needs exactly one of strategicMerge and json")
	case p.StrategicMerge != nil:
		if !isObject(p.StrategicMerge.Raw) {
			return errors.New("strategicMerge must be an object")
		}
		if typed, err := scheme.Scheme.New(o.GroupVersionKind()); err == nil {
			out, err = strategicpatch.StrategicMergePatch(orig, p.StrategicMerge.Raw, typed)
			if err != nil {
				return fmt.Errorf("failed to apply the strategic-merge patch: %w", err)
			}
		} else {
			// A kind the operator does not know the strategy of (a custom resource): merge as
			// kubectl does for those, by RFC 7386.
			out, err = jsonpatch.MergePatch(orig, p.StrategicMerge.Raw)
			if err != nil {
				return fmt.Errorf("failed to apply the merge patch: %w", err)
			}
		}
	case len(p.JSON) > 0:
		for i, op := range p.JSON {
			if !strings.HasPrefix(op.Path, "/") {
				return fmt.Errorf("json[%d]: path %q must start with / (a patch may not replace the whole object)", i, op.Path)
			}
			needsValue := op.Op == "add" || op.Op == "replace" || op.Op == "test"
			if needsValue && (op.Value == nil || len(op.Value.Raw) == 0) {
				return fmt.Errorf("json[%d]: %s needs value (to drop a field use remove)", i, op.Op)
			}
			if (op.Op == "move" || op.Op == "copy") && !strings.HasPrefix(op.From, "/") {
				return fmt.Errorf("json[%d]: %s needs from, a path starting with /", i, op.Op)
			}
		}
		ops, err := json.Marshal(p.JSON)
		if err != nil {
			return fmt.Errorf("failed to encode the JSON patch: %w", err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			return fmt.Errorf("failed to read the JSON patch: %w", err)
		}
		out, err = patch.Apply(orig)
		if err != nil {
			return fmt.Errorf("failed to apply the JSON patch: %w", err)
		}
	default:
		return errors.New("the patch has neither strategicMerge nor json")
	}
	next := map[string]any{}
	if err := json.Unmarshal(out, &next); err != nil {
		return fmt.Errorf("the patch left no object: %w", err)
	}
	u := &unstructured.Unstructured{Object: next}
	for _, field := range []string{"labels", "annotations"} {
		if _, _, err := unstructured.NestedStringMap(next, "metadata", field); err != nil {
			return fmt.Errorf("metadata.%s must map strings to strings (quote values such as \"true\"): %w", field, err)
		}
	}
	if u.GetKind() != o.GetKind() || u.GetAPIVersion() != o.GetAPIVersion() || u.GetName() != o.GetName() || u.GetNamespace() != o.GetNamespace() {
		return fmt.Errorf("a patch may not change an object's apiVersion, kind, name or namespace (got %s %s %s/%s)",
			u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
	}
	// Numbers come back as float64 from encoding/json; the rest of the pipeline (and the
	// applied-hash) expects what the chart's decoder yields, int64 for integers.
	o.Object = normalize(next).(map[string]any)
	return nil
}

func isObject(raw []byte) bool {
	var m map[string]any
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// normalize turns whole float64 numbers into int64, as the YAML decoder of rendered
// manifests does.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
		return t
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
		return t
	}
	return v
}

// Command chartvalues declares the keys of v1alpha1.GuardedChartValues in the generated CRD's
// schema of spec.chart.values and writes the CEL rule that refuses each of them, then declares
// the keys of v1alpha1.CheckedChartValues and writes the CEL rule that holds each to its
// pattern. `make manifests` runs it after controller-gen, on the files controller-gen wrote.
//
// CEL cannot see fields that the schema does not declare (unknown fields kept by
// x-kubernetes-preserve-unknown-fields are hidden from it), and controller-gen has no marker
// to declare properties below a RawExtension, so the declarations come from here. Everything
// else of the schema is left as controller-gen wrote it, and the file is written back the way
// controller-gen writes it (sigs.k8s.io/yaml over the JSON form), so unchanged parts stay
// byte for byte the same.
//
// Usage: go run ./hack/chartvalues config/crd/bases/etcdpilot.io_etcdclusters.yaml
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chartvalues CRD.yaml ...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := patchFile(path); err != nil {
			fmt.Fprintf(os.Stderr, "chartvalues: %v\n", err)
			os.Exit(1)
		}
	}
}

func patchFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("failed to parse %s: %w", path, err)
	}
	// UseNumber keeps integers exact, as controller-gen does.
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var crd map[string]any
	if err := dec.Decode(&crd); err != nil {
		return fmt.Errorf("failed to decode %s: %w", path, err)
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("%s has no versions", path)
	}
	for _, v := range versions {
		values, ok := dig(v, "schema", "openAPIV3Schema", "properties", "spec", "properties", "chart", "properties", "values").(map[string]any)
		if !ok {
			return fmt.Errorf("%s has no schema for spec.chart.values", path)
		}
		if err := declare(values, v1alpha1.GuardedChartValues, v1alpha1.CheckedChartValues); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("failed to encode %s: %w", path, err)
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// declare sets the properties and the CEL rules of the values schema from guarded, then
// checked; it owns both, so running it again gives the same result.
func declare(values map[string]any, guarded []v1alpha1.GuardedChartValue, checked []v1alpha1.CheckedChartValue) error {
	props := map[string]any{}
	var rules []any
	for _, g := range guarded {
		leaf, err := leafSchema(g)
		if err != nil {
			return err
		}
		if err := put(props, g.Path, leaf); err != nil {
			return err
		}
		rules = append(rules, map[string]any{"rule": g.Rule(), "message": g.Message()})
	}
	for _, c := range checked {
		// maxLength bounds the cost of the rule's matches(), which the API server estimates
		// from it.
		leaf := map[string]any{"type": "string", "maxLength": c.MaxLength, "description": "Checked: " + c.Reason + "."}
		if err := put(props, c.Path, leaf); err != nil {
			return err
		}
		rules = append(rules, map[string]any{"rule": c.Rule(), "message": c.Message()})
	}
	values["properties"] = props
	values["x-kubernetes-validations"] = rules
	return nil
}

// put declares leaf at the dotted path below props, declaring its parents as objects that
// keep every key they do not declare.
func put(props map[string]any, path string, leaf map[string]any) error {
	parts := strings.Split(path, ".")
	level := props
	for _, p := range parts[:len(parts)-1] {
		parent, ok := level[p].(map[string]any)
		if !ok {
			parent = map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": map[string]any{}}
			level[p] = parent
		}
		level = parent["properties"].(map[string]any)
	}
	if _, ok := level[parts[len(parts)-1]]; ok {
		return fmt.Errorf("chart value %s is declared twice (guarded and checked?)", path)
	}
	level[parts[len(parts)-1]] = leaf
	return nil
}

// leafSchema declares a guarded key with its type. It is not nullable, and neither are the
// parents: the API server drops a null (which would delete the computed value) before
// validating, since CEL cannot tell a null field of an object from a missing one.
func leafSchema(g v1alpha1.GuardedChartValue) (map[string]any, error) {
	s := map[string]any{
		"type":        g.Type,
		"description": "Refused: " + g.Reason + ".",
	}
	switch g.Type {
	case "string", "integer", "boolean":
	case "object":
		s["x-kubernetes-preserve-unknown-fields"] = true
	case "array":
		s["items"] = map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	default:
		return nil, fmt.Errorf("guarded chart value %s has type %q; want string, integer, boolean, object or array", g.Path, g.Type)
	}
	return s, nil
}

// dig walks nested maps by key.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

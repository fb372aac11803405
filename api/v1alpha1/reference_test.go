package v1alpha1_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var updateReference = flag.Bool("update", false, "rewrite docs/api-reference.md from the generated CRD")

// referenceLeaves are fields whose inner structure is a Kubernetes core type or free-form: the
// reference names them and links out instead of listing their fields.
var referenceLeaves = map[string]string{
	"spec.resources":                 "core/v1 ResourceRequirements",
	"spec.affinity":                  "core/v1 Affinity",
	"spec.tolerations":               "list of core/v1 Toleration",
	"spec.topologySpreadConstraints": "list of core/v1 TopologySpreadConstraint",
	"spec.chart.values":              "free-form chart values (charts/etcd-cluster/values.yaml)",
	"status.conditions":              "list of meta/v1 Condition",
}

// TestAPIReferenceIsCurrent keeps docs/api-reference.md in step with the CRD: the reference
// is generated from the CRD's schema (descriptions, defaults, CEL rules). Run
// `go test ./api/... -run TestAPIReferenceIsCurrent -update` after changing the API.
func TestAPIReferenceIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	var got []byte
	for _, kind := range []string{"etcdclusters", "etcdbackups"} {
		data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "etcdpilot.io_"+kind+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatal(err)
		}
		got = append(got, reference(crd)...)
	}
	path := filepath.Join(root, "docs", "api-reference.md")
	if *updateReference {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run this test with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/api-reference.md is out of date: run `go test ./api/... -run TestAPIReferenceIsCurrent -update`")
	}
}

func reference(crd *apiextensionsv1.CustomResourceDefinition) []byte {
	v := crd.Spec.Versions[0]
	s := v.Schema.OpenAPIV3Schema
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s reference\n\n", crd.Spec.Names.Kind)
	fmt.Fprintf(&b, "Generated from the CRD (`config/crd/bases`) by `go test ./api/... -run TestAPIReferenceIsCurrent -update`; do not edit.\n\n")
	var subresources []string
	if v.Subresources != nil && v.Subresources.Status != nil {
		subresources = append(subresources, "status")
	}
	if v.Subresources != nil && v.Subresources.Scale != nil {
		subresources = append(subresources, "scale")
	}
	fmt.Fprintf(&b, "`apiVersion: %s/%s`, `kind: %s`, short name `%s`. Subresources: %s.\n\n",
		crd.Spec.Group, v.Name, crd.Spec.Names.Kind, strings.Join(crd.Spec.Names.ShortNames, ", "), strings.Join(subresources, ", "))
	for _, section := range []string{"spec", "status"} {
		fmt.Fprintf(&b, "## %s\n\n| Field | Type | Default | Description |\n|---|---|---|---|\n", section)
		var rules []string
		walk(&b, &rules, section, s.Properties[section])
		if len(rules) > 0 {
			fmt.Fprintf(&b, "\nChecked at admission (CEL):\n\n")
			for _, r := range rules {
				fmt.Fprintf(&b, "- %s\n", r)
			}
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

func walk(b *bytes.Buffer, rules *[]string, path string, p apiextensionsv1.JSONSchemaProps) {
	for _, r := range p.XValidations {
		*rules = append(*rules, fmt.Sprintf("`%s`: %s", path, ruleMessage(r)))
	}
	names := make([]string, 0, len(p.Properties))
	for n := range p.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := p.Properties[n]
		fp := path + "." + n
		typ := c.Type
		if c.XIntOrString {
			typ = "int or string"
		}
		if leaf, ok := referenceLeaves[fp]; ok {
			typ = leaf
		} else if c.Type == "array" && c.Items != nil && c.Items.Schema != nil {
			typ = "list of " + c.Items.Schema.Type
		} else if c.Type == "object" && c.AdditionalProperties != nil && c.AdditionalProperties.Schema != nil {
			typ = "map of " + c.AdditionalProperties.Schema.Type
		}
		var limits []string
		if c.Minimum != nil {
			limits = append(limits, fmt.Sprintf("min %v", *c.Minimum))
		}
		if c.Maximum != nil {
			limits = append(limits, fmt.Sprintf("max %v", *c.Maximum))
		}
		if c.MaxLength != nil {
			limits = append(limits, fmt.Sprintf("max length %d", *c.MaxLength))
		}
		if c.MaxProperties != nil {
			limits = append(limits, fmt.Sprintf("at most %d entries", *c.MaxProperties))
		}
		if len(c.Enum) > 0 {
			var vals []string
			for _, e := range c.Enum {
				vals = append(vals, strings.Trim(string(e.Raw), `"`))
			}
			limits = append(limits, "one of "+strings.Join(vals, ", "))
		}
		if len(limits) > 0 {
			typ += " (" + strings.Join(limits, "; ") + ")"
		}
		def := ""
		if c.Default != nil {
			def = "`" + string(c.Default.Raw) + "`"
		}
		desc := strings.Join(strings.Fields(c.Description), " ")
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", fp, typ, def, strings.ReplaceAll(desc, "|", "\\|"))
		if _, leaf := referenceLeaves[fp]; leaf {
			continue
		}
		if c.Type == "object" && len(c.Properties) > 0 {
			walk(b, rules, fp, c)
		}
		if c.Type == "array" && c.Items != nil && c.Items.Schema != nil && len(c.Items.Schema.Properties) > 0 {
			walk(b, rules, fp+"[]", *c.Items.Schema)
		}
		if len(c.Properties) == 0 {
			for _, r := range c.XValidations {
				*rules = append(*rules, fmt.Sprintf("`%s`: %s", fp, ruleMessage(r)))
			}
		}
	}
}

// ruleMessage is the message a rule gives; for a messageExpression, its string literals
// joined, with each computed part shown as <...> (self as <new value>, oldSelf as <old value>).
func ruleMessage(r apiextensionsv1.ValidationRule) string {
	if r.Message != "" || r.MessageExpression == "" {
		return r.Message
	}
	var out strings.Builder
	m := r.MessageExpression
	for {
		q := strings.Index(m, "'")
		if q < 0 {
			break
		}
		if expr := strings.Trim(m[:q], "+ "); expr != "" {
			out.WriteString(placeholder(expr))
		}
		m = m[q+1:]
		// A literal ends at the next quote that is not escaped.
		var lit strings.Builder
		for len(m) > 0 {
			if strings.HasPrefix(m, `\'`) {
				lit.WriteByte('\'')
				m = m[2:]
				continue
			}
			if m[0] == '\'' {
				m = m[1:]
				break
			}
			lit.WriteByte(m[0])
			m = m[1:]
		}
		out.WriteString(strings.ReplaceAll(lit.String(), "%s", "<the flags>"))
		if strings.HasPrefix(strings.TrimSpace(m), ".format(") {
			return out.String()
		}
	}
	if tail := strings.Trim(m, "+ "); tail != "" {
		out.WriteString(placeholder(tail))
	}
	return out.String()
}

func placeholder(expr string) string {
	switch expr {
	case "self":
		return "<new value>"
	case "oldSelf":
		return "<old value>"
	}
	return "<...>"
}

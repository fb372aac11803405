package charts

import (
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// The schema check of a render gives exactly Helm's error (and accepts exactly what Helm
// accepts), for the embedded chart and for a chart whose subchart has its own schema.
func TestSchemaCheckIsHelms(t *testing.T) {
	embedded, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sub := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "sub", Version: "0.1.0"},
		Values:   map[string]any{"port": 80},
		Schema:   []byte(`{"type":"object","properties":{"port":{"type":"integer","maximum":65535}}}`),
	}
	parent := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "parent", Version: "0.1.0"},
		Values:   map[string]any{"name": "x", "sub": map[string]any{}},
		Schema:   []byte(`{"type":"object","required":["name"],"properties":{"name":{"type":"string","minLength":1}}}`),
	}
	parent.AddDependency(sub)
	withSub := newRenderer(parent)

	tests := []struct {
		name   string
		r      *Renderer
		values map[string]any
		bad    bool
	}{
		{"embedded defaults", embedded, map[string]any{}, false},
		{"embedded replicas 0", embedded, map[string]any{"replicas": 0}, true},
		{"embedded unknown keys", embedded, map[string]any{"replica": 3, "etcd": map[string]any{"dataDir": "/x"}}, true},
		{"subchart fine", withSub, map[string]any{"sub": map[string]any{"port": 443}}, false},
		{"subchart port out of range", withSub, map[string]any{"sub": map[string]any{"port": 70000}}, true},
		{"both wrong", withSub, map[string]any{"name": "", "sub": map[string]any{"port": "http"}}, true},
		{"subchart values not a map", withSub, map[string]any{"sub": "x"}, true},
	}
	opts := chartutil.ReleaseOptions{Name: "a", Namespace: "b", Revision: 1, IsInstall: true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Twice: the second check uses the schemas compiled by the first.
			for i := 0; i < 2; i++ {
				vals, err := copyValues(tt.values)
				if err != nil {
					t.Fatal(err)
				}
				_, helmErr := chartutil.ToRenderValues(tt.r.chart, vals, opts, nil)
				vals, _ = copyValues(tt.values)
				top, ours := chartutil.ToRenderValuesWithSchemaValidation(tt.r.bare, vals, opts, nil, true)
				if ours == nil {
					ours = tt.r.schema.check(top["Values"].(chartutil.Values))
				}
				if (helmErr != nil) != tt.bad {
					t.Fatalf("Helm's error %v, want bad=%v", helmErr, tt.bad)
				}
				if helmErr == nil {
					if ours != nil {
						t.Fatalf("Helm accepts the values, our check says %v", ours)
					}
					continue
				}
				if ours == nil || ours.Error() != helmErr.Error() {
					t.Fatalf("our error\n%v\nHelm's\n%v", ours, helmErr)
				}
			}
		})
	}
	if embedded.schema.schema == nil {
		t.Error("the embedded chart's schema was not kept compiled")
	}
	if embedded.bare.Schema != nil || withSub.bare.Dependencies()[0].Schema != nil || withSub.chart.Dependencies()[0].Schema == nil {
		t.Error("the bare copy must drop the schemas and leave the chart's own alone")
	}
}

package charts

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// TestNotesWarnWhenTheClientServiceLeavesTheCluster: NOTES (what `helm install` prints) warns
// when the client Service is a NodePort or LoadBalancer, which exposes plain, unauthenticated
// etcd outside the cluster, and only then.
func TestNotesWarnWhenTheClientServiceLeavesTheCluster(t *testing.T) {
	r, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for typ, warn := range map[string]bool{"ClusterIP": false, "NodePort": true, "LoadBalancer": true} {
		top, err := chartutil.ToRenderValues(r.chart, map[string]any{"service": map[string]any{"type": typ}},
			chartutil.ReleaseOptions{Name: "x", Namespace: "ns", Revision: 1, IsInstall: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(r.chart, top)
		if err != nil {
			t.Fatal(err)
		}
		var notes string
		for name, content := range files {
			if strings.HasSuffix(name, "NOTES.txt") {
				notes = content
			}
		}
		got := strings.Contains(notes, "WARNING: the client Service is of type "+typ) && strings.Contains(notes, "without client certificates or authentication")
		if got != warn {
			t.Errorf("service.type %s: warning %v, want %v; NOTES:\n%s", typ, got, warn, notes)
		}
	}
}

// TestNotesNameTheNetworkPolicy: NOTES says what the NetworkPolicy admits, and that it needs
// a network plugin that enforces it, only when it is enabled.
func TestNotesNameTheNetworkPolicy(t *testing.T) {
	r, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, enabled := range []bool{false, true} {
		vals := map[string]any{"networkPolicy": map[string]any{"enabled": enabled,
			"allowedClients": []any{map[string]any{"podSelector": map[string]any{}}},
			"operator":       map[string]any{"namespace": "ops"}}}
		top, err := chartutil.ToRenderValues(r.chart, vals, chartutil.ReleaseOptions{Name: "x", Namespace: "ns", Revision: 1, IsInstall: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(r.chart, top)
		if err != nil {
			t.Fatal(err)
		}
		var notes string
		for name, content := range files {
			if strings.HasSuffix(name, "NOTES.txt") {
				notes = content
			}
		}
		got := strings.Contains(notes, "The NetworkPolicy x admits to the client port only the members, the operator in ops and\nnetworkPolicy.allowedClients (entries: 1)") &&
			strings.Contains(notes, "only where the network plugin implements NetworkPolicy")
		if got != enabled {
			t.Errorf("networkPolicy.enabled %v: note %v; NOTES:\n%s", enabled, got, notes)
		}
	}
}

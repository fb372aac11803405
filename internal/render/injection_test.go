package render_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// These are the render rows of issue 26's flag injection: each hostile input, as an object
// stored before admission refused it (or one admission cannot judge, such as a patch), must
// be refused by render.Desired with a message that names the flag or the field, and nothing
// of it is applied. api/v1alpha1's injection tests hold the same inputs to admission.

func tlsCluster(mutate func(*v1alpha1.EtcdClusterSpec)) *v1alpha1.EtcdCluster {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "team-a", UID: "uid-1"}}
	c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
	if mutate != nil {
		mutate(&c.Spec)
	}
	return c
}

func chartValues(t *testing.T, v map[string]any) *runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &runtime.RawExtension{Raw: b}
}

// addArg is a chart patch that appends arg to the etcd container's arguments.
func addArg(arg string) v1alpha1.ChartPatch {
	v, _ := json.Marshal(arg)
	return v1alpha1.ChartPatch{
		Target: v1alpha1.PatchTarget{Kind: "StatefulSet"},
		JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/spec/template/spec/containers/0/args/-",
			Value: &runtime.RawExtension{Raw: v}}},
	}
}

// replaceArg is a chart patch that replaces the etcd container's argument whose text starts
// with prefix; it finds the index in a render of c without the patch.
func replaceArg(t *testing.T, r *charts.Renderer, c *v1alpha1.EtcdCluster, prefix, arg string) v1alpha1.ChartPatch {
	t.Helper()
	objs, err := render.Desired(r, c, values.DefaultOperator(), memory.Of(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "StatefulSet" {
			continue
		}
		cs := o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		for i, a := range cs[0].(map[string]any)["args"].([]any) {
			if strings.HasPrefix(a.(string), prefix) {
				v, _ := json.Marshal(arg)
				return v1alpha1.ChartPatch{
					Target: v1alpha1.PatchTarget{Kind: "StatefulSet"},
					JSON: []v1alpha1.JSONPatchOperation{{Op: "replace", Path: "/spec/template/spec/containers/0/args/" + itoa(i),
						Value: &runtime.RawExtension{Raw: v}}},
				}
			}
		}
	}
	t.Fatalf("no argument starts with %s", prefix)
	return v1alpha1.ChartPatch{}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestHostileValuesAreRefusedInTheRender(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EtcdClusterSpec)
		// patch, when set, is added to spec.chart.patches (built from the render without it).
		patch func(c *v1alpha1.EtcdCluster) v1alpha1.ChartPatch
		want  []string
		// contract: the refusal comes from the chart contract (ChartContractBroken), not
		// from the values (InvalidSpec).
		contract bool
	}{
		{name: "extraArgs value with a newline and a second flag",
			mutate: func(s *v1alpha1.EtcdClusterSpec) {
				s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"log-level": "info\n            - --client-cert-auth=false"}
			},
			want: []string{"spec.etcd.extraArgs[log-level]", "printable"}},
		{name: "extraArgs value with a NUL",
			mutate: func(s *v1alpha1.EtcdClusterSpec) {
				s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"log-level": "info\x00"}
			},
			want: []string{"spec.etcd.extraArgs[log-level]", "printable"}},
		{name: "chart values clusterDomain with a newline and a second flag",
			mutate: func(s *v1alpha1.EtcdClusterSpec) {
				s.Chart.Values = chartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": "cluster.local\n            - --unsafe-no-fsync=true"}})
			},
			want: []string{"spec.chart.values.etcd.clusterDomain", "DNS"}},
		{name: "extraArgs key with a single dash",
			mutate: func(s *v1alpha1.EtcdClusterSpec) {
				s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"-unsafe-no-fsync": "true"}
			},
			want: []string{"spec.etcd.extraArgs", "-unsafe-no-fsync"}},
		{name: "extraArgs key with other casing and a dash",
			mutate: func(s *v1alpha1.EtcdClusterSpec) {
				s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"-Client-Cert-Auth": "false"}
			},
			want: []string{"spec.etcd.extraArgs", "-Client-Cert-Auth"}},
		{name: "a patch adds a single-dash -unsafe-no-fsync",
			patch:    func(*v1alpha1.EtcdCluster) v1alpha1.ChartPatch { return addArg("-unsafe-no-fsync") },
			want:     []string{"StatefulSet etcd", "args[", "--unsafe-no-fsync"},
			contract: true},
		{name: "a patch adds a second client-cert-auth, single dash",
			patch:    func(*v1alpha1.EtcdCluster) v1alpha1.ChartPatch { return addArg("-client-cert-auth=false") },
			want:     []string{"StatefulSet etcd", "--client-cert-auth", "twice"},
			contract: true},
		{name: "a patch adds a flag in other casing",
			patch:    func(*v1alpha1.EtcdCluster) v1alpha1.ChartPatch { return addArg("--Client-Cert-Auth=false") },
			want:     []string{"StatefulSet etcd", "--Client-Cert-Auth=false", "lowercase"},
			contract: true},
		{name: "a patch turns client-cert-auth off",
			patch: func(c *v1alpha1.EtcdCluster) v1alpha1.ChartPatch {
				return replaceArg(t, r, c, "--client-cert-auth=", "--client-cert-auth=false")
			},
			want:     []string{"StatefulSet etcd", "--client-cert-auth", "tls.client"},
			contract: true},
		{name: "a patch adds an argument with a NUL",
			patch:    func(*v1alpha1.EtcdCluster) v1alpha1.ChartPatch { return addArg("--log-level=info\x00") },
			want:     []string{"StatefulSet etcd", "control character"},
			contract: true},
		{name: "a patch adds auto-tls",
			patch:    func(*v1alpha1.EtcdCluster) v1alpha1.ChartPatch { return addArg("--peer-auto-tls") },
			want:     []string{"StatefulSet etcd", "--peer-auto-tls"},
			contract: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tlsCluster(tc.mutate)
			if tc.patch != nil {
				c.Spec.Chart.Patches = append(c.Spec.Chart.Patches, tc.patch(c))
			}
			_, err := render.Desired(r, c, values.DefaultOperator(), memory.Of(c))
			if err == nil {
				t.Fatal("render.Desired accepted it")
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q", w)
				}
			}
			var ce *chartcontract.Error
			if isContract := errors.As(err, &ce); isContract != tc.contract {
				t.Errorf("refused by the chart contract: %v, want %v", isContract, tc.contract)
			}
		})
	}
}

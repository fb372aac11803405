package chartcontract_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

func render(t testing.TB, c *v1alpha1.EtcdCluster) []*unstructured.Unstructured {
	t.Helper()
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := values.Compute(c, values.Operator{Namespace: "etcd-pilot-system"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := r.Render(charts.Release{Name: c.Name, Namespace: c.Namespace}, vals)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// contract is what controllers.contractOf makes of c.
func contract(c *v1alpha1.EtcdCluster) chartcontract.Contract {
	return chartcontract.Contract{Name: c.Name, Namespace: c.Namespace,
		SelectorLabels:      map[string]string{"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": c.Name},
		MembershipConfigMap: values.MembershipConfigMapName(c.Name),
		Ephemeral:           c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral,
		ClientService:       c.Name + "-client",
		PodLabels:           map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
		ClaimLabels:         map[string]string{v1alpha1.LabelCluster: c.Name},
		Token:               values.ClusterToken(c),
		Reserved:            []string{"ConfigMap/" + values.MembershipConfigMapName(c.Name), "Secret/" + v1alpha1.CASecretName(c.Name)},
	}
}

// etcdContainer returns the etcd container of the rendered StatefulSet and a function that
// writes it back.
func etcdContainer(objs []*unstructured.Unstructured) (map[string]any, func()) {
	s := find(objs, "StatefulSet", "etcd")
	cs, _, _ := unstructured.NestedSlice(s.Object, "spec", "template", "spec", "containers")
	etcd := cs[0].(map[string]any)
	return etcd, func() { _ = unstructured.SetNestedSlice(s.Object, cs, "spec", "template", "spec", "containers") }
}

func withObject(objs []*unstructured.Unstructured, apiVersion, kind, name string) []*unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetName(name)
	o.SetNamespace("team-a")
	return append(objs, o)
}

func cluster(mutate func(*v1alpha1.EtcdCluster)) *v1alpha1.EtcdCluster {
	c := &v1alpha1.EtcdCluster{}
	c.Name, c.Namespace, c.UID = "etcd", "team-a", "uid-1"
	if mutate != nil {
		mutate(c)
	}
	return c
}

func TestTheEmbeddedChartKeepsTheContract(t *testing.T) {
	yes := true
	for name, c := range map[string]*v1alpha1.EtcdCluster{
		"default":   cluster(nil),
		"ephemeral": cluster(func(c *v1alpha1.EtcdCluster) { c.Spec.Storage.Ephemeral = &yes }),
		"tls": cluster(func(c *v1alpha1.EtcdCluster) {
			c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
		}),
	} {
		t.Run(name, func(t *testing.T) {
			if err := chartcontract.Check(render(t, c), contract(c)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBrokenRendersSayWhatIsMissing(t *testing.T) {
	c := cluster(nil)
	for _, tc := range []struct {
		name   string
		break_ func(objs []*unstructured.Unstructured) []*unstructured.Unstructured
		want   []string
	}{
		{"no StatefulSet", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			var out []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() != "StatefulSet" {
					out = append(out, o)
				}
			}
			return out
		}, []string{"no StatefulSet named etcd"}},
		{"selector, replicas, strategy", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			s := find(objs, "StatefulSet", "etcd")
			_ = unstructured.SetNestedStringMap(s.Object, map[string]string{"app": "etcd"}, "spec", "selector", "matchLabels")
			_ = unstructured.SetNestedField(s.Object, int64(3), "spec", "replicas")
			_ = unstructured.SetNestedField(s.Object, "RollingUpdate", "spec", "updateStrategy", "type")
			return objs
		}, []string{"spec.selector.matchLabels must be exactly {app.kubernetes.io/instance=etcd,app.kubernetes.io/name=etcd}", "spec.replicas must not be set", "spec.updateStrategy.type must be OnDelete"}},
		{"etcd container hooks", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			s := find(objs, "StatefulSet", "etcd")
			cs, _, _ := unstructured.NestedSlice(s.Object, "spec", "template", "spec", "containers")
			etcd := cs[0].(map[string]any)
			delete(etcd, "envFrom")
			etcd["ports"] = []any{map[string]any{"name": "client", "containerPort": int64(2379)}}
			_ = unstructured.SetNestedSlice(s.Object, cs, "spec", "template", "spec", "containers")
			return objs
		}, []string{"needs envFrom configMapRef etcd-membership", "needs a port named peer", "needs a port named metrics"}},
		{"headless Service and namespace", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			svc := find(objs, "Service", "etcd")
			_ = unstructured.SetNestedField(svc.Object, "10.0.0.1", "spec", "clusterIP")
			find(objs, "Service", "etcd-client").SetNamespace("elsewhere")
			ns := &unstructured.Unstructured{}
			ns.SetAPIVersion("v1")
			ns.SetKind("Namespace")
			ns.SetName("mine")
			return append(objs, ns)
		}, []string{"Service etcd: spec.clusterIP must be None", `Service etcd-client is in namespace "elsewhere"`, "Namespace mine is cluster-scoped"}},
		{"flags the operator relies on", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			etcd, put := etcdContainer(objs)
			var args []any
			for _, a := range etcd["args"].([]any) {
				switch s := a.(string); {
				case s == "--data-dir=/var/lib/etcd/data":
					args = append(args, "--data-dir=/var/lib/etcd")
				case strings.HasPrefix(s, "--initial-cluster-token="):
					args = append(args, "--initial-cluster-token=fixed")
				case strings.HasPrefix(s, "--name="):
				default:
					args = append(args, a)
				}
			}
			etcd["args"] = append(args, "--force-new-cluster", "--initial-cluster-state=new")
			put()
			return objs
		}, []string{"needs the flag --data-dir=/var/lib/etcd/data", "needs the flag --initial-cluster-token=etcd-uid-1", "needs the flag --name=$(POD_NAME)",
			"may not set --force-new-cluster", "may not set --initial-cluster-state"}},
		{"environment that overrides the membership hook", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			etcd, put := etcdContainer(objs)
			etcd["env"] = append(etcd["env"].([]any), map[string]any{"name": "ETCD_INITIAL_CLUSTER_STATE", "value": "new"})
			etcd["envFrom"] = append(etcd["envFrom"].([]any),
				map[string]any{"configMapRef": map[string]any{"name": "flags"}, "prefix": "ETCD"},
				map[string]any{"secretRef": map[string]any{"name": "more"}})
			put()
			return objs
		}, []string{"may not set the environment variable ETCD_INITIAL_CLUSTER_STATE", `envFrom[1] of the etcd container needs a prefix that cannot make an ETCD_* variable (it has "ETCD")`,
			`envFrom[2] of the etcd container needs a prefix`, "must be the etcd container's last envFrom source"}},
		{"labels the operator finds pods and claims by", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			s := find(objs, "StatefulSet", "etcd")
			unstructured.RemoveNestedField(s.Object, "spec", "template", "metadata", "labels", v1alpha1.LabelManagedBy)
			vcts, _, _ := unstructured.NestedSlice(s.Object, "spec", "volumeClaimTemplates")
			unstructured.RemoveNestedField(vcts[0].(map[string]any), "metadata", "labels", v1alpha1.LabelCluster)
			_ = unstructured.SetNestedSlice(s.Object, vcts, "spec", "volumeClaimTemplates")
			return objs
		}, []string{"the pod template needs the label app.kubernetes.io/managed-by=etcd-pilot", "the data claim template needs the label etcdpilot.io/cluster=etcd"}},
		{"kinds and names the operator owns", func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			objs = withObject(objs, "v1", "PersistentVolumeClaim", "data-etcd-0")
			objs = withObject(objs, "v1", "ConfigMap", "etcd-membership")
			objs = withObject(objs, "v1", "Secret", "etcd-ca")
			var out []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetName() != "etcd-client" {
					out = append(out, o)
				}
			}
			return out
		}, []string{"PersistentVolumeClaim data-etcd-0 may not be rendered", "ConfigMap etcd-membership is the operator's own", "Secret etcd-ca is the operator's own", "no Service etcd-client"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := chartcontract.Check(tc.break_(render(t, c)), contract(c))
			if err == nil {
				t.Fatal("the contract held")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	panic(kind + " " + name + " not rendered")
}

// BenchmarkCheck times the contract check of a default render (every pass runs it).
func BenchmarkCheck(b *testing.B) {
	c := cluster(nil)
	objs := render(b, c)
	want := contract(c)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := chartcontract.Check(objs, want); err != nil {
			b.Fatal(err)
		}
	}
}

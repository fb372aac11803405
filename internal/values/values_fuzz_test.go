package values_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// FuzzComputeChartValues merges spec.chart.values of any content over the computed values,
// with one fuzzed etcd flag. Compute never panics; when it accepts the spec, every guarded
// key (v1alpha1.GuardedChartValues) still holds what the typed fields computed, the inventory
// labels are there, and the result is plain JSON the chart can take.
func FuzzComputeChartValues(f *testing.F) {
	for _, s := range []struct{ values, flag string }{
		{`{}`, "log-level"},
		{`{"commonLabels":{"a":"b"},"extraEnv":[{"name":"X","value":"1"}]}`, ""},
		{`{"etcd":{"extraArgs":{"force-new-cluster":"true"}}}`, ""},
		{`{"etcd":null}`, ""},
		{`{"etcd":{"logLevel":"debug"},"storage":{"size":null}}`, ""},
		{`{"image":"etcd:latest"}`, "force-new-cluster"},
		{`{"global":{"imageRegistry":"r"}}`, "quota-backend-bytes"},
		{`{"global":7}`, "nope"},
		{`{"commonLabels":null,"managedBy":"x"}`, ""},
		{`{"storage":{"claimLabels":{"etcdpilot.io/cluster":"other"}}}`, ""},
		{`[1]`, ""},
		{`"x"`, ""},
	} {
		f.Add(s.values, s.flag)
	}
	f.Fuzz(func(t *testing.T, raw, flag string) {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "fz", Namespace: "ns", UID: "u"}}
		c.Spec.Replicas = ptr.To(int32(5))
		c.Spec.Storage.Size = nil
		if raw != "" {
			c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(raw)}
		}
		if flag != "" {
			c.Spec.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{flag: "v"}
		}
		out, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("empty error")
			}
			return
		}
		c.Spec.Chart.Values = nil
		typed, err := values.Compute(c, values.DefaultOperator())
		if err != nil {
			t.Fatalf("the spec without chart values is refused, with them accepted: %v", err)
		}
		for _, g := range v1alpha1.GuardedChartValues {
			got, gok := values.LookupPath(out, g.Path)
			want, wok := values.LookupPath(typed, g.Path)
			if gok != wok || !reflect.DeepEqual(got, want) {
				t.Fatalf("chart values %s changed the guarded %s: %v (present %v), computed %v (present %v)", raw, g.Path, got, gok, want, wok)
			}
		}
		labels, _ := out["commonLabels"].(map[string]any)
		if labels[v1alpha1.LabelCluster] != c.Name || out["managedBy"] != v1alpha1.ManagedByValue {
			t.Fatalf("chart values %s lost the inventory labels: %v, managedBy %v", raw, labels, out["managedBy"])
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("values do not encode: %v", err)
		}
	})
}

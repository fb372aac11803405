package values_test

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// TestComputeRefusesHostileStrings: the strings that reach the members' command line or an
// object's name are held to admission's patterns again, for objects stored before the rules
// existed, with admission's words.
func TestComputeRefusesHostileStrings(t *testing.T) {
	chart := func(v map[string]any) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			b, _ := json.Marshal(v)
			s.Chart.Values = &runtime.RawExtension{Raw: b}
		}
	}
	arg := func(v string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"log-level": v1alpha1.EtcdFlagValue(v)}
		}
	}
	domain := v1alpha1.CheckedChartValues[0].Message()
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EtcdClusterSpec)
		want   []string // empty: accepted
	}{
		{"value with a newline", arg("info\n            - --client-cert-auth=false"), []string{"spec.etcd.extraArgs[log-level]: " + v1alpha1.EtcdFlagValueMessage}},
		{"value with a NUL", arg("info\x00"), []string{"spec.etcd.extraArgs[log-level]"}},
		{"value with DEL", arg("info\x7f"), []string{"spec.etcd.extraArgs[log-level]"}},
		{"value beyond ASCII", arg("infö"), []string{"spec.etcd.extraArgs[log-level]"}},
		{"value too long", arg(strings.Repeat("a", 4097)), []string{"spec.etcd.extraArgs[log-level]: may not be longer than 4096"}},
		{"value with JSON and spaces", arg(`{"maxsize": 100}`), nil},
		{"bad value and unknown flag both named", func(s *v1alpha1.EtcdClusterSpec) {
			s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"nope": "x", "log-level": "a\nb"}
		}, []string{"unknown etcd flags: nope", "spec.etcd.extraArgs[log-level]"}},
		{"clusterDomain with a newline", chart(map[string]any{"etcd": map[string]any{"clusterDomain": "cluster.local\n- --unsafe-no-fsync=true"}}), []string{domain}},
		{"clusterDomain not a string", chart(map[string]any{"etcd": map[string]any{"clusterDomain": 7}}), []string{domain}},
		{"clusterDomain too long", chart(map[string]any{"etcd": map[string]any{"clusterDomain": strings.Repeat("a", 254)}}), []string{domain}},
		{"clusterDomain null", chart(map[string]any{"etcd": map[string]any{"clusterDomain": nil}}), nil},
		{"clusterDomain empty", chart(map[string]any{"etcd": map[string]any{"clusterDomain": ""}}), nil},
		{"clusterDomain", chart(map[string]any{"etcd": map[string]any{"clusterDomain": "k8s.example"}}), nil},
		{"serviceAccount name with a field", chart(map[string]any{"serviceAccount": map[string]any{"name": "a\n      hostNetwork: true"}}), []string{v1alpha1.CheckedChartValues[1].Message()}},
		{"image with a space", func(s *v1alpha1.EtcdClusterSpec) { s.Image = "registry.example/et cd" }, []string{v1alpha1.ImageRepositoryMessage}},
		{"storageClassName in capitals", func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = ptr.To("Fast") }, []string{v1alpha1.StorageClassNameMessage}},
		{"empty storageClassName", func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = ptr.To("") }, nil},
		{"priorityClassName with a newline", func(s *v1alpha1.EtcdClusterSpec) { s.PriorityClassName = "a\nb" }, []string{v1alpha1.PriorityClassNameMessage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{}
			c.Name, c.Namespace, c.UID = "etcd", "ns", "uid-1"
			tc.mutate(&c.Spec)
			_, err := values.Compute(c, values.DefaultOperator())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q does not say %q", err, w)
				}
			}
		})
	}
}

package v1alpha1_test

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// The admission rows of issue 26's flag injection: each hostile input is sent to the API
// server, which must refuse it with a message that names the field and says what to write
// instead, and to the controller's render (render.Desired), which must refuse it too, for an
// object stored before the rule existed. internal/render's injection tests hold the same
// inputs, and those no admission rule can see (a chart patch), to the render.

// TestFlagInjectionAdmission sends hostile and fitting values of every string the members'
// command line or an object's name takes from the spec.
func TestFlagInjectionAdmission(t *testing.T) {
	args := func(k, v string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{k: v1alpha1.EtcdFlagValue(v)}
		}
	}
	tls := func(mutate func(*v1alpha1.EtcdClusterSpec)) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
			mutate(s)
		}
	}
	value := []string{"spec.etcd.extraArgs[log-level]", v1alpha1.EtcdFlagValueMessage}
	unknown := "unknown etcd flags"
	domain := v1alpha1.CheckedChartValues[0].Message()
	cases := []createCase{
		{name: "extraArgs value with a newline and a second flag", spec: tls(args("log-level", "info\n            - --client-cert-auth=false")), wantErr: value},
		{name: "extraArgs value with a newline and a single-dash flag", spec: args("log-level", "info\n            - -unsafe-no-fsync"), wantErr: value},
		{name: "extraArgs value with a NUL", spec: args("log-level", "info\x00"), wantErr: value},
		{name: "extraArgs value with a tab", spec: args("log-level", "info\t"), wantErr: value},
		{name: "extraArgs value with a YAML line separator", spec: args("log-level", "info\u2028- --unsafe-no-fsync"), wantErr: value},
		{name: "extraArgs value longer than 4096", spec: args("log-level", strings.Repeat("a", 4097)), wantErr: []string{"log-level", "4096"}},
		{name: "extraArgs key with a single dash", spec: args("-unsafe-no-fsync", "true"), wantErr: []string{unknown, "-unsafe-no-fsync"}},
		{name: "extraArgs key with other casing and a dash", spec: tls(args("-Client-Cert-Auth", "false")), wantErr: []string{unknown, "-Client-Cert-Auth"}},
		{name: "chart values clusterDomain with a newline and a second flag",
			spec:    withChartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": "cluster.local\n            - --unsafe-no-fsync=true"}}),
			wantErr: []string{domain}},
		{name: "chart values clusterDomain in capitals", spec: withChartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": "Cluster.Local"}}), wantErr: []string{domain}},
		{name: "chart values clusterDomain that is not a string", spec: withChartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": 7}}),
			wantErr: []string{"spec.chart.values.etcd.clusterDomain", "string"}},
		{name: "chart values serviceAccount name with a pod field",
			spec:    withChartValues(t, map[string]any{"serviceAccount": map[string]any{"create": false, "name": "etcd\n      hostNetwork: true"}}),
			wantErr: []string{v1alpha1.CheckedChartValues[1].Message()}},
		{name: "image with a newline", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Image = "registry.example/etcd\n        command: [sh]" },
			wantErr: []string{v1alpha1.ImageRepositoryMessage}},
		{name: "storageClassName with a newline", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = ptr.To("fast\n        selector: {}") },
			wantErr: []string{v1alpha1.StorageClassNameMessage}},
		{name: "priorityClassName with a newline", spec: func(s *v1alpha1.EtcdClusterSpec) { s.PriorityClassName = "high\n      hostNetwork: true" },
			wantErr: []string{v1alpha1.PriorityClassNameMessage}},

		{name: "JSON value with spaces accepted", spec: args("log-rotation-config-json", `{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}`)},
		{name: "comma list accepted", spec: args("cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")},
		{name: "empty value accepted", spec: args("log-outputs", "")},
		{name: "value of 4096 accepted", spec: args("log-level", strings.Repeat("a", 4096))},
		{name: "chart values clusterDomain accepted", spec: withChartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": "k8s.example.internal"}})},
		{name: "chart values empty clusterDomain accepted", spec: withChartValues(t, map[string]any{"etcd": map[string]any{"clusterDomain": ""}})},
		{name: "chart values serviceAccount name accepted", spec: withChartValues(t, map[string]any{"serviceAccount": map[string]any{"name": "etcd-members"}})},
		{name: "image with a port and path accepted", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Image = "registry.example:5000/mirror/etcd" }},
		{name: "names accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.StorageClassName = ptr.To("fast-ssd.example")
			s.PriorityClassName = "system-cluster-critical"
		}},
		{name: "empty names accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.StorageClassName = ptr.To("")
			s.PriorityClassName = ""
		}},
	}
	runCreateCases(t, cases)

	// The controller refuses what admission refuses, with the same words, and renders what it
	// accepts.
	for _, tc := range cases {
		t.Run("controller/"+tc.name, func(t *testing.T) {
			c := newCluster("ns", "parity", tc.spec)
			err := goValidate(t, c.Spec)
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("the controller refuses what the API server accepts: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("the controller accepts what the API server refuses")
			}
			for _, w := range tc.wantErr {
				if w == "string" {
					continue // the API server's own word for a wrong type
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the controller's refusal lacks %q: %v", w, err)
				}
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestPatternRulesMatchGoConstants keeps the patterns and messages written into the markers
// (CEL cannot refer to Go constants) in step with those internal/values checks with.
func TestPatternRulesMatchGoConstants(t *testing.T) {
	for _, tc := range []struct {
		path             []string
		pattern, message string
	}{
		{[]string{"spec", "image"}, v1alpha1.ImageRepositoryPattern, v1alpha1.ImageRepositoryMessage},
		{[]string{"spec", "priorityClassName"}, v1alpha1.DNSSubdomainPattern, v1alpha1.PriorityClassNameMessage},
		{[]string{"spec", "storage", "storageClassName"}, v1alpha1.DNSSubdomainPattern, v1alpha1.StorageClassNameMessage},
	} {
		found := false
		for _, r := range crdSchema(t, tc.path...).XValidations {
			if r.Message == tc.message {
				found = true
				if !strings.Contains(r.Rule, "self.matches('"+tc.pattern+"')") {
					t.Errorf("%s: the rule %q does not match with %s", strings.Join(tc.path, "."), r.Rule, tc.pattern)
				}
			}
		}
		if !found {
			t.Errorf("%s: no rule with the message %q: keep the marker and the constant in step", strings.Join(tc.path, "."), tc.message)
		}
	}
	v := crdSchema(t, "spec", "etcd", "extraArgs").AdditionalProperties
	if v == nil || v.Schema == nil {
		t.Fatal("spec.etcd.extraArgs has no schema for its values")
	}
	want := apiextensionsv1.ValidationRule{Rule: "self.matches('" + v1alpha1.EtcdFlagValuePattern + "')", Message: v1alpha1.EtcdFlagValueMessage}
	if len(v.Schema.XValidations) != 1 || v.Schema.XValidations[0].Rule != want.Rule || v.Schema.XValidations[0].Message != want.Message {
		t.Errorf("spec.etcd.extraArgs values have rules %v, want exactly %v", v.Schema.XValidations, want)
	}
	if v.Schema.MaxLength == nil || *v.Schema.MaxLength != v1alpha1.EtcdFlagValueMaxLength {
		t.Errorf("spec.etcd.extraArgs values have maxLength %v, want %d", v.Schema.MaxLength, v1alpha1.EtcdFlagValueMaxLength)
	}
}

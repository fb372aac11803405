// Package fuzz holds fuzz targets over the whole spec → values → render → patches → contract
// path (render.Desired). It is a package of its own because the controllers package's
// tests start a kube-apiserver in TestMain, which every fuzz worker would run again.
package fuzz

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

var (
	rendererOnce sync.Once
	renderer     *charts.Renderer
	rendererErr  error
)

// embedded is one renderer per process: its cache is keyed by the values, so sharing it
// between fuzz inputs changes nothing but speed.
func embedded(t *testing.T) *charts.Renderer {
	t.Helper()
	rendererOnce.Do(func() { renderer, rendererErr = charts.Embedded() })
	if rendererErr != nil {
		t.Fatal(rendererErr)
	}
	return renderer
}

func cluster(spec v1alpha1.EtcdClusterSpec) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "fz", Namespace: "ns", UID: "0c0ffee0-0000-4000-8000-000000000001", Generation: 1},
		Spec:       spec,
	}
}

// checkObjects holds every object of a successful render to what the applier relies on: a
// kind, a name, the cluster's namespace and the inventory labels, and JSON that reads back.
func checkObjects(t *testing.T, c *v1alpha1.EtcdCluster, objs []*unstructured.Unstructured) {
	t.Helper()
	if len(objs) == 0 {
		t.Fatal("Desired returned no objects and no error")
	}
	for _, o := range objs {
		if o.GetKind() == "" || o.GetAPIVersion() == "" || o.GetName() == "" {
			t.Fatalf("rendered object without kind, apiVersion or name: %v", o.Object)
		}
		if o.GetNamespace() != c.Namespace {
			t.Fatalf("%s %s rendered in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetLabels()[v1alpha1.LabelCluster] != c.Name || o.GetLabels()[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
			t.Fatalf("%s %s lacks the inventory labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatalf("%s %s does not encode: %v", o.GetKind(), o.GetName(), err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s %s does not decode: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// checkClearError: an error names what to fix; an empty or bare wrapped message does not.
func checkClearError(t *testing.T, err error) {
	t.Helper()
	if strings.TrimSpace(err.Error()) == "" {
		t.Fatalf("empty error message (%T)", err)
	}
}

// FuzzDesiredFromJSON decodes the input as an EtcdClusterSpec (anything the JSON decoder
// accepts, admissible or not) and renders it: Desired may refuse it, with a message, but
// never panics, and what it returns is objects the applier can use.
func FuzzDesiredFromJSON(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"replicas":5,"version":"3.5.35","storage":{"size":"2Gi","ephemeral":true}}`,
		`{"etcd":{"extraArgs":{"log-level":"debug","force-new-cluster":"true"}}}`,
		`{"etcd":{"heartbeatIntervalMillis":100,"electionTimeoutMillis":1000,"quotaBackendBytes":"8Gi","autoCompactionRetention":"1h"}}`,
		`{"chart":{"values":{"commonLabels":{"a":"b"},"extraObjects":[]}}}`,
		`{"chart":{"values":{"etcd":"x"}}}`,
		`{"chart":{"values":{"storage":null,"image":{"pullPolicy":"Always"}}}}`,
		`{"chart":{"patches":[{"target":{"kind":"StatefulSet"},"json":[{"op":"add","path":"/metadata/labels/x","value":"y"}]}]}}`,
		`{"chart":{"patches":[{"target":{"kind":"Service","name":"fz-client"},"strategicMerge":{"spec":{"type":"NodePort"}}}]}}`,
		`{"chart":{"patches":[{"target":{"kind":"StatefulSet"},"json":[{"op":"remove","path":"/spec/template/spec/containers/0/args"}]}]}}`,
		`{"tls":{"peer":{"source":"Operator"},"client":{"source":"Secret","secretName":"s","acceptPlain":true}}}`,
		`{"networkPolicy":{"enabled":true,"allowedClients":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}}]}}`,
		`{"podLabels":{"app.kubernetes.io/name":"x"},"podAnnotations":{"a":"b"},"nodeSelector":{"k":"v"},"priorityClassName":"p"}`,
		`{"version":"3.7.3"}`,
		`{"version":"9.9.9"}`,
		`{"image":"reg.example/etcd","replicas":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec v1alpha1.EtcdClusterSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return
		}
		c := cluster(spec)
		objs, err := render.Desired(embedded(t), c, values.DefaultOperator(), memory.Of(c))
		if err != nil {
			checkClearError(t, err)
			return
		}
		checkObjects(t, c, objs)
	})
}

// versionsAdmitted are spec.version values the CRD admits (a pattern of 3.5 to 3.7).
var versionsAdmitted = []string{"", "3.5.35", "3.6.15", "3.6.16", "3.7.3", "3.5.0", "3.7.99"}

// FuzzDesiredAdmissible builds a spec only from values admission accepts (see the CRD and
// api/v1alpha1's validation tests): such a spec must render, and the render must keep the
// chart contract (Desired checks it). A refusal here is admission and controller disagreeing.
func FuzzDesiredAdmissible(f *testing.F) {
	f.Add(uint8(3), uint8(0), uint16(1), false, uint16(100), uint16(10), uint32(0), uint16(0), "log-level", "info", "team", "a", "k", "v", false, false, uint8(0))
	f.Add(uint8(1), uint8(1), uint16(20), true, uint16(0), uint16(0), uint32(100000), uint16(16), "experimental-initial-corrupt-check", "true", "", "", "", "", true, true, uint8(1))
	f.Add(uint8(7), uint8(4), uint16(100), false, uint16(500), uint16(5), uint32(1), uint16(2), "logger", "zap", "x/y", "z", "a.b/c", "", true, false, uint8(2))
	f.Fuzz(func(t *testing.T, replicas, version uint8, sizeGi uint16, ephemeral bool, heartbeat, electionFactor uint16, snapshot uint32,
		quotaGi uint16, flag, flagValue, labelKey, labelValue, chartKey, chartValue string, peerTLS, clientTLS bool, retention uint8) {
		spec := v1alpha1.EtcdClusterSpec{
			Replicas: ptr.To(int32(replicas%9) + 1), // admission: 1 to 9
			Version:  versionsAdmitted[int(version)%len(versionsAdmitted)],
			Storage:  v1alpha1.StorageSpec{Ephemeral: ptr.To(ephemeral)},
		}
		if sizeGi > 0 {
			spec.Storage.Size = ptr.To(resource.MustParse(fmt.Sprintf("%dGi", sizeGi)))
		}
		if heartbeat > 0 {
			spec.Etcd.HeartbeatIntervalMillis = ptr.To(int32(heartbeat))
			spec.Etcd.ElectionTimeoutMillis = ptr.To(int32(heartbeat) * int32(5+electionFactor%20))
		}
		if snapshot > 0 {
			spec.Etcd.SnapshotCount = ptr.To(int64(snapshot))
		}
		if quotaGi > 0 {
			spec.Etcd.QuotaBackendBytes = ptr.To(resource.MustParse(fmt.Sprintf("%dGi", quotaGi%64+1)))
		}
		switch retention % 3 {
		case 1:
			spec.Etcd.AutoCompactionRetention = "1h"
		case 2:
			spec.Etcd.AutoCompactionMode, spec.Etcd.AutoCompactionRetention = v1alpha1.AutoCompactionRevision, "1000"
		}
		if isAllowedFlag(flag) && flagValueAdmitted.MatchString(flagValue) && len(flagValue) <= v1alpha1.EtcdFlagValueMaxLength {
			spec.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{flag: v1alpha1.EtcdFlagValue(flagValue)}
		}
		if labelKey != "" {
			spec.PodLabels = map[string]string{labelKey: labelValue}
			spec.PodAnnotations = map[string]string{labelKey: labelValue}
		}
		if chartKey != "" && !guardedTop(chartKey) {
			raw, _ := json.Marshal(map[string]any{"commonAnnotations": map[string]any{chartKey: chartValue}})
			spec.Chart.Values = &runtime.RawExtension{Raw: raw}
		}
		if peerTLS || clientTLS {
			spec.TLS = &v1alpha1.TLSSpec{}
			if peerTLS {
				spec.TLS.Peer = &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceOperator}
			}
			if clientTLS {
				spec.TLS.Client = &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator}
			}
		}
		c := cluster(spec)
		objs, err := render.Desired(embedded(t), c, values.DefaultOperator(), memory.Of(c))
		if err != nil {
			var ve *values.VersionError
			if errors.As(err, &ve) {
				t.Fatalf("a new cluster refused version %q: %v", spec.Version, err)
			}
			t.Fatalf("an admissible spec was refused: %v\nspec: %+v", err, spec)
		}
		checkObjects(t, c, objs)
	})
}

// flagValueAdmitted is what admission admits as an extraArgs value.
var flagValueAdmitted = regexp.MustCompile(v1alpha1.EtcdFlagValuePattern)

func isAllowedFlag(k string) bool {
	for _, a := range v1alpha1.AllowedEtcdFlags {
		if a == k {
			return true
		}
	}
	return false
}

func guardedTop(k string) bool {
	for _, g := range v1alpha1.GuardedChartValues {
		if strings.SplitN(g.Path, ".", 2)[0] == k {
			return true
		}
	}
	return false
}

package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// These tests send EtcdClusters to a real kube-apiserver with the generated CRD installed, so
// they exercise the OpenAPI schema, the defaults and every CEL rule exactly as a cluster would.

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		// No skip: a validation suite that silently does not run is worse than a red build.
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// requestTimeout bounds one API call; the machine may be slow, the API server is local.
const requestTimeout = 30 * time.Second

func reqCtx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), requestTimeout)
	t.Cleanup(cancel)
	return c
}

// newCluster returns an EtcdCluster with an empty spec, as a user would write it, after
// mutate.
func newCluster(ns, name string, mutate func(*v1alpha1.EtcdClusterSpec)) *v1alpha1.EtcdCluster {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mutate != nil {
		mutate(&ec.Spec)
	}
	return ec
}

// objectName turns a subtest index into an object name, so every case of a table gets its
// own object in the test's namespace.
func objectName(i int) string { return fmt.Sprintf("c%d", i) }

// checkAdmission asserts that err is nil when want is empty, and otherwise that the API
// server refused the object as invalid with a message holding every string of want: the
// words that tell the user what to fix.
func checkAdmission(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("want the object accepted, got: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("want the object refused with a message containing %q, got it accepted", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %T: %v", err, err)
	}
	t.Logf("refused as expected: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal message lacks %q:\n%v", w, err)
		}
	}
}

// createCase is one object sent to the API server on create.
type createCase struct {
	name string
	spec func(*v1alpha1.EtcdClusterSpec)
	// wantErr: empty means accepted; otherwise the substrings the refusal must contain.
	wantErr []string
}

// runCreateCases creates each case's object in a namespace of its own test.
func runCreateCases(t *testing.T, cases []createCase) {
	t.Helper()
	ns := env.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(reqCtx(t), newCluster(ns, objectName(i), tc.spec))
			checkAdmission(t, err, tc.wantErr)
		})
	}
}

func TestDefaults(t *testing.T) {
	ns := env.Namespace(t)
	ec := newCluster(ns, "defaults", nil)
	if err := env.Client.Create(reqCtx(t), ec); err != nil {
		t.Fatalf("failed to create an EtcdCluster with an empty spec: %v", err)
	}
	got := &v1alpha1.EtcdCluster{}
	if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), got); err != nil {
		t.Fatalf("failed to get the EtcdCluster: %v", err)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 3 {
		t.Errorf("spec.replicas = %v, want 3", ptrString(got.Spec.Replicas))
	}
	if got.Spec.Version != "3.6.16" {
		t.Errorf("spec.version = %q, want 3.6.16", got.Spec.Version)
	}
	if got.Spec.Version != v1alpha1.DefaultVersion {
		t.Errorf("the CRD defaults spec.version to %q but v1alpha1.DefaultVersion is %q: keep the marker and the constant in step",
			got.Spec.Version, v1alpha1.DefaultVersion)
	}
	if want := resource.MustParse("1Gi"); got.Spec.Storage.Size == nil || got.Spec.Storage.Size.Cmp(want) != 0 {
		t.Errorf("spec.storage.size = %v, want 1Gi", ptrString(got.Spec.Storage.Size))
	}
	if got.Spec.Storage.Ephemeral != nil || got.Spec.Storage.StorageClassName != nil {
		t.Errorf("spec.storage = %+v, want ephemeral and storageClassName unset", got.Spec.Storage)
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

func TestReplicas(t *testing.T) {
	replicas := func(n int32) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) { s.Replicas = ptr.To(n) }
	}
	runCreateCases(t, []createCase{
		{name: "1 accepted", spec: replicas(1)},
		{name: "3 accepted", spec: replicas(3)},
		{name: "9 accepted", spec: replicas(9)},
		{name: "0 refused", spec: replicas(0), wantErr: []string{"spec.replicas", "greater than or equal to 1"}},
		{name: "-1 refused", spec: replicas(-1), wantErr: []string{"spec.replicas", "greater than or equal to 1"}},
		{name: "10 refused", spec: replicas(10), wantErr: []string{"spec.replicas", "less than or equal to 9"}},
	})
}

func TestVersion(t *testing.T) {
	version := func(v string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) { s.Version = v }
	}
	format := []string{"spec.version", "MAJOR.MINOR.PATCH", "3.6.16"}
	minor := []string{"spec.version", "3.5, 3.6 and 3.7"}
	runCreateCases(t, []createCase{
		{name: "3.5.35 accepted", spec: version("3.5.35")},
		{name: "3.6.16 accepted", spec: version("3.6.16")},
		{name: "3.7.3 accepted", spec: version("3.7.3")},
		{name: "latest refused", spec: version("latest"), wantErr: format},
		{name: "v prefix refused", spec: version("v3.6.16"), wantErr: append(format, "without a 'v' prefix")},
		{name: "minor only refused", spec: version("3.6"), wantErr: format},
		{name: "pre-release refused", spec: version("3.6.16-rc.0"), wantErr: format},
		{name: "3.4 refused", spec: version("3.4.0"), wantErr: minor},
		{name: "3.8 refused", spec: version("3.8.0"), wantErr: minor},
		{name: "major 4 refused", spec: version("4.0.0"), wantErr: minor},
		{name: "too long refused", spec: version("3.6." + strings.Repeat("1", 40)), wantErr: []string{"spec.version", "32"}},
	})
}

func TestImage(t *testing.T) {
	image := func(i string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) { s.Image = i }
	}
	noTag := []string{"spec.image", "without a tag or digest", "spec.version"}
	runCreateCases(t, []createCase{
		{name: "official repository accepted", spec: image(v1alpha1.DefaultImageRepository)},
		{name: "bare name accepted", spec: image("etcd")},
		{name: "registry with port accepted", spec: image("registry.example:5000/etcd")},
		{name: "registry with port and path accepted", spec: image("localhost:5000/mirrors/etcd-development/etcd")},
		{name: "tag refused", spec: image("registry.example/etcd:v3.6.16"), wantErr: noTag},
		{name: "bare name with tag refused", spec: image("etcd:latest"), wantErr: noTag},
		{name: "registry port and tag refused", spec: image("registry.example:5000/etcd:v3.6.16"), wantErr: noTag},
		{name: "digest refused", spec: image("registry.example/etcd@sha256:" + strings.Repeat("a", 64)), wantErr: noTag},
	})
}

func TestStorageOnCreate(t *testing.T) {
	runCreateCases(t, []createCase{
		{name: "storageClassName accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.StorageClassName = ptr.To("fast")
		}},
		{name: "ephemeral accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.Ephemeral = ptr.To(true)
		}},
		{name: "ephemeral false with storageClassName accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.Ephemeral = ptr.To(false)
			s.Storage.StorageClassName = ptr.To("fast")
		}},
		{name: "ephemeral with storageClassName refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Storage.Ephemeral = ptr.To(true)
			s.Storage.StorageClassName = ptr.To("fast")
		}, wantErr: []string{"storage.storageClassName has no effect with storage.ephemeral", "remove one of them"}},
	})
}

// TestStorageImmutable covers the transition rules of StorageSpec: the class and the kind of
// volume cannot change once the cluster exists, and the size may only grow.
func TestStorageImmutable(t *testing.T) {
	classChange := []string{"storage.storageClassName cannot be changed after creation"}
	ephemeralChange := []string{"storage.ephemeral cannot be changed after creation"}
	sizeShrink := []string{"storage.size cannot shrink", "move the data with a snapshot"}
	ephemeralSize := []string{"storage.size cannot change with storage.ephemeral: true"}
	cases := []struct {
		name    string
		create  func(*v1alpha1.StorageSpec)
		update  func(*v1alpha1.EtcdClusterSpec)
		wantErr []string
	}{
		{
			name: "unchanged storage with other changes accepted",
			create: func(s *v1alpha1.StorageSpec) {
				s.StorageClassName = ptr.To("fast")
				s.Size = ptr.To(resource.MustParse("2Gi"))
			},
			update: func(s *v1alpha1.EtcdClusterSpec) {
				s.Replicas = ptr.To(int32(5))
				s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{"log-level": "warn"}
			},
		},
		{
			name:   "unchanged ephemeral accepted",
			create: func(s *v1alpha1.StorageSpec) { s.Ephemeral = ptr.To(true) },
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Paused = true },
		},
		{
			name:   "same size spelled differently accepted",
			create: func(s *v1alpha1.StorageSpec) { s.Size = ptr.To(resource.MustParse("1Gi")) },
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Size = ptr.To(resource.MustParse("1024Mi")) },
		},
		{
			name:    "storageClassName changed refused",
			create:  func(s *v1alpha1.StorageSpec) { s.StorageClassName = ptr.To("fast") },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = ptr.To("slow") },
			wantErr: classChange,
		},
		{
			name:    "storageClassName added refused",
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = ptr.To("fast") },
			wantErr: classChange,
		},
		{
			name:    "storageClassName removed refused",
			create:  func(s *v1alpha1.StorageSpec) { s.StorageClassName = ptr.To("fast") },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.StorageClassName = nil },
			wantErr: classChange,
		},
		{
			name:    "ephemeral turned on refused",
			create:  func(s *v1alpha1.StorageSpec) { s.Ephemeral = ptr.To(false) },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Ephemeral = ptr.To(true) },
			wantErr: ephemeralChange,
		},
		{
			name:    "ephemeral added refused",
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Ephemeral = ptr.To(true) },
			wantErr: ephemeralChange,
		},
		{
			name:    "ephemeral removed refused",
			create:  func(s *v1alpha1.StorageSpec) { s.Ephemeral = ptr.To(true) },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Ephemeral = nil },
			wantErr: ephemeralChange,
		},
		{
			// The operator expands the members' claims (see internal/plan/storage).
			name:   "size grown accepted",
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Size = ptr.To(resource.MustParse("2Gi")) },
		},
		{
			name:    "size grown with ephemeral refused",
			create:  func(s *v1alpha1.StorageSpec) { s.Ephemeral = ptr.To(true) },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Size = ptr.To(resource.MustParse("2Gi")) },
			wantErr: ephemeralSize,
		},
		{
			name:    "size shrunk refused",
			create:  func(s *v1alpha1.StorageSpec) { s.Size = ptr.To(resource.MustParse("10Gi")) },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Size = ptr.To(resource.MustParse("5Gi")) },
			wantErr: sizeShrink,
		},
		{
			// Removing the size brings the 1Gi default back, which is a change.
			name:    "size removed refused",
			create:  func(s *v1alpha1.StorageSpec) { s.Size = ptr.To(resource.MustParse("2Gi")) },
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.Storage.Size = nil },
			wantErr: sizeShrink,
		},
	}
	ns := env.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(i), func(s *v1alpha1.EtcdClusterSpec) {
				if tc.create != nil {
					tc.create(&s.Storage)
				}
			})
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatalf("failed to create the EtcdCluster: %v", err)
			}
			// Update what the API server stored (with its defaults), as a user editing the
			// object would.
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatalf("failed to get the EtcdCluster: %v", err)
			}
			tc.update(&ec.Spec)
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

func TestRaftTimings(t *testing.T) {
	timings := func(heartbeat, election int32) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			if heartbeat != 0 {
				s.Etcd.HeartbeatIntervalMillis = ptr.To(heartbeat)
			}
			if election != 0 {
				s.Etcd.ElectionTimeoutMillis = ptr.To(election)
			}
		}
	}
	ratio := []string{"etcd.electionTimeoutMillis must be at least 5 times etcd.heartbeatIntervalMillis"}
	runCreateCases(t, []createCase{
		{name: "etcd defaults accepted", spec: timings(0, 0)},
		{name: "heartbeat 100 election 1000 accepted", spec: timings(100, 1000)},
		{name: "heartbeat 300 election 1500 accepted", spec: timings(300, 1500)},
		{name: "heartbeat 200 alone accepted", spec: timings(200, 0)},
		{name: "election 500 alone accepted", spec: timings(0, 500)},
		{name: "heartbeat 100 election 499 refused", spec: timings(100, 499), wantErr: ratio},
		{name: "heartbeat 300 election 1000 refused", spec: timings(300, 1000), wantErr: ratio},
		// Against etcd's default election timeout of 1000ms.
		{name: "heartbeat 300 alone refused", spec: timings(300, 0), wantErr: append(ratio, "defaults are 1000 and 100")},
		// Against etcd's default heartbeat of 100ms.
		{name: "election 499 alone refused", spec: timings(0, 499), wantErr: ratio},
		{name: "heartbeat below minimum refused", spec: timings(5, 0), wantErr: []string{"spec.etcd.heartbeatIntervalMillis", "greater than or equal to 10"}},
		{name: "election above maximum refused", spec: timings(0, 60000), wantErr: []string{"spec.etcd.electionTimeoutMillis", "less than or equal to 50000"}},
	})
}

func TestAutoCompaction(t *testing.T) {
	compaction := func(mode v1alpha1.AutoCompactionMode, retention string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.Etcd.AutoCompactionMode = mode
			s.Etcd.AutoCompactionRetention = retention
		}
	}
	retention := []string{"etcd.autoCompactionRetention must be a revision count", "with mode revision", "duration"}
	runCreateCases(t, []createCase{
		// No mode: etcd's default mode is periodic.
		{name: "no mode duration accepted", spec: compaction("", "1h")},
		{name: "no mode hours accepted", spec: compaction("", "72")},
		{name: "no mode compound duration accepted", spec: compaction("", "1h30m")},
		{name: "no mode words refused", spec: compaction("", "hourly"), wantErr: retention},
		{name: "periodic duration accepted", spec: compaction(v1alpha1.AutoCompactionPeriodic, "30m")},
		{name: "periodic fractional duration accepted", spec: compaction(v1alpha1.AutoCompactionPeriodic, "1.5h")},
		{name: "periodic hours accepted", spec: compaction(v1alpha1.AutoCompactionPeriodic, "1")},
		{name: "periodic days refused", spec: compaction(v1alpha1.AutoCompactionPeriodic, "1d"), wantErr: retention},
		{name: "periodic negative refused", spec: compaction(v1alpha1.AutoCompactionPeriodic, "-1h"), wantErr: retention},
		{name: "periodic fractional hours refused", spec: compaction(v1alpha1.AutoCompactionPeriodic, "1.5"), wantErr: retention},
		{name: "revision count accepted", spec: compaction(v1alpha1.AutoCompactionRevision, "10000")},
		{name: "revision duration refused", spec: compaction(v1alpha1.AutoCompactionRevision, "1h"), wantErr: retention},
		{name: "revision mode without retention accepted", spec: compaction(v1alpha1.AutoCompactionRevision, "")},
		{name: "unknown mode refused", spec: compaction("daily", "1"), wantErr: []string{"spec.etcd.autoCompactionMode", `"periodic", "revision"`}},
	})
}

func TestExtraArgs(t *testing.T) {
	args := func(kv ...string) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{}
			for i := 0; i < len(kv); i += 2 {
				s.Etcd.ExtraArgs[kv[i]] = v1alpha1.EtcdFlagValue(kv[i+1])
			}
		}
	}
	tooMany := func(s *v1alpha1.EtcdClusterSpec) {
		s.Etcd.ExtraArgs = map[string]v1alpha1.EtcdFlagValue{}
		for _, f := range v1alpha1.AllowedEtcdFlags[:33] {
			s.Etcd.ExtraArgs[f] = "x"
		}
	}
	owned := "extraArgs sets flags that etcd-pilot owns"
	typed := "extraArgs sets flags that have typed fields"
	unknown := "extraArgs has unknown etcd flags"
	runCreateCases(t, []createCase{
		{name: "allowed flag accepted", spec: args("log-level", "debug")},
		{name: "several allowed flags accepted", spec: args("log-level", "info", "max-request-bytes", "10485760", "experimental-initial-corrupt-check", "true")},
		{name: "empty map accepted", spec: args()},
		{name: "owned flag refused", spec: args("initial-cluster", "a=http://a:2380"), wantErr: []string{owned, "initial-cluster", "Remove them"}},
		{name: "unsafe flag refused", spec: args("force-new-cluster", "true"), wantErr: []string{owned, "force-new-cluster"}},
		{name: "owned flags all named", spec: args("data-dir", "/tmp", "name", "x", "log-level", "debug"), wantErr: []string{owned, `"data-dir"`, `"name"`}},
		{name: "typed flag refused", spec: args("quota-backend-bytes", "8589934592"), wantErr: []string{typed, "quota-backend-bytes", "spec.etcd.quotaBackendBytes"}},
		{name: "typed timing flag refused", spec: args("election-timeout", "5000"), wantErr: []string{typed, "election-timeout", "electionTimeoutMillis"}},
		{name: "unknown flag refused", spec: args("foo", "bar"), wantErr: []string{unknown, "foo"}},
		{name: "dashed flag refused", spec: args("--log-level", "debug"), wantErr: []string{unknown, "--log-level", "without leading dashes"}},
		{name: "owned and unknown both reported", spec: args("initial-cluster", "x", "foo", "bar", "log-level", "debug"), wantErr: []string{owned, "initial-cluster", unknown, "foo"}},
		{name: "more than 32 refused", spec: tooMany, wantErr: []string{"spec.etcd.extraArgs", "at most 32"}},
	})
}

// TestExtraArgsRulesMatchFlagLists keeps the Go flag lists of flags.go and the lists written
// into the CEL rules of the generated CRD in step: the values function filters with the Go
// lists, the API server with the CEL ones.
func TestExtraArgsRulesMatchFlagLists(t *testing.T) {
	type flagList struct {
		name  string
		flags []string
	}
	owned := flagList{"OwnedEtcdFlags", v1alpha1.OwnedEtcdFlags}
	typed := flagList{"TypedEtcdFlags", v1alpha1.TypedEtcdFlags}
	allowed := flagList{"AllowedEtcdFlags", v1alpha1.AllowedEtcdFlags}
	// Each rule, known by the start of its messageExpression, and the list literals its rule
	// and its messageExpression hold, in order.
	want := []struct {
		message string
		lists   []flagList
	}{
		{"'extraArgs sets flags that etcd-pilot owns", []flagList{owned}},
		{"'extraArgs sets flags that have typed fields", []flagList{typed}},
		{"'extraArgs has unknown etcd flags", []flagList{allowed, owned, typed}},
	}

	rules := extraArgsRules(t)
	if len(rules) != len(want) {
		t.Fatalf("extraArgs has %d CEL rules, want %d: update this test along with the rules", len(rules), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(rules, func(r apiextensionsv1.ValidationRule) bool {
			return strings.HasPrefix(r.MessageExpression, w.message)
		})
		if i < 0 {
			t.Errorf("no extraArgs rule with a messageExpression starting %s", w.message)
			continue
		}
		for _, part := range []struct{ what, expr string }{{"rule", rules[i].Rule}, {"messageExpression", rules[i].MessageExpression}} {
			got := celStringLists(part.expr)
			if len(got) != len(w.lists) {
				t.Errorf("%s of %s...: %d string lists, want %d", part.what, w.message, len(got), len(w.lists))
				continue
			}
			for j, l := range w.lists {
				if missing, extra := diff(l.flags, got[j]); len(missing) > 0 || len(extra) > 0 {
					t.Errorf("%s of %s..., list %d differs from v1alpha1.%s: missing from CEL %q, only in CEL %q",
						part.what, w.message, j+1, l.name, missing, extra)
				}
			}
		}
	}

	for _, l := range []flagList{owned, typed, allowed} {
		if dup := duplicates(l.flags); len(dup) > 0 {
			t.Errorf("%s lists %q more than once", l.name, dup)
		}
	}
	if dup := duplicates(slices.Concat(owned.flags, typed.flags, allowed.flags)); len(dup) > 0 {
		t.Errorf("flags in more than one of OwnedEtcdFlags, TypedEtcdFlags and AllowedEtcdFlags: %q", dup)
	}
}

// extraArgsRules reads the CEL rules on spec.etcd.extraArgs from the generated CRD.
func extraArgsRules(t *testing.T) apiextensionsv1.ValidationRules {
	t.Helper()
	return crdSchema(t, "spec", "etcd", "extraArgs").XValidations
}

// crdSchema reads the schema of the field at path from the generated CRD.
func crdSchema(t *testing.T, path ...string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "etcdpilot.io_etcdclusters.yaml"))
	if err != nil {
		t.Fatalf("failed to read the CRD: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("failed to parse the CRD: %v", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != v1alpha1.GroupVersion.Version {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			t.Fatalf("CRD version %s has no schema", v.Name)
		}
		s := v.Schema.OpenAPIV3Schema
		for _, p := range path {
			next, ok := s.Properties[p]
			if !ok {
				t.Fatalf("CRD schema lacks %s", p)
			}
			s = &next
		}
		return s
	}
	t.Fatalf("CRD has no version %s", v1alpha1.GroupVersion.Version)
	return nil
}

var (
	celListRE   = regexp.MustCompile(`\[((?:'[^']*'\s*,\s*)*'[^']*')\]`)
	celStringRE = regexp.MustCompile(`'([^']*)'`)
)

// celStringLists returns the list literals of strings in a CEL expression, in order.
func celStringLists(expr string) [][]string {
	var lists [][]string
	for _, m := range celListRE.FindAllStringSubmatch(expr, -1) {
		var l []string
		for _, s := range celStringRE.FindAllStringSubmatch(m[1], -1) {
			l = append(l, s[1])
		}
		lists = append(lists, l)
	}
	return lists
}

// diff returns the strings of want missing from got, and those of got not in want.
func diff(want, got []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

func duplicates(l []string) []string {
	seen := map[string]bool{}
	var dup []string
	for _, s := range l {
		if seen[s] {
			dup = append(dup, s)
		}
		seen[s] = true
	}
	return dup
}

// guardedSample is a value of the JSON type t, as a user would write it.
func guardedSample(t string) any {
	switch t {
	case "string":
		return "x"
	case "integer":
		return 5
	case "boolean":
		return true
	case "object":
		return map[string]any{"a": "b"}
	case "array":
		return []any{map[string]any{"a": "b"}}
	}
	panic("no sample for type " + t)
}

// nested returns {"a": {"b": v}} for the path a.b.
func nested(path string, v any) map[string]any {
	parts := strings.Split(path, ".")
	out := map[string]any{parts[len(parts)-1]: v}
	for i := len(parts) - 2; i >= 0; i-- {
		out = map[string]any{parts[i]: out}
	}
	return out
}

// withChartValues sets spec.chart.values to v's JSON.
func withChartValues(t *testing.T, v any) func(*v1alpha1.EtcdClusterSpec) {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return func(s *v1alpha1.EtcdClusterSpec) { s.Chart.Values = &runtime.RawExtension{Raw: raw} }
}

// TestChartValuesGuardedKeys sends every key of v1alpha1.GuardedChartValues to the API
// server and to values.Compute (which refuses them for objects stored before the rules
// existed): both must refuse exactly the same keys, with the same message, and both must
// accept the keys that stay open.
func TestChartValuesGuardedKeys(t *testing.T) {
	type tc struct {
		name   string
		values any
		want   string // empty: accepted
	}
	var cases []tc
	for _, g := range v1alpha1.GuardedChartValues {
		cases = append(cases, tc{name: g.Path, values: nested(g.Path, guardedSample(g.Type)), want: g.Message()})
	}
	for _, raw := range []string{
		`{"imagePullSecrets": [{"name": "pull"}]}`,
		`{"image": {"pullPolicy": "Always"}}`,
		`{"podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}}`,
		`{"terminationGracePeriodSeconds": 120}`,
		`{"serviceAccount": {"create": false, "name": "etcd"}}`,
		`{"service": {"type": "NodePort", "annotations": {"a": "b"}}}`,
		`{"podDisruptionBudget": {"enabled": false}}`,
		`{"commonLabels": {"team": "a"}}`,
		`{"etcd": {"clusterDomain": "cluster.example", "clientPort": 12379, "peerPort": 12380, "metricsPort": 12381}}`,
		`{"storage": {}, "unknownKey": {"kept": true}}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{name: "open " + raw, values: v})
	}

	ns := env.Namespace(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(i), withChartValues(t, c.values))
			var want []string
			if c.want != "" {
				want = []string{"spec.chart.values", c.want}
			}
			checkAdmission(t, env.Client.Create(reqCtx(t), ec.DeepCopy()), want)

			// What the API server stored, or for a refused object what it would have.
			if c.want == "" {
				if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
					t.Fatalf("failed to get the EtcdCluster: %v", err)
				}
				var stored any
				if err := json.Unmarshal(ec.Spec.Chart.Values.Raw, &stored); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(normalize(t, c.values), stored) {
					t.Errorf("the API server stored spec.chart.values %s, want them as sent", ec.Spec.Chart.Values.Raw)
				}
			}
			_, err := values.Compute(ec, values.DefaultOperator())
			switch {
			case c.want == "" && err != nil:
				t.Errorf("values.Compute refused what the API server accepted: %v", err)
			case c.want != "" && (err == nil || err.Error() != c.want):
				t.Errorf("values.Compute: %v, want the admission message %q", err, c.want)
			}
		})
	}
}

// normalize gives v as it comes back from JSON.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChartValuesGuardedNulls covers nulls, which would delete the computed values: CEL
// cannot tell a null from a missing field, so the CRD declares the guarded keys and their
// parents not nullable and the API server drops the null before storing. values.Compute
// refuses what an object stored before the rules could still hold.
func TestChartValuesGuardedNulls(t *testing.T) {
	var cases []map[string]any
	for _, g := range v1alpha1.GuardedChartValues {
		cases = append(cases, nested(g.Path, nil))
	}
	cases = append(cases, map[string]any{"etcd": nil}, map[string]any{"image": nil}, map[string]any{"storage": nil})
	ns := env.Namespace(t)
	for i, v := range cases {
		sent, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(string(sent), func(t *testing.T) {
			ec := newCluster(ns, objectName(i), withChartValues(t, v))
			if _, err := values.Compute(ec, values.DefaultOperator()); err == nil {
				t.Errorf("values.Compute accepted spec.chart.values %s", sent)
			}
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatalf("want the object accepted with the null dropped, got: %v", err)
			}
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatal(err)
			}
			var stored map[string]any
			if err := json.Unmarshal(ec.Spec.Chart.Values.Raw, &stored); err != nil {
				t.Fatal(err)
			}
			if want := dropNulls(v); !reflect.DeepEqual(stored, want) {
				t.Errorf("the API server stored spec.chart.values %s, want %v: the null dropped", ec.Spec.Chart.Values.Raw, want)
			}
			if _, err := values.Compute(ec, values.DefaultOperator()); err != nil {
				t.Errorf("values.Compute refused what the API server stored: %v", err)
			}
		})
	}
}

// dropNulls returns m without its null values, at any depth.
func dropNulls(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch v := v.(type) {
		case nil:
		case map[string]any:
			out[k] = dropNulls(v)
		default:
			out[k] = v
		}
	}
	return out
}

// TestChartValuesGuardedParents covers parents of guarded keys that are not objects (they
// would replace every computed value below them) and several guarded keys at once.
func TestChartValuesGuardedParents(t *testing.T) {
	runCreateCases(t, []createCase{
		{name: "string image refused", spec: withChartValues(t, map[string]any{"image": "etcd:latest"}),
			wantErr: []string{"spec.chart.values.image", "must be of type object"}},
		{name: "list etcd refused", spec: withChartValues(t, map[string]any{"etcd": []any{"x"}}),
			wantErr: []string{"spec.chart.values.etcd", "must be of type object"}},
		{name: "several keys each reported", spec: withChartValues(t, map[string]any{"replicas": 5, "etcd": map[string]any{"version": "3.7.3", "clusterDomain": "cluster.example"}}),
			wantErr: []string{"spec.chart.values.replicas: use spec.replicas", "spec.chart.values.etcd.version: use spec.version"}},
	})
}

// TestChartValuesRulesMatchGuardedList checks the generated CRD against
// v1alpha1.GuardedChartValues: one rule per key, in order, with its message, and each key
// declared (CEL cannot see undeclared fields) with its type. Run `make manifests` after
// changing the list.
func TestChartValuesRulesMatchGuardedList(t *testing.T) {
	s := crdSchema(t, "spec", "chart", "values")
	if !ptr.Deref(s.XPreserveUnknownFields, false) {
		t.Errorf("spec.chart.values no longer keeps unknown fields")
	}
	rules := s.XValidations
	if want := len(v1alpha1.GuardedChartValues) + len(v1alpha1.CheckedChartValues); len(rules) != want {
		t.Errorf("spec.chart.values has %d CEL rules, want one per guarded key and one per checked key (%d): run make manifests",
			len(rules), want)
	}
	for i, g := range v1alpha1.GuardedChartValues {
		if i < len(rules) && (rules[i].Rule != g.Rule() || rules[i].Message != g.Message()) {
			t.Errorf("rule %d is %q (%q), want %q (%q): run make manifests", i, rules[i].Rule, rules[i].Message, g.Rule(), g.Message())
		}
		p := s
		for _, part := range strings.Split(g.Path, ".") {
			next, ok := p.Properties[part]
			if !ok {
				t.Errorf("spec.chart.values does not declare %s: run make manifests", g.Path)
				p = nil
				break
			}
			p = &next
		}
		if p != nil && (p.Type != g.Type || p.Nullable) {
			t.Errorf("spec.chart.values.%s is declared %q nullable=%v, want %q and not nullable (CEL cannot refuse a null)", g.Path, p.Type, p.Nullable, g.Type)
		}
	}
	for i, c := range v1alpha1.CheckedChartValues {
		j := len(v1alpha1.GuardedChartValues) + i
		if j < len(rules) && (rules[j].Rule != c.Rule() || rules[j].Message != c.Message()) {
			t.Errorf("rule %d is %q (%q), want %q (%q): run make manifests", j, rules[j].Rule, rules[j].Message, c.Rule(), c.Message())
		}
		p := s
		for _, part := range strings.Split(c.Path, ".") {
			next, ok := p.Properties[part]
			if !ok {
				t.Errorf("spec.chart.values does not declare %s: run make manifests", c.Path)
				p = nil
				break
			}
			p = &next
		}
		if p != nil && (p.Type != "string" || p.Nullable || p.MaxLength == nil || *p.MaxLength != int64(c.MaxLength)) {
			t.Errorf("spec.chart.values.%s is declared %q nullable=%v maxLength=%v, want a string of at most %d, not nullable", c.Path, p.Type, p.Nullable, p.MaxLength, c.MaxLength)
		}
	}
	var paths []string
	for _, g := range v1alpha1.GuardedChartValues {
		paths = append(paths, g.Path)
	}
	for _, c := range v1alpha1.CheckedChartValues {
		paths = append(paths, c.Path)
	}
	if dup := duplicates(paths); len(dup) > 0 {
		t.Errorf("GuardedChartValues and CheckedChartValues list %q more than once", dup)
	}
}

func TestVersionTransitions(t *testing.T) {
	down := []string{"version cannot go from 3.6.16 down to 3.5.35", "downgrade procedure"}
	downKnown := []string{"version cannot go from 3.6.16 down to 3.5.35", "etcd already runs the cluster at version 3.6.0"}
	old35 := []string{"version cannot go from 3.5.15 to 3.6.16", "3.5.20 or later first"}
	cases := []struct {
		name, from, to string
		// clusterVersion is written to status before the change, as the operator reports it.
		clusterVersion string
		wantErr        []string
	}{
		{name: "patch upgrade accepted", from: "3.6.15", to: "3.6.16"},
		{name: "patch downgrade within a minor accepted", from: "3.6.16", to: "3.6.15"},
		{name: "minor upgrade from a recent 3.5 accepted", from: "3.5.35", to: "3.6.16"},
		{name: "minor upgrade from 3.5.20 accepted", from: "3.5.20", to: "3.6.16"},
		{name: "minor upgrade 3.6 to 3.7 accepted", from: "3.6.16", to: "3.7.3"},
		{name: "two minors at once accepted (the operator steps through 3.6)", from: "3.5.35", to: "3.7.3"},
		{name: "minor downgrade refused while the cluster version is unknown", from: "3.6.16", to: "3.5.35", wantErr: down},
		{name: "minor downgrade refused once the cluster runs the new minor", from: "3.6.16", to: "3.5.35", clusterVersion: "3.6.0", wantErr: downKnown},
		{name: "rollback accepted while the cluster version is the old minor", from: "3.6.16", to: "3.5.35", clusterVersion: "3.5.0"},
		{name: "rollback of a two-minor jump refused below the cluster version", from: "3.7.3", to: "3.5.35", clusterVersion: "3.6.0",
			wantErr: []string{"version cannot go from 3.7.3 down to 3.5.35", "3.6.0"}},
		{name: "rollback of a two-minor jump to the cluster version accepted", from: "3.7.3", to: "3.6.16", clusterVersion: "3.6.0"},
		{name: "leaving an old 3.5 refused", from: "3.5.15", to: "3.6.16", wantErr: old35},
	}
	ns := env.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(100+i), func(s *v1alpha1.EtcdClusterSpec) { s.Version = tc.from })
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatalf("failed to create the EtcdCluster: %v", err)
			}
			if tc.clusterVersion != "" {
				ec.Status.ClusterVersion = tc.clusterVersion
				if err := env.Client.Status().Update(reqCtx(t), ec); err != nil {
					t.Fatalf("failed to set status.clusterVersion: %v", err)
				}
			}
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatalf("failed to get the EtcdCluster: %v", err)
			}
			ec.Spec.Version = tc.to
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

// TestUpgradeSpecDefaults checks the rollout timeout's default.
func TestUpgradeSpecDefaults(t *testing.T) {
	ns := env.Namespace(t)
	ec := newCluster(ns, "defaults", nil)
	if err := env.Client.Create(reqCtx(t), ec); err != nil {
		t.Fatal(err)
	}
	if d := ec.Spec.Upgrade.MemberTimeout; d == nil || d.Duration != 5*time.Minute {
		t.Fatalf("spec.upgrade.memberTimeout = %v, want the 5m default", d)
	}
}

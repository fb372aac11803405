package render_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

func patched(patches ...string) *v1alpha1.EtcdCluster {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "tenant", UID: "uid-1"}}
	for _, p := range patches {
		c.Spec.Chart.Patches = append(c.Spec.Chart.Patches, v1alpha1.ChartPatch{
			Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, StrategicMerge: &runtime.RawExtension{Raw: []byte(p)}})
	}
	return c
}

// etcdContainer is a strategic-merge patch of the etcd container's securityContext.
func etcdContainer(securityContext string) string {
	return `{"spec":{"template":{"spec":{"containers":[{"name":"etcd","securityContext":` + securityContext + `}]}}}}`
}

func podSpec(spec string) string { return `{"spec":{"template":{"spec":` + spec + `}}}` }

// TestHostilePatchesAreRefused: a tenant's spec.chart.patches cannot take the member pods out
// of the restricted Pod Security profile, nor give them a service-account token: the render
// is refused with a message that names the object, the container and the field. One row per
// escape a strategic-merge patch rendered before the check existed.
func TestHostilePatchesAreRefused(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		patch string
		want  []string // substrings of the refusal
	}{
		{"privileged", etcdContainer(`{"privileged":true}`),
			[]string{"StatefulSet etcd", `container "etcd"`, "securityContext.privileged=true"}},
		{"runAsUser 0", podSpec(`{"securityContext":{"runAsUser":0}}`),
			[]string{"StatefulSet etcd", "runAsUser=0"}},
		{"runAsUser 0 in the container", etcdContainer(`{"runAsUser":0}`),
			[]string{"StatefulSet etcd", `container "etcd"`, "runAsUser=0"}},
		{"hostPath of /", podSpec(`{"volumes":[{"name":"root","hostPath":{"path":"/"}}],"containers":[{"name":"etcd","volumeMounts":[{"name":"root","mountPath":"/host"}]}]}`),
			[]string{"StatefulSet etcd", "hostPath", `"root"`}},
		{"hostNetwork", podSpec(`{"hostNetwork":true}`),
			[]string{"StatefulSet etcd", "hostNetwork=true"}},
		{"hostPID and hostIPC", podSpec(`{"hostPID":true,"hostIPC":true}`),
			[]string{"hostPID=true", "hostIPC=true"}},
		{"another service account with its token", podSpec(`{"serviceAccountName":"cluster-admin-sa","automountServiceAccountToken":true}`),
			[]string{"StatefulSet etcd", "spec.template.spec.serviceAccountName", "cluster-admin-sa", "spec.template.spec.automountServiceAccountToken"}},
		{"the token mounted", podSpec(`{"automountServiceAccountToken":true}`),
			[]string{"spec.template.spec.automountServiceAccountToken"}},
		{"capability SYS_ADMIN", etcdContainer(`{"capabilities":{"add":["SYS_ADMIN"]}}`),
			[]string{"StatefulSet etcd", `container "etcd"`, "SYS_ADMIN"}},
		{"allowPrivilegeEscalation", etcdContainer(`{"allowPrivilegeEscalation":true}`),
			[]string{`container "etcd"`, "allowPrivilegeEscalation=false"}},
		{"seccomp Unconfined", podSpec(`{"securityContext":{"seccompProfile":{"type":"Unconfined"}}}`),
			[]string{"seccompProfile"}},
		{"hostPort", podSpec(`{"containers":[{"name":"etcd","ports":[{"name":"client","containerPort":2379,"hostPort":2379}]}]}`),
			[]string{`container "etcd"`, "hostPort", "2379"}},
		{"a privileged init container", podSpec(`{"initContainers":[{"name":"shell","image":"busybox","securityContext":{"privileged":true}}]}`),
			[]string{`container "shell"`, "securityContext.privileged=true"}},
		{"a projected token", podSpec(`{"volumes":[{"name":"tok","projected":{"sources":[{"serviceAccountToken":{"path":"token"}}]}}]}`),
			[]string{"spec.template.spec.volumes", `"tok"`, "serviceAccountToken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render.Desired(r, patched(tc.patch), values.DefaultOperator(), memory.Memory{})
			if err == nil {
				t.Fatalf("the patch %s was rendered; want it refused", tc.patch)
			}
			var pe *podsecurity.Error
			if !errors.As(err, &pe) || pe.Level != podsecurity.Restricted {
				t.Fatalf("refused with %T %v; want a *podsecurity.Error at restricted", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
		})
	}
}

// TestEveryFixtureRendersRestrictedPods: the embedded chart's renders of every fixture
// (the defaults, TLS, a platform's security settings, sidecars, volumes) pass the check at
// the default level, and so do benign patches.
func TestEveryFixtureRendersRestrictedPods(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	fixtures := testutil.Fixtures(t, filepath.Join(testutil.RepoRoot(t), "charts", "testdata", "fixtures"))
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			if _, err := render.Desired(r, f.Cluster, values.DefaultOperator(), memory.Of(f.Cluster)); err != nil {
				t.Fatal(err)
			}
		})
	}
	benign := patched(`{"spec":{"template":{"metadata":{"annotations":{"mesh.example.com/inject":"false"}}}}}`,
		podSpec(`{"automountServiceAccountToken":false,"securityContext":{"runAsUser":1000680000}}`))
	if _, err := render.Desired(r, benign, values.DefaultOperator(), memory.Of(benign)); err != nil {
		t.Fatal(err)
	}
}

// TestTheLevelComesFromTheOperator: the level is the operator's (values.Operator), never the
// spec's: baseline lets a root user through and still refuses privileged; privileged lets
// everything through.
func TestTheLevelComesFromTheOperator(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	root := patched(podSpec(`{"securityContext":{"runAsUser":0,"runAsNonRoot":false}}`))
	priv := patched(etcdContainer(`{"privileged":true}`))
	for _, tc := range []struct {
		level      podsecurity.Level
		root, priv bool // rendered
	}{{"", false, false}, {podsecurity.Restricted, false, false}, {podsecurity.Baseline, true, false}, {podsecurity.Privileged, true, true}} {
		op := values.DefaultOperator()
		op.PodSecurity = tc.level
		if _, err := render.Desired(r, root, op, memory.Of(root)); (err == nil) != tc.root {
			t.Errorf("level %q, runAsUser 0: %v", tc.level, err)
		}
		if _, err := render.Desired(r, priv, op, memory.Of(priv)); (err == nil) != tc.priv {
			t.Errorf("level %q, privileged: %v", tc.level, err)
		}
	}
}

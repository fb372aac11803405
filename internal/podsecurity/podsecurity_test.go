package podsecurity

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// restrictedPod is a pod spec that passes restricted, as YAML to indent under a template.
const restrictedPod = `
automountServiceAccountToken: false
serviceAccountName: etcd
securityContext:
  runAsNonRoot: true
  seccompProfile: {type: RuntimeDefault}
containers:
- name: etcd
  image: etcd
  securityContext:
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
`

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := sigsyaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return u
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimPrefix(s, "\n"), "\n") {
		if l != "" {
			b.WriteString(pad + l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// serviceAccount is the ServiceAccount a render creates for its pods.
const serviceAccount = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: etcd}\n"

// TestEveryPodBearingKindIsChecked: the pod spec is found in every kind a custom chart may
// render (and in a custom resource), wherever it sits, and a privileged container in any of
// them is refused with the object and the path of its pod spec.
func TestEveryPodBearingKindIsChecked(t *testing.T) {
	privileged := strings.Replace(restrictedPod, "    allowPrivilegeEscalation: false\n", "    allowPrivilegeEscalation: false\n    privileged: true\n", 1)
	for _, tc := range []struct {
		kind, head string
		indent     int
		path       string
	}{
		{"Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n", 2, "spec"},
		{"StatefulSet", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"Deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"DaemonSet", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"ReplicaSet", "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"ReplicationController", "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"PodTemplate", "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: x}\ntemplate:\n  spec:\n", 4, "template.spec"},
		{"Job", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"CronJob", "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: x}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n", 10, "spec.jobTemplate.spec.template.spec"},
		{"Rollout", "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n", 6, "spec.template.spec"},
		{"Workflow", "apiVersion: example.com/v1\nkind: Workflow\nmetadata: {name: x}\nspec:\n  steps:\n  - pod:\n", 6, "spec.steps[0].pod"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if err := Check([]*unstructured.Unstructured{obj(t, serviceAccount), obj(t, tc.head+indent(restrictedPod, tc.indent))}, Restricted); err != nil {
				t.Fatalf("a restricted %s is refused: %v", tc.kind, err)
			}
			err := Check([]*unstructured.Unstructured{obj(t, serviceAccount), obj(t, tc.head+indent(privileged, tc.indent))}, Restricted)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("a privileged %s: %v, want an *Error", tc.kind, err)
			}
			want := tc.kind + " x: " + tc.path + `: privileged (container "etcd" must not set securityContext.privileged=true)`
			if len(pe.Violations) != 1 || pe.Violations[0] != want {
				t.Fatalf("violations %q, want [%q]", pe.Violations, want)
			}
		})
	}
}

// TestFields: one row per field the check refuses, at each level; what a level allows passes.
func TestFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    string // restrictedPod with this replaced
		from   string
		level  Level
		refuse []string // substrings of the refusal; none: passes
	}{
		{name: "restricted passes", level: Restricted},
		{name: "zero level is restricted", from: "runAsNonRoot: true", pod: "runAsNonRoot: false", level: "",
			refuse: []string{"runAsNonRoot != true", "pod must not set securityContext.runAsNonRoot=false"}},
		{name: "runAsNonRoot unset", from: "  runAsNonRoot: true\n", pod: "", level: Restricted,
			refuse: []string{"runAsNonRoot != true", `container "etcd"`}},
		{name: "runAsUser 0", from: "runAsNonRoot: true", pod: "runAsNonRoot: true\n  runAsUser: 0", level: Restricted,
			refuse: []string{"runAsUser=0"}},
		{name: "runAsUser 0 is baseline", from: "runAsNonRoot: true", pod: "runAsUser: 0", level: Baseline},
		{name: "allowPrivilegeEscalation unset", from: "    allowPrivilegeEscalation: false\n", pod: "", level: Restricted,
			refuse: []string{"allowPrivilegeEscalation != false", `container "etcd" must set securityContext.allowPrivilegeEscalation=false`}},
		{name: "capabilities not dropping ALL", from: "drop: [ALL]", pod: "drop: [NET_RAW]", level: Restricted,
			refuse: []string{"unrestricted capabilities", `container "etcd"`, `"ALL"`}},
		{name: "NET_BIND_SERVICE added", from: "drop: [ALL]", pod: "drop: [ALL], add: [NET_BIND_SERVICE]", level: Restricted},
		{name: "SYS_ADMIN added", from: "drop: [ALL]", pod: "drop: [ALL], add: [SYS_ADMIN]", level: Restricted,
			refuse: []string{`container "etcd"`, "SYS_ADMIN"}},
		{name: "SYS_ADMIN added at baseline", from: "drop: [ALL]", pod: "drop: [ALL], add: [SYS_ADMIN]", level: Baseline,
			refuse: []string{"non-default capabilities", "SYS_ADMIN"}},
		{name: "privileged at baseline", from: "allowPrivilegeEscalation: false", pod: "privileged: true", level: Baseline,
			refuse: []string{"securityContext.privileged=true"}},
		{name: "privileged at privileged", from: "allowPrivilegeEscalation: false", pod: "privileged: true\n    runAsUser: 0", level: Privileged},
		{name: "seccomp unset", from: "  seccompProfile: {type: RuntimeDefault}\n", pod: "", level: Restricted,
			refuse: []string{"seccompProfile", `container "etcd" must set securityContext.seccompProfile.type`}},
		{name: "seccomp Localhost", from: "type: RuntimeDefault}", pod: "type: Localhost, localhostProfile: p.json}", level: Restricted},
		{name: "seccomp Unconfined", from: "type: RuntimeDefault}", pod: "type: Unconfined}", level: Restricted,
			refuse: []string{"seccompProfile", "Unconfined"}},
		{name: "hostNetwork", from: "containers:", pod: "hostNetwork: true\ncontainers:", level: Baseline,
			refuse: []string{"host namespaces (hostNetwork=true)"}},
		{name: "hostPID and hostIPC", from: "containers:", pod: "hostPID: true\nhostIPC: true\ncontainers:", level: Restricted,
			refuse: []string{"hostPID=true", "hostIPC=true"}},
		{name: "hostPath", from: "containers:", pod: "volumes: [{name: root, hostPath: {path: /}}]\ncontainers:", level: Baseline,
			refuse: []string{"hostPath volumes", `volume "root"`}},
		{name: "nfs volume", from: "containers:", pod: "volumes: [{name: share, nfs: {server: s, path: /}}]\ncontainers:", level: Restricted,
			refuse: []string{"restricted volume types", `volume "share"`, "nfs"}},
		{name: "nfs volume at baseline", from: "containers:", pod: "volumes: [{name: share, nfs: {server: s, path: /}}]\ncontainers:", level: Baseline},
		{name: "allowed volumes", from: "containers:", pod: "volumes: [{name: a, emptyDir: {}}, {name: b, secret: {secretName: s}}, {name: c, configMap: {name: c}}, {name: d, persistentVolumeClaim: {claimName: d}}, {name: e, projected: {sources: [{configMap: {name: c}}]}}]\ncontainers:", level: Restricted},
		{name: "hostPort", from: "  image: etcd\n", pod: "  image: etcd\n  ports: [{containerPort: 2379, hostPort: 2379}]\n", level: Baseline,
			refuse: []string{"hostPort", `container "etcd"`, "2379"}},
		{name: "procMount Unmasked", from: "allowPrivilegeEscalation: false", pod: "allowPrivilegeEscalation: false\n    procMount: Unmasked", level: Baseline,
			refuse: []string{"procMount", `container "etcd"`}},
		{name: "unsafe sysctl", from: "runAsNonRoot: true", pod: "runAsNonRoot: true\n  sysctls: [{name: kernel.msgmax, value: '1'}]", level: Baseline,
			refuse: []string{"forbidden sysctls", "kernel.msgmax"}},
		{name: "SELinux type spc_t", from: "runAsNonRoot: true", pod: "runAsNonRoot: true\n  seLinuxOptions: {type: spc_t}", level: Baseline,
			refuse: []string{"seLinuxOptions", "spc_t"}},
		{name: "AppArmor unconfined", from: "allowPrivilegeEscalation: false", pod: "allowPrivilegeEscalation: false\n    appArmorProfile: {type: Unconfined}", level: Baseline,
			refuse: []string{"AppArmor", `container "etcd"`}},
		{name: "an init container", from: "containers:", pod: "initContainers: [{name: shell, image: busybox, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, privileged: true}}]\ncontainers:", level: Restricted,
			refuse: []string{`container "shell" must not set securityContext.privileged=true`}},
		{name: "an ephemeral container", from: "containers:", pod: "ephemeralContainers: [{name: debug, image: busybox}]\ncontainers:", level: Restricted,
			refuse: []string{`container "debug"`, "allowPrivilegeEscalation"}},
		{name: "token automounted", from: "automountServiceAccountToken: false", pod: "automountServiceAccountToken: true", level: Baseline,
			refuse: []string{"spec.automountServiceAccountToken must be false"}},
		{name: "token automount unset", from: "automountServiceAccountToken: false\n", pod: "", level: Restricted,
			refuse: []string{"spec.automountServiceAccountToken must be false"}},
		{name: "token automounted at privileged", from: "automountServiceAccountToken: false", pod: "automountServiceAccountToken: true", level: Privileged},
		{name: "another service account", from: "serviceAccountName: etcd", pod: "serviceAccountName: ci-deployer", level: Baseline,
			refuse: []string{`spec.serviceAccountName "ci-deployer" is neither a ServiceAccount of this render (it creates etcd) nor default`}},
		{name: "the deprecated field", from: "serviceAccountName: etcd", pod: "serviceAccount: ci-deployer", level: Restricted,
			refuse: []string{`spec.serviceAccount "ci-deployer"`}},
		{name: "the default service account", from: "serviceAccountName: etcd", pod: "serviceAccountName: default", level: Restricted},
		{name: "no service account named", from: "serviceAccountName: etcd\n", pod: "", level: Restricted},
		{name: "a projected API token", from: "containers:", pod: "volumes: [{name: tok, projected: {sources: [{serviceAccountToken: {path: t}}]}}]\ncontainers:", level: Restricted,
			refuse: []string{`spec.volumes[0] "tok": sources[0].serviceAccountToken needs an audience`}},
		{name: "a projected token for another service", from: "containers:", pod: "volumes: [{name: tok, projected: {sources: [{serviceAccountToken: {path: t, audience: log-store}}]}}]\ncontainers:", level: Restricted},
		{name: "a projected token of the default account", from: "serviceAccountName: etcd\n", pod: "volumes: [{name: tok, projected: {sources: [{serviceAccountToken: {path: t, audience: vault}}]}}]\n", level: Restricted,
			refuse: []string{`sources[0].serviceAccountToken is a token of ServiceAccount default`}},
		{name: "not a pod spec", from: "automountServiceAccountToken: false", pod: "automountServiceAccountToken: {yes: please}", level: Restricted,
			refuse: []string{"Pod x: spec cannot be read as a pod spec"}},
		{name: "not a pod spec at privileged", from: "automountServiceAccountToken: false", pod: "automountServiceAccountToken: {yes: please}", level: Privileged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := restrictedPod
			if tc.from != "" {
				if !strings.Contains(spec, tc.from) {
					t.Fatalf("%q is not in the pod", tc.from)
				}
				spec = strings.Replace(spec, tc.from, tc.pod, 1)
			}
			pod := obj(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n"+indent(spec, 2))
			err := Check([]*unstructured.Unstructured{obj(t, serviceAccount), pod}, tc.level)
			if len(tc.refuse) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("passed (%v); want refused", err)
			}
			if pe.Level != tc.level.OrRestricted() {
				t.Errorf("level %q, want %q", pe.Level, tc.level.OrRestricted())
			}
			for _, w := range tc.refuse {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
		})
	}
}

// TestARenderWithoutItsServiceAccount: a ServiceAccount counts only when the render holds it
// (of the core group): a pod of a render without one may use only the default account.
func TestARenderWithoutItsServiceAccount(t *testing.T) {
	pod := obj(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n"+indent(restrictedPod, 2))
	fake := obj(t, "apiVersion: example.com/v1\nkind: ServiceAccount\nmetadata: {name: etcd}\n")
	for _, objs := range [][]*unstructured.Unstructured{{pod}, {fake, pod}} {
		if err := Check(objs, Restricted); err == nil || !strings.Contains(err.Error(), `serviceAccountName "etcd" is neither a ServiceAccount of this render (it creates none) nor default`) {
			t.Fatalf("a pod of ServiceAccount etcd that the render does not create: %v", err)
		}
	}
}

// TestCheckPod: the operator's own pods run as the namespace's default account without a
// token; anything else is refused like a render's pods.
func TestCheckPod(t *testing.T) {
	pod := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
	}
	p := pod()
	p.Name = "backup-1"
	if err := CheckPod(p, Restricted); err != nil {
		t.Fatal(err)
	}
	p.Spec.ServiceAccountName = "etcd"
	p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
	err := CheckPod(p, "")
	for _, w := range []string{`Pod backup-1: spec: privileged (container "agent"`, `Pod backup-1: spec.serviceAccountName "etcd"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in %v", w, err)
		}
	}
	if err := CheckPod(p, Privileged); err != nil {
		t.Fatal(err)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]Level{"": Restricted, "restricted": Restricted, "baseline": Baseline, "privileged": Privileged} {
		if got, err := ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Restricted", "none", "latest"} {
		if _, err := ParseLevel(in); err == nil {
			t.Errorf("ParseLevel(%q) passed", in)
		}
	}
}

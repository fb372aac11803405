package charts_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// podMonitor is the part of the Prometheus Operator's PodMonitor (monitoring.coreos.com/v1)
// that the chart renders, with the CRD's field names: converting a render into it with unknown
// fields refused catches a misspelled field. The operator's module does not depend on the
// Prometheus Operator's types.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port              string          `json:"port,omitempty"`
			Path              string          `json:"path,omitempty"`
			Scheme            string          `json:"scheme,omitempty"`
			Interval          string          `json:"interval,omitempty"`
			ScrapeTimeout     string          `json:"scrapeTimeout,omitempty"`
			Relabelings       []relabelConfig `json:"relabelings,omitempty"`
			MetricRelabelings []relabelConfig `json:"metricRelabelings,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

func podMonitorEnabled(v map[string]any) bool {
	m, _ := v["monitoring"].(map[string]any)
	pm, _ := m["podMonitor"].(map[string]any)
	return pm["enabled"] == true
}

// chartAloneValues reads every values file of chartAloneDir by name.
func chartAloneValues(tb testing.TB) map[string]map[string]any {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(chartAloneDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no values files in %s: %v", chartAloneDir, err)
	}
	out := map[string]map[string]any{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		v := map[string]any{}
		if err := yaml.Unmarshal(data, &v); err != nil {
			tb.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".yaml")] = v
	}
	return out
}

// restrictedViolations returns what the restricted Pod Security profile refuses in a pod: a
// copy of its checks (k8s.io/pod-security-admission is not a dependency), as documented for
// Kubernetes 1.33.
func restrictedViolations(spec corev1.PodSpec) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		bad("host namespaces")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	podNonRoot := psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	if psc.RunAsNonRoot != nil && !*psc.RunAsNonRoot {
		bad("pod runAsNonRoot false")
	}
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		bad("pod runAsUser 0")
	}
	seccompOK := func(p *corev1.SeccompProfile) bool {
		return p.Type == corev1.SeccompProfileTypeRuntimeDefault || p.Type == corev1.SeccompProfileTypeLocalhost
	}
	podSeccomp := psc.SeccompProfile != nil && seccompOK(psc.SeccompProfile)
	if psc.SeccompProfile != nil && !podSeccomp {
		bad("pod seccompProfile %s", psc.SeccompProfile.Type)
	}
	seLinux := func(who string, o *corev1.SELinuxOptions) {
		if o == nil {
			return
		}
		if !slices.Contains([]string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}, o.Type) || o.User != "" || o.Role != "" {
			bad("%s seLinuxOptions %+v", who, *o)
		}
	}
	seLinux("pod", psc.SELinuxOptions)
	safeSysctls := []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
		"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
	for _, s := range psc.Sysctls {
		if !slices.Contains(safeSysctls, s.Name) {
			bad("sysctl %s", s.Name)
		}
	}
	for _, v := range spec.Volumes {
		s := v.VolumeSource
		if s.ConfigMap == nil && s.CSI == nil && s.DownwardAPI == nil && s.EmptyDir == nil && s.Ephemeral == nil &&
			s.PersistentVolumeClaim == nil && s.Projected == nil && s.Secret == nil {
			bad("volume %s of a type restricted forbids", v.Name)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad("container %s privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("container %s allowPrivilegeEscalation not false", c.Name)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsNonRoot == nil && !podNonRoot {
			bad("container %s not runAsNonRoot", c.Name)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			bad("container %s runAsUser 0", c.Name)
		}
		if sc.SeccompProfile != nil && !seccompOK(sc.SeccompProfile) || sc.SeccompProfile == nil && !podSeccomp {
			bad("container %s seccompProfile", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			bad("container %s does not drop ALL capabilities", c.Name)
		} else if slices.ContainsFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c != "NET_BIND_SERVICE" }) {
			bad("container %s adds capabilities %v", c.Name, sc.Capabilities.Add)
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			bad("container %s procMount %s", c.Name, *sc.ProcMount)
		}
		if p := sc.AppArmorProfile; p != nil && p.Type != corev1.AppArmorProfileTypeRuntimeDefault && p.Type != corev1.AppArmorProfileTypeLocalhost {
			bad("container %s appArmorProfile %s", c.Name, p.Type)
		}
		seLinux("container "+c.Name, sc.SELinuxOptions)
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				bad("container %s hostPort %d", c.Name, p.HostPort)
			}
		}
	}
	return out
}

// TestRendersMeetRestrictedPodSecurity: every fixture and every chart-alone values file,
// customizations included, renders pods that the restricted Pod Security profile admits.
func TestRendersMeetRestrictedPodSecurity(t *testing.T) {
	r := newRenderer(t)
	check := func(name string, objs []*unstructured.Unstructured, sts string) {
		if v := restrictedViolations(statefulSet(t, objs, sts).Spec.Template.Spec); len(v) > 0 {
			t.Errorf("%s: the member pods break the restricted Pod Security profile: %s", name, strings.Join(v, "; "))
		}
	}
	for _, f := range loadFixtures(t) {
		check(f.name, render(t, r, f.release(), f.values), f.cluster.Name)
	}
	for name, v := range chartAloneValues(t) {
		check("alone/"+name, render(t, r, chartAloneRelease, v), chartAloneRelease.Name)
	}
	// The check itself finds what the schema refuses, when the schema is out of the way.
	spec := statefulSet(t, render(t, r, fixtureNamed(t, "minimal").release(), fixtureNamed(t, "minimal").values), "minimal").Spec.Template.Spec
	yes := true
	spec.Containers[0].SecurityContext.Privileged = &yes
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
	if v := restrictedViolations(spec); len(v) != 2 {
		t.Errorf("restrictedViolations of a privileged container and a hostPath volume = %v", v)
	}
}

// TestSchemaRefusesWhatRestrictedForbids: values that would take the member pods out of the
// restricted Pod Security profile, or let extraEnv replace variables the chart and the
// operator own, are refused by values.schema.json with an error that names the key (the
// message the Degraded condition shows).
func TestSchemaRefusesWhatRestrictedForbids(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	container := func(sc map[string]any) map[string]any { return map[string]any{"containerSecurityContext": sc} }
	tests := []struct {
		name string
		over map[string]any
		want []string // each in the error
	}{
		{"privileged", container(map[string]any{"privileged": true}),
			[]string{"/containerSecurityContext/privileged", "value must be false"}},
		{"allowPrivilegeEscalation", container(map[string]any{"allowPrivilegeEscalation": true}),
			[]string{"/containerSecurityContext/allowPrivilegeEscalation", "value must be false"}},
		{"container runAsNonRoot false", container(map[string]any{"runAsNonRoot": false}),
			[]string{"/containerSecurityContext/runAsNonRoot", "value must be true"}},
		{"container runAsUser 0", container(map[string]any{"runAsUser": 0}),
			[]string{"/containerSecurityContext/runAsUser", "minimum"}},
		{"capabilities.add SYS_ADMIN", container(map[string]any{"capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE", "SYS_ADMIN"}}}),
			[]string{"/containerSecurityContext/capabilities/add/1", "NET_BIND_SERVICE"}},
		{"capabilities.drop without ALL", container(map[string]any{"capabilities": map[string]any{"drop": []any{"NET_RAW"}}}),
			[]string{"/containerSecurityContext/capabilities/drop", "ALL"}},
		{"container seccomp Unconfined", container(map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}),
			[]string{"/containerSecurityContext/seccompProfile/type", "RuntimeDefault"}},
		{"procMount Unmasked", container(map[string]any{"procMount": "Unmasked"}),
			[]string{"/containerSecurityContext/procMount"}},
		{"container SELinux type", container(map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}}),
			[]string{"/containerSecurityContext/seLinuxOptions/type"}},
		{"container SELinux user", container(map[string]any{"seLinuxOptions": map[string]any{"user": "system_u"}}),
			[]string{"/containerSecurityContext/seLinuxOptions/user"}},
		{"pod runAsNonRoot false", map[string]any{"podSecurityContext": map[string]any{"runAsNonRoot": false}},
			[]string{"/podSecurityContext/runAsNonRoot", "value must be true"}},
		{"pod runAsUser 0", map[string]any{"podSecurityContext": map[string]any{"runAsUser": 0}},
			[]string{"/podSecurityContext/runAsUser", "minimum"}},
		{"pod seccomp Unconfined", map[string]any{"podSecurityContext": map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}},
			[]string{"/podSecurityContext/seccompProfile/type", "RuntimeDefault"}},
		{"pod sysctls", map[string]any{"podSecurityContext": map[string]any{"sysctls": []any{map[string]any{"name": "kernel.msgmax", "value": "1"}}}},
			[]string{"/podSecurityContext", "sysctls"}},
		{"hostPath volume", map[string]any{"extraVolumes": []any{map[string]any{"name": "host", "hostPath": map[string]any{"path": "/"}}}},
			[]string{"/extraVolumes/0/hostPath", "restricted Pod Security profile forbids hostPath volumes"}},
		{"nfs volume", map[string]any{"extraVolumes": []any{map[string]any{"name": "share", "nfs": map[string]any{"server": "nas", "path": "/"}}}},
			[]string{"/extraVolumes/0", "nfs"}},
		{"volume named data", map[string]any{"extraVolumes": []any{map[string]any{"name": "data", "emptyDir": map[string]any{}}}},
			[]string{"/extraVolumes/0/name", "data, peer-tls, client-tls and client-crl"}},
		{"mount over the data", map[string]any{"extraVolumeMounts": []any{map[string]any{"name": "x", "mountPath": "/var/lib/etcd/data"}}},
			[]string{"/extraVolumeMounts/0/mountPath", "outside /var/lib/etcd"}},
		{"mount over the certificates", map[string]any{"extraVolumeMounts": []any{map[string]any{"name": "x", "mountPath": "/etc/etcd/tls"}}},
			[]string{"/extraVolumeMounts/0/mountPath", "/etc/etcd/tls"}},
		{"ETCD_ env", map[string]any{"extraEnv": []any{map[string]any{"name": "ETCD_FORCE_NEW_CLUSTER", "value": "true"}}},
			[]string{"/extraEnv/0/name", "does not start with ETCD_", "etcd reads ETCD_* variables as flags"}},
		{"ETCD_INITIAL_CLUSTER env", map[string]any{"extraEnv": []any{map[string]any{"name": "ETCD_INITIAL_CLUSTER", "value": "x=http://x:2380"}}},
			[]string{"/extraEnv/0/name", "does not start with ETCD_"}},
		{"POD_IP env", map[string]any{"extraEnv": []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "POD_IP", "value": "127.0.0.1"}}},
			[]string{"/extraEnv/1/name", "POD_NAME, POD_NAMESPACE and POD_IP"}},
		{"ETCD_ envFrom prefix", map[string]any{"extraEnvFrom": []any{map[string]any{"prefix": "ETCD_", "configMapRef": map[string]any{"name": "flags"}}}},
			[]string{"/extraEnvFrom/0/prefix", "does not start with ETCD_"}},
		{"sidecar privileged", map[string]any{"extraContainers": []any{map[string]any{"name": "proxy", "securityContext": map[string]any{"privileged": true}}}},
			[]string{"/extraContainers/0/securityContext/privileged", "value must be false"}},
		{"sidecar named etcd", map[string]any{"extraContainers": []any{map[string]any{"name": "etcd"}}},
			[]string{"/extraContainers/0/name", "other than etcd"}},
		{"init container as root", map[string]any{"extraInitContainers": []any{map[string]any{"name": "init", "securityContext": map[string]any{"runAsUser": 0}}}},
			[]string{"/extraInitContainers/0/securityContext/runAsUser", "minimum"}},
		{"init container NET_ADMIN", map[string]any{"extraInitContainers": []any{map[string]any{"name": "init", "securityContext": map[string]any{"capabilities": map[string]any{"add": []any{"NET_ADMIN"}}}}}},
			[]string{"/extraInitContainers/0/securityContext/capabilities/add/0", "NET_BIND_SERVICE"}},
		{"hostNetwork", map[string]any{"hostNetwork": true}, []string{"hostNetwork"}},
		{"hostPID", map[string]any{"hostPID": true}, []string{"hostPID"}},
		{"pod monitor interval", map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"interval": "30 seconds"}}},
			[]string{"/monitoring/podMonitor/interval"}},
		{"pod monitor relabel action", map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"relabelings": []any{map[string]any{"action": "rename"}}}}},
			[]string{"/monitoring/podMonitor/relabelings/0/action"}},
		{"pull secret without a name", map[string]any{"imagePullSecrets": []any{map[string]any{"secret": "x"}}},
			[]string{"/imagePullSecrets/0"}},
		{"global label not a string", map[string]any{"global": map[string]any{"commonLabels": map[string]any{"tier": 1}}},
			[]string{"/global/commonLabels/tier"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Render(f.release(), values.Merge(f.values, tt.over))
			if err == nil {
				t.Fatalf("Render accepted %v", tt.over)
			}
			for _, want := range append([]string{"schema"}, tt.want...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	// What restricted allows passes.
	ok := map[string]any{
		"containerSecurityContext": map[string]any{"privileged": false, "allowPrivilegeEscalation": false, "runAsNonRoot": true,
			"runAsUser": 1000, "readOnlyRootFilesystem": false, "capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE"}, "drop": []any{"ALL"}},
			"seLinuxOptions": map[string]any{"type": "container_t", "level": "s0:c1,c2"}, "appArmorProfile": map[string]any{"type": "RuntimeDefault"}},
		"podSecurityContext": map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "Localhost", "localhostProfile": "etcd.json"}},
		"extraEnv":           []any{map[string]any{"name": "XETCD_", "value": "1"}, map[string]any{"name": "POD_IPS", "value": "1"}},
		"extraEnvFrom":       []any{map[string]any{"prefix": "APP_ETCD_", "secretRef": map[string]any{"name": "s"}}},
		"extraVolumeMounts":  []any{map[string]any{"name": "x", "mountPath": "/var/lib/etcd-extra"}, map[string]any{"name": "x", "mountPath": "/etc/etcd/tls-extra"}},
		"extraVolumes":       []any{map[string]any{"name": "x", "emptyDir": map[string]any{}}},
		"global":             map[string]any{"anything": map[string]any{"a parent chart": "shares"}},
	}
	if _, err := r.Render(f.release(), values.Merge(f.values, ok)); err != nil {
		t.Errorf("Render refused values within the restricted profile: %v", err)
	}
}

// TestContainerSecurityContextMerges: containerSecurityContext changes only the keys it sets
// (and within capabilities, only add), podSecurityContext keeps runAsNonRoot and seccomp.
func TestContainerSecurityContextMerges(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	v := values.Merge(f.values, map[string]any{
		"containerSecurityContext": map[string]any{"readOnlyRootFilesystem": false, "capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE"}}},
		"podSecurityContext":       map[string]any{"supplementalGroups": []any{5555}, "runAsUser": 1000680000},
	})
	pod := statefulSet(t, render(t, r, f.release(), v), f.cluster.Name).Spec.Template.Spec
	sc := pod.Containers[0].SecurityContext
	if *sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext = %+v", sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) {
		t.Errorf("capabilities = %+v, want drop ALL kept and NET_BIND_SERVICE added", sc.Capabilities)
	}
	psc := pod.SecurityContext
	// A large UID renders as an integer, not in exponent notation.
	if *psc.RunAsUser != 1000680000 || *psc.RunAsGroup != 65532 || !*psc.RunAsNonRoot || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || !slices.Equal(psc.SupplementalGroups, []int64{5555}) {
		t.Errorf("pod securityContext = %+v", psc)
	}
}

// TestExtraEnvKeepsTheChartsOwn: the chart's POD_* variables come first (extraEnv may use
// them) and the operator's membership ConfigMap last among envFrom (a later source wins a
// repeated key, so no extraEnvFrom source replaces ETCD_INITIAL_CLUSTER).
func TestExtraEnvKeepsTheChartsOwn(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "custom-env")
	c := statefulSet(t, render(t, r, f.release(), f.values), f.cluster.Name).Spec.Template.Spec.Containers[0]
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if want := []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "GOMAXPROCS", "GOMEMLIMIT", "OTEL_RESOURCE_ATTRIBUTES"}; !slices.Equal(names, want) {
		t.Errorf("env = %v, want %v", names, want)
	}
	if n := len(c.EnvFrom); n != 3 || c.EnvFrom[n-1].ConfigMapRef == nil || c.EnvFrom[n-1].ConfigMapRef.Name != values.MembershipConfigMapName(f.cluster.Name) {
		t.Errorf("envFrom = %+v, want the membership ConfigMap last", c.EnvFrom)
	}
	// The chart alone has no membership ConfigMap: extraEnvFrom only.
	alone := values.Merge(f.values, map[string]any{"operator": map[string]any{"membershipConfigMap": ""}})
	c = statefulSet(t, render(t, r, f.release(), alone), f.cluster.Name).Spec.Template.Spec.Containers[0]
	if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "platform-proxy" {
		t.Errorf("envFrom without the operator = %+v", c.EnvFrom)
	}
}

// TestCommonMetadataNeverChangesTheSelector: commonLabels, global.commonLabels and podLabels
// cannot replace the selector labels nor managed-by (the StatefulSet's selector is immutable,
// and the operator prunes by managed-by); neither they nor the annotations reach the volume
// claim templates (immutable too), and commonAnnotations stay off the pod template.
func TestCommonMetadataNeverChangesTheSelector(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	hijack := map[string]any{"app.kubernetes.io/name": "other", "app.kubernetes.io/instance": "other", "app.kubernetes.io/managed-by": "other", "team": "storage"}
	v := values.Merge(f.values, map[string]any{
		"commonLabels":      hijack,
		"podLabels":         hijack,
		"global":            map[string]any{"commonLabels": hijack, "commonAnnotations": map[string]any{"a": "global", "b": "global"}},
		"commonAnnotations": map[string]any{"b": "chart"},
		"service":           map[string]any{"annotations": map[string]any{"c": "service"}},
	})
	objs := render(t, r, f.release(), v)
	want := map[string]string{"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": f.cluster.Name, "app.kubernetes.io/managed-by": v1alpha1.ManagedByValue}
	for _, o := range objs {
		l := o.GetLabels()
		for k, val := range want {
			if l[k] != val {
				t.Errorf("%s %s: label %s = %q, want %q", o.GetKind(), o.GetName(), k, l[k], val)
			}
		}
		if l["team"] != "storage" {
			t.Errorf("%s %s: no commonLabels: %v", o.GetKind(), o.GetName(), l)
		}
		a := o.GetAnnotations()
		if a["a"] != "global" || a["b"] != "chart" {
			t.Errorf("%s %s: annotations %v, want global.commonAnnotations under commonAnnotations", o.GetKind(), o.GetName(), a)
		}
		if (a["c"] == "service") != (o.GetName() == f.cluster.Name+"-client") {
			t.Errorf("%s %s: annotations %v: service.annotations belong to the client Service", o.GetKind(), o.GetName(), a)
		}
	}
	s := statefulSet(t, objs, f.cluster.Name)
	if got := s.Spec.Selector.MatchLabels; len(got) != 2 || got["app.kubernetes.io/name"] != "etcd" || got["app.kubernetes.io/instance"] != f.cluster.Name {
		t.Errorf("selector = %v", got)
	}
	pl := s.Spec.Template.Labels
	if pl["app.kubernetes.io/name"] != "etcd" || pl["app.kubernetes.io/instance"] != f.cluster.Name || pl["team"] != "storage" {
		t.Errorf("pod labels = %v", pl)
	}
	if _, ok := s.Spec.Template.Annotations["a"]; ok {
		t.Errorf("commonAnnotations on the pod template: %v", s.Spec.Template.Annotations)
	}
	for _, ct := range s.Spec.VolumeClaimTemplates {
		if ct.Labels["team"] != "" || len(ct.Annotations) > 0 {
			t.Errorf("claim template %s carries common metadata: %v %v", ct.Name, ct.Labels, ct.Annotations)
		}
	}
}

// TestImagePullSecretsAndRegistry: global.imagePullSecrets and imagePullSecrets, as names or
// {name: NAME}, become one list without repeats; global.imageRegistry replaces the registry
// host of image.repository or prefixes a repository without one.
func TestImagePullSecretsAndRegistry(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "minimal")
	pod := func(over map[string]any) corev1.PodSpec {
		t.Helper()
		return statefulSet(t, render(t, r, f.release(), values.Merge(f.values, over)), f.cluster.Name).Spec.Template.Spec
	}
	got := pod(map[string]any{
		"global":           map[string]any{"imagePullSecrets": []any{"a", map[string]any{"name": "b"}}},
		"imagePullSecrets": []any{map[string]any{"name": "b"}, "c"},
	}).ImagePullSecrets
	if want := []corev1.LocalObjectReference{{Name: "a"}, {Name: "b"}, {Name: "c"}}; !slices.Equal(got, want) {
		t.Errorf("imagePullSecrets = %v, want %v", got, want)
	}
	if got := pod(nil).ImagePullSecrets; got != nil {
		t.Errorf("imagePullSecrets without any = %v", got)
	}
	for repo, want := range map[string]string{
		"registry.internal/etcd-development/etcd": "mirror.example.com/etcd-development/etcd",
		"localhost:5000/etcd":                     "mirror.example.com/etcd",
		"localhost/etcd":                          "mirror.example.com/etcd",
		"etcd-development/etcd":                   "mirror.example.com/etcd-development/etcd",
		"etcd":                                    "mirror.example.com/etcd",
	} {
		c := pod(map[string]any{"image": map[string]any{"repository": repo}, "global": map[string]any{"imageRegistry": "mirror.example.com/"}}).Containers[0]
		if c.Image != want+":v"+v1alpha1.DefaultVersion {
			t.Errorf("repository %s with global.imageRegistry: image %s, want %s", repo, c.Image, want)
		}
	}
	if c := pod(map[string]any{"image": map[string]any{"repository": "registry.internal/etcd"}}).Containers[0]; c.Image != "registry.internal/etcd:v"+v1alpha1.DefaultVersion {
		t.Errorf("without global.imageRegistry: image %s", c.Image)
	}
}

// TestPodMonitor: no PodMonitor unless monitoring.podMonitor.enabled; when enabled, it selects
// exactly the member pods and scrapes their metrics port over plain HTTP, which the etcd
// container serves, whatever tls says, with the cluster's name as a label.
func TestPodMonitor(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		if podMonitorEnabled(f.values) {
			continue
		}
		for _, o := range render(t, r, f.release(), f.values) {
			if o.GetKind() == "PodMonitor" {
				t.Errorf("%s: a PodMonitor without monitoring.podMonitor.enabled", f.name)
			}
		}
	}
	on := map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"enabled": true}}}
	for _, f := range []fixture{fixtureNamed(t, "pod-monitor"), fixtureNamed(t, "tls"), fixtureNamed(t, "network-policy")} {
		t.Run(f.name, func(t *testing.T) {
			objs := render(t, r, f.release(), values.Merge(f.values, on))
			pm := &podMonitor{}
			toTyped(t, find(t, objs, "PodMonitor", f.cluster.Name), pm)
			s := statefulSet(t, objs, f.cluster.Name)
			if !maps.Equal(pm.Spec.Selector.MatchLabels, s.Spec.Selector.MatchLabels) || len(pm.Spec.Selector.MatchExpressions) > 0 {
				t.Errorf("selector %v, want the StatefulSet's %v", pm.Spec.Selector, s.Spec.Selector.MatchLabels)
			}
			if len(pm.Spec.PodMetricsEndpoints) != 1 {
				t.Fatalf("endpoints = %+v", pm.Spec.PodMetricsEndpoints)
			}
			ep := pm.Spec.PodMetricsEndpoints[0]
			if ep.Port != "metrics" || ep.Path != "/metrics" || ep.Scheme != "http" {
				t.Errorf("endpoint %s %s %s, want http /metrics on the port named metrics", ep.Scheme, ep.Port, ep.Path)
			}
			c := s.Spec.Template.Spec.Containers[0]
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
				t.Errorf("the etcd container has no port named metrics: %+v", c.Ports)
			}
			if l := argValue(s, "--listen-metrics-urls="); !strings.HasPrefix(l, "http://") {
				t.Errorf("--listen-metrics-urls=%s, want plain HTTP", l)
			}
			if len(ep.Relabelings) == 0 || ep.Relabelings[0].TargetLabel != "etcd_cluster" || ep.Relabelings[0].Replacement == nil || *ep.Relabelings[0].Replacement != f.cluster.Name {
				t.Errorf("relabelings %+v, want etcd_cluster=%s first", ep.Relabelings, f.cluster.Name)
			}
			if l := pm.GetLabels(); l[v1alpha1.LabelCluster] != f.cluster.Name || l["app.kubernetes.io/managed-by"] != v1alpha1.ManagedByValue {
				t.Errorf("PodMonitor labels %v lack the inventory labels", l)
			}
		})
	}
	f := fixtureNamed(t, "pod-monitor")
	pm := &podMonitor{}
	toTyped(t, find(t, render(t, r, f.release(), f.values), "PodMonitor", f.cluster.Name), pm)
	ep := pm.Spec.PodMetricsEndpoints[0]
	if pm.GetLabels()["release"] != "kube-prometheus-stack" || ep.Interval != "30s" || ep.ScrapeTimeout != "10s" || len(ep.Relabelings) != 2 || len(ep.MetricRelabelings) != 1 {
		t.Errorf("the fixture's labels, interval, timeout or relabelings are missing: %+v %+v", pm.GetLabels(), ep)
	}
	// clusterLabel "" adds no relabeling.
	v := values.Merge(f.values, map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"clusterLabel": "", "relabelings": nil}}})
	toTyped(t, find(t, render(t, r, f.release(), v), "PodMonitor", f.cluster.Name), pm)
	if rl := pm.Spec.PodMetricsEndpoints[0].Relabelings; len(rl) != 0 {
		t.Errorf("relabelings with clusterLabel empty: %+v", rl)
	}
}

// TestSubchart: the chart as a dependency of a parent chart that sets global values and the
// chart's own under its name: the schema (additionalProperties false) accepts global, and the
// global values reach the render.
func TestSubchart(t *testing.T) {
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "Chart.yaml"), []byte("apiVersion: v2\nname: platform\nversion: 1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "values.yaml"), []byte(subchartParentValues), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(parent, "charts", charts.ChartDir), os.DirFS(charts.ChartDir)); err != nil {
		t.Fatal(err)
	}
	r, err := charts.FromDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, r, chartAloneRelease, nil)
	s := statefulSet(t, objs, chartAloneRelease.Name)
	pod := s.Spec.Template.Spec
	if want := []corev1.LocalObjectReference{{Name: "mirror-pull"}, {Name: "etcd-pull"}}; !slices.Equal(pod.ImagePullSecrets, want) {
		t.Errorf("imagePullSecrets = %v, want %v", pod.ImagePullSecrets, want)
	}
	if !strings.HasPrefix(pod.Containers[0].Image, "mirror.example.com/etcd-development/etcd:") {
		t.Errorf("image %s, want from global.imageRegistry", pod.Containers[0].Image)
	}
	if s.Labels["team"] != "storage" || s.Annotations["owner"] != "platform@example.com" || s.Spec.Replicas == nil || *s.Spec.Replicas != 5 {
		t.Errorf("the parent's values did not reach the StatefulSet: labels %v annotations %v replicas %v", s.Labels, s.Annotations, s.Spec.Replicas)
	}
}

// subchartParentValues are the values.yaml of the parent chart in TestSubchart (test/helmparity
// renders the same parent with the Helm CLI).
const subchartParentValues = `global:
  imageRegistry: mirror.example.com
  imagePullSecrets: [mirror-pull]
  commonLabels:
    team: storage
  commonAnnotations:
    owner: platform@example.com
  somethingElse: {for: another subchart}
etcd-cluster:
  replicas: 5
  imagePullSecrets:
    - name: etcd-pull
`

// TestFixturesKeepTheChartContract: every fixture's render, customizations included, keeps
// what the operator relies on (internal/chartcontract, checked before every apply).
func TestFixturesKeepTheChartContract(t *testing.T) {
	r := newRenderer(t)
	for _, f := range loadFixtures(t) {
		c := f.cluster
		err := chartcontract.Check(render(t, r, f.release(), f.values), chartcontract.Contract{
			Name: c.Name, Namespace: c.Namespace,
			SelectorLabels:      map[string]string{"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": c.Name},
			MembershipConfigMap: values.MembershipConfigMapName(c.Name),
			Ephemeral:           c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral,
		})
		if err != nil {
			t.Errorf("%s: %v", f.name, err)
		}
	}
}

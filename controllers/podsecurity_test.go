package controllers_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// privilegedPatch makes the etcd container privileged and the pod use the host's network.
var privilegedPatch = v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, StrategicMerge: &runtime.RawExtension{Raw: []byte(
	`{"spec":{"template":{"spec":{"hostNetwork":true,"containers":[{"name":"etcd","securityContext":{"privileged":true}}]}}}}`)}}

// stalledWith waits for Degraded and Stalled to read want (Status/Reason) and returns
// Degraded's message.
func stalledWith(t *testing.T, ns, want string) string {
	t.Helper()
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, want)
	if got := condition(c, v1alpha1.ConditionStalled); got != want {
		t.Fatalf("Stalled is %s, want %s", got, want)
	}
	return meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message
}

// TestAPrivilegedPatchIsNeverApplied (issue 26, item 2): a tenant's patch that makes the
// members privileged on the host's network is refused with Degraded and Stalled
// PodSecurityViolation, naming the object, the container and the fields; nothing of that
// render is applied: not on creation, and not over a StatefulSet applied before, which
// stays as it was.
func TestAPrivilegedPatchIsNeverApplied(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Patches = []v1alpha1.ChartPatch{privilegedPatch} })
	want := "True/" + v1alpha1.ReasonPodSecurityViolation
	msg := stalledWith(t, ns, want)
	for _, w := range []string{"StatefulSet etcd: spec.template.spec: privileged", `container "etcd" must not set securityContext.privileged=true`, "hostNetwork=true"} {
		if !strings.Contains(msg, w) {
			t.Errorf("Degraded does not say %q: %s", w, msg)
		}
	}
	for name, obj := range map[string]client.Object{"etcd": &appsv1.StatefulSet{}, "etcd-client": &corev1.Service{}} {
		if err := getObject(ns, name, obj); !apierrors.IsNotFound(err) {
			t.Fatalf("%T %s was applied from a refused render (err %v)", obj, name, err)
		}
	}

	// A benign patch is applied; the privileged one added later is refused, and the
	// StatefulSet applied before stays as it was.
	benign := v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, StrategicMerge: &runtime.RawExtension{Raw: []byte(
		`{"spec":{"template":{"metadata":{"annotations":{"mesh.example.com/inject":"false"}}}}}`)}}
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Patches = []v1alpha1.ChartPatch{benign} })
	waitStatefulSet(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionStalled, "False/"+v1alpha1.ReasonNotStalled)
	before := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", before); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Patches = append(c.Spec.Chart.Patches, privilegedPatch) })
	stalledWith(t, ns, want)
	c := getCluster(t, ns)
	if c.Status.ObservedGeneration != c.Generation {
		t.Fatalf("observedGeneration %d, generation %d: the refusal is this generation's", c.Status.ObservedGeneration, c.Generation)
	}
	after := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", after); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(after.Spec.Template, before.Spec.Template) || after.Spec.Template.Spec.HostNetwork {
		t.Fatalf("the pod template changed under a refused render:\nbefore %+v\nafter  %+v", before.Spec.Template.Spec, after.Spec.Template.Spec)
	}
	if after.Spec.Template.Annotations["mesh.example.com/inject"] != "false" {
		t.Fatalf("the benign patch is not applied: %v", after.Spec.Template.Annotations)
	}
	for _, ctr := range after.Spec.Template.Spec.Containers {
		if sc := ctr.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			t.Fatalf("container %s is privileged", ctr.Name)
		}
	}
}

// privilegedDeployment is a template a platform chart (spec.chart.source) may add: a
// Deployment whose pod mounts the node's root and runs as root.
const privilegedDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-agent
  namespace: {{ .Release.Namespace }}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      automountServiceAccountToken: false
      containers:
      - name: agent
        image: agent
        securityContext: {runAsUser: 0}
      volumes:
      - name: host
        hostPath: {path: /}
`

// TestAChartFromASourceIsHeldToo: a chart from spec.chart.source is checked like the
// embedded one, every pod-bearing kind it renders included: its Deployment is refused by name,
// and nothing of the render is applied.
func TestAChartFromASourceIsHeldToo(t *testing.T) {
	ns := env.Namespace(t)
	putChart(t, ns, packageChart(t, map[string][]byte{"templates/agent.yaml": []byte(privilegedDeployment)}))
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
	})
	msg := stalledWith(t, ns, "True/"+v1alpha1.ReasonPodSecurityViolation)
	for _, w := range []string{"Deployment etcd-agent: spec.template.spec: ", `container "agent" must not set runAsUser=0`, `volume "host" uses restricted volume type "hostPath"`} {
		if !strings.Contains(msg, w) {
			t.Errorf("Degraded does not say %q: %s", w, msg)
		}
	}
	if strings.Contains(msg, "StatefulSet etcd") {
		t.Errorf("the chart's own StatefulSet is refused: %s", msg)
	}
	for name, obj := range map[string]client.Object{"etcd": &appsv1.StatefulSet{}, "etcd-agent": &appsv1.Deployment{}} {
		if err := getObject(ns, name, obj); !apierrors.IsNotFound(err) {
			t.Fatalf("%T %s was applied from a refused render (err %v)", obj, name, err)
		}
	}
}

package manager

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// memberPod is a pod as the StatefulSet controller makes it from the chart's template (the
// golden render of a TLS cluster, with a sidecar added), scheduled and with a status.
func memberPod(t *testing.T) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "testdata", "golden", "tls.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := charts.DecodeManifests(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var sts *appsv1.StatefulSet
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" {
			sts = &appsv1.StatefulSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sts == nil {
		t.Fatal("the golden render has no StatefulSet")
	}
	tpl := sts.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: *tpl.ObjectMeta.DeepCopy(),
		Spec:       *tpl.Spec.DeepCopy(),
	}
	pod.Name, pod.Namespace, pod.UID = sts.Name+"-0", "default", "u-1"
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "rev-1"
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: "s-1"}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
	pod.Spec.NodeName, pod.Spec.Hostname, pod.Spec.Subdomain = "node-1", pod.Name, sts.Spec.ServiceName
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "proxy", Image: "proxy:1", Args: []string{"--listen-client-urls=http://x"}})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: plan.EtcdContainer, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}
	return pod
}

func containerArgs(ps *corev1.PodSpec, name string) []string {
	for _, c := range ps.Containers {
		if c.Name == name {
			return c.Args
		}
	}
	return nil
}

func TestStripPodKeepsWhatTheControllersRead(t *testing.T) {
	full := memberPod(t)
	secrets := map[string]string{}
	for _, v := range full.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	if len(secrets) == 0 || len(containerArgs(&full.Spec, plan.EtcdContainer)) == 0 {
		t.Fatalf("the fixture has no TLS volumes or no etcd args: %v", secrets)
	}
	out, err := stripPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)

	if got.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", got.ManagedFields)
	}
	want := full.ObjectMeta.DeepCopy()
	want.ManagedFields = nil
	if !reflect.DeepEqual(got.ObjectMeta, *want) {
		t.Errorf("metadata changed:\n got %+v\nwant %+v", got.ObjectMeta, *want)
	}
	if !reflect.DeepEqual(got.Status, full.Status) {
		t.Errorf("status changed: %+v", got.Status)
	}
	if got.Spec.NodeName != "node-1" || got.Spec.Subdomain != full.Spec.Subdomain || got.Spec.Hostname != full.Spec.Hostname {
		t.Errorf("nodeName/subdomain/hostname = %q/%q/%q", got.Spec.NodeName, got.Spec.Subdomain, got.Spec.Hostname)
	}
	if a := containerArgs(&got.Spec, plan.EtcdContainer); !reflect.DeepEqual(a, containerArgs(&full.Spec, plan.EtcdContainer)) {
		t.Errorf("etcd args = %v", a)
	}
	var names []string
	for _, c := range got.Spec.Containers {
		names = append(names, c.Name)
		if c.Name != plan.EtcdContainer && (c.Args != nil || c.Image != "") {
			t.Errorf("container %s kept %v %q", c.Name, c.Args, c.Image)
		}
	}
	if len(names) != len(full.Spec.Containers) {
		t.Errorf("containers %v, want %d", names, len(full.Spec.Containers))
	}
	gotSecrets := map[string]string{}
	for _, v := range got.Spec.Volumes {
		if v.Secret == nil {
			t.Errorf("volume %s kept, not a Secret", v.Name)
			continue
		}
		gotSecrets[v.Name] = v.Secret.SecretName
	}
	if !reflect.DeepEqual(gotSecrets, secrets) {
		t.Errorf("secret volumes = %v, want %v", gotSecrets, secrets)
	}

	before, _ := json.Marshal(full)
	after, _ := json.Marshal(got)
	t.Logf("a member pod as JSON: %d bytes, %d cached", len(before), len(after))
	if len(after) >= len(before)/2 {
		t.Errorf("stripped pod is %d bytes of %d", len(after), len(before))
	}
}

func TestStripPodTombstoneAndOtherKinds(t *testing.T) {
	out, err := stripPod(cache.DeletedFinalStateUnknown{Key: "default/p", Obj: memberPod(t)})
	if err != nil {
		t.Fatal(err)
	}
	if p := out.(cache.DeletedFinalStateUnknown).Obj.(*corev1.Pod); len(containerArgs(&p.Spec, "proxy")) != 0 || p.ManagedFields != nil {
		t.Errorf("a tombstone's pod is not stripped: %+v", p.Spec)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Data: map[string]string{"k": "v"}}
	out, err = stripPod(cm)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*corev1.ConfigMap); got.ManagedFields != nil || got.Data["k"] != "v" {
		t.Errorf("another kind: %+v", got)
	}
}

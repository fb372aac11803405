package controllers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/ociregistry"
)

// packageChart packs the embedded chart's folder, with extra template files (name -> content,
// nil content drops a template), into the .tgz `helm package` writes.
func packageChart(t testing.TB, extra map[string][]byte) []byte {
	return testutil.PackageChart(t, filepath.Join("..", "charts", "etcd-cluster"), "etcd-cluster", extra)
}

func putChart(t testing.TB, ns string, archive []byte) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := getObject(ns, "platform-chart", cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "platform-chart", Namespace: ns}, BinaryData: map[string][]byte{"chart.tgz": archive}}
			return env.Client.Create(context.Background(), cm)
		}
		if err != nil {
			return err
		}
		cm.BinaryData = map[string][]byte{"chart.tgz": archive}
		return env.Client.Update(context.Background(), cm)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The extra kind a platform team's chart renders: a ConfigMap, which the built-in chart
// never does, labelled by the chart's own helpers only.
const extraTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "etcd-cluster.fullname" . }}-platform
  namespace: {{ .Release.Namespace | quote }}
data:
  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}
  hasStatefulSets: {{ .Capabilities.APIVersions.Has "apps/v1/StatefulSet" | quote }}
`

// TestChartFromAConfigMapRendersAppliesAndPrunesAnExtraKind: a cluster whose spec.chart.source
// names a ConfigMap with a packaged chart gets that chart's objects, an extra kind among them,
// rendered with the cluster's real capabilities; the operator prunes the extra object when
// the chart stops rendering it.
func TestChartFromAConfigMapRendersAppliesAndPrunesAnExtraKind(t *testing.T) {
	ns := env.Namespace(t)
	putChart(t, ns, packageChart(t, map[string][]byte{"templates/platform.yaml": []byte(extraTemplate)}))
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
	})
	waitStatefulSet(t, ns)
	extra := &corev1.ConfigMap{}
	eventually(t, timeout, "the chart's extra ConfigMap", func() error { return getObject(ns, "etcd-platform", extra) })
	if !strings.HasPrefix(extra.Data["kubeVersion"], "v1.") || extra.Data["hasStatefulSets"] != "true" {
		t.Fatalf("the chart saw capabilities %v; want the API server's version and API versions", extra.Data)
	}
	if extra.Labels[v1alpha1.LabelCluster] != "etcd" || len(extra.OwnerReferences) != 1 {
		t.Fatalf("extra object labels %v owners %v: want the inventory labels and the cluster as owner", extra.Labels, extra.OwnerReferences)
	}
	eventually(t, timeout, "status.extraKinds", func() error {
		if k := getCluster(t, ns).Status.ExtraKinds; fmt.Sprint(k) != "[v1/ConfigMap]" {
			return fmt.Errorf("status.extraKinds %v", k)
		}
		return nil
	})

	putChart(t, ns, packageChart(t, nil))
	eventually(t, timeout, "the extra ConfigMap pruned", func() error {
		err := getObject(ns, "etcd-platform", &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	eventually(t, timeout, "status.extraKinds emptied", func() error {
		if k := getCluster(t, ns).Status.ExtraKinds; len(k) != 0 {
			return fmt.Errorf("status.extraKinds %v", k)
		}
		return nil
	})
	if err := getObject(ns, membershipConfigMap("etcd"), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the prune took the membership ConfigMap the operator writes itself: %v", err)
	}
}

func membershipConfigMap(name string) string { return name + "-membership" }

// TestAChartWithoutTheStatefulSetBreaksTheContract: a chart that renders no StatefulSet is
// reported in Degraded with what is missing, and nothing of it is applied.
func TestAChartWithoutTheStatefulSetBreaksTheContract(t *testing.T) {
	ns := env.Namespace(t)
	putChart(t, ns, packageChart(t, map[string][]byte{"templates/statefulset.yaml": nil}))
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
	})
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonChartContractBroken)
	msg := ""
	for _, cond := range c.Status.Conditions {
		if cond.Type == v1alpha1.ConditionDegraded {
			msg = cond.Message
		}
	}
	if !strings.Contains(msg, "no StatefulSet named etcd") {
		t.Fatalf("Degraded says %q; want it to name the missing StatefulSet", msg)
	}
	for _, name := range []string{"etcd", "etcd-client"} {
		if err := getObject(ns, name, &corev1.Service{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Service %s was applied from a render that breaks the contract (err %v)", name, err)
		}
	}

	// A missing ConfigMap says how to create it.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Source.ConfigMap.Name = "nope" })
	eventually(t, timeout, "Degraded naming the missing ConfigMap", func() error {
		for _, cond := range getCluster(t, ns).Status.Conditions {
			if cond.Type == v1alpha1.ConditionDegraded && strings.Contains(cond.Message, "ConfigMap "+ns+"/nope not found") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", getCluster(t, ns).Status.Conditions)
	})

	// The ConfigMap created later, with a chart that keeps the contract: the operator looks
	// again by itself (the ConfigMap is not watched) and applies it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope", Namespace: ns}, BinaryData: map[string][]byte{"chart.tgz": packageChart(t, nil)}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	waitStatefulSet(t, ns)
}

// TestPatchesAreAppliedAndABrokenOneIsReported: spec.chart.patches reach the applied objects;
// a patch that would break the contract (replicas on the StatefulSet) is refused before
// anything is applied, and says so.
func TestPatchesAreAppliedAndABrokenOneIsReported(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Patches = []v1alpha1.ChartPatch{
			{Target: v1alpha1.PatchTarget{Kind: "Service", Name: "etcd-client"}, StrategicMerge: &runtime.RawExtension{Raw: []byte(`{"metadata":{"annotations":{"lb.example.com/internal":"true"}}}`)}},
			{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"}, JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/spec/template/metadata/annotations", Value: &runtime.RawExtension{Raw: []byte(`{"mesh.example.com/inject":"false"}`)}}}},
		}
	})
	sts := waitStatefulSet(t, ns)
	if sts.Spec.Template.Annotations["mesh.example.com/inject"] != "false" {
		t.Fatalf("pod template annotations %v", sts.Spec.Template.Annotations)
	}
	svc := &corev1.Service{}
	eventually(t, timeout, "the client Service", func() error { return getObject(ns, "etcd-client", svc) })
	if svc.Annotations["lb.example.com/internal"] != "true" {
		t.Fatalf("client Service annotations %v", svc.Annotations)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Patches = append(c.Spec.Chart.Patches, v1alpha1.ChartPatch{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"},
			JSON: []v1alpha1.JSONPatchOperation{{Op: "add", Path: "/spec/replicas", Value: &runtime.RawExtension{Raw: []byte(`5`)}}}})
	})
	waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonChartContractBroken)
	got := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas != nil && *got.Spec.Replicas == 5 {
		t.Fatal("a patch that breaks the contract was applied")
	}
}

// TestChartFromAnOCIRegistryIsPulledOnce: spec.chart.source.oci pulls the chart with Helm's
// registry client, with the login of the pull Secret, once per version: later passes render
// from what was pulled; a new version pulls again.
func TestChartFromAnOCIRegistryIsPulledOnce(t *testing.T) {
	ns := env.Namespace(t)
	reg := ociregistry.New("team", "s3cret")
	defer reg.Close()
	reg.Push("charts/etcd-cluster", "etcd-cluster", "1.0.0", packageChart(t, map[string][]byte{"templates/platform.yaml": []byte(extraTemplate)}))
	reg.Push("charts/etcd-cluster", "etcd-cluster", "1.1.0", packageChart(t, nil))
	auth := base64.StdEncoding.EncodeToString([]byte("team:s3cret"))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-login", Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.Host() + `":{"auth":"` + auth + `"}}}`)}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	repo := "oci://" + reg.Host() + "/charts/etcd-cluster"
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{OCI: &v1alpha1.OCIChartSource{Repository: repo, Version: "1.0.0", PlainHTTP: true, PullSecret: "registry-login"}}
	})
	waitStatefulSet(t, ns)
	eventually(t, timeout, "the pulled chart's extra ConfigMap", func() error { return getObject(ns, "etcd-platform", &corev1.ConfigMap{}) })
	// More passes (a spec change that does not touch the chart) render from the pulled chart.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.PodAnnotations = map[string]string{"pass": "2"} })
	eventually(t, timeout, "the pod annotation applied", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if sts.Spec.Template.Annotations["pass"] != "2" {
			return fmt.Errorf("annotations %v", sts.Spec.Template.Annotations)
		}
		return nil
	})
	if n := reg.Pulls(); n != 1 {
		t.Fatalf("%d pulls of version 1.0.0; want one", n)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Source.OCI.Version = "1.1.0" })
	eventually(t, timeout, "the extra ConfigMap pruned with version 1.1.0", func() error {
		err := getObject(ns, "etcd-platform", &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})

	// A version the registry does not have is reported, and what runs stays.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Source.OCI.Version = "9.9.9" })
	eventually(t, timeout, "Degraded naming the version", func() error {
		for _, cond := range getCluster(t, ns).Status.Conditions {
			if cond.Type == v1alpha1.ConditionDegraded && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "9.9.9") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", getCluster(t, ns).Status.Conditions)
	})
	if err := getObject(ns, "etcd", &appsv1.StatefulSet{}); err != nil {
		t.Fatalf("the StatefulSet went with a chart that cannot be pulled: %v", err)
	}
}

// TestARenderNeverTakesOverAnObjectItDoesNotOwn: a chart that renders the name of an object
// the cluster does not control (here one a person created) stalls with what to do, and the
// object is left as it is.
func TestARenderNeverTakesOverAnObjectItDoesNotOwn(t *testing.T) {
	ns := env.Namespace(t)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "etcd-platform", Namespace: ns}, Data: map[string]string{"owner": "someone else"}}
	if err := env.Client.Create(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	putChart(t, ns, packageChart(t, map[string][]byte{"templates/platform.yaml": []byte(extraTemplate)}))
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "platform-chart"}}
	})
	eventually(t, timeout, "Stalled naming the taken object", func() error {
		for _, cond := range getCluster(t, ns).Status.Conditions {
			if cond.Type == v1alpha1.ConditionStalled && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "ConfigMap "+ns+"/etcd-platform, but that name is taken by an object no controller owns") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", getCluster(t, ns).Status.Conditions)
	})
	got := &corev1.ConfigMap{}
	if err := getObject(ns, "etcd-platform", got); err != nil {
		t.Fatal(err)
	}
	if got.Data["owner"] != "someone else" || len(got.OwnerReferences) != 0 || got.Labels[v1alpha1.LabelCluster] != "" {
		t.Fatalf("the operator took the object over: data %v owners %v labels %v", got.Data, got.OwnerReferences, got.Labels)
	}
}

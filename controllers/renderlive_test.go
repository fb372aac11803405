package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/cli"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// kubeconfigFile writes a kubeconfig for the test API server.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func renderedStatefulSet(t *testing.T, args ...string) *appsv1.StatefulSet {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), append([]string{"render"}, args...), nil, &out, &errOut); code != 0 {
		t.Fatalf("render %v: exit %d: %s", args, code, errOut.String())
	}
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		if !strings.Contains(doc, "kind: StatefulSet") {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := sigsyaml.Unmarshal([]byte(doc), sts); err != nil {
			t.Fatal(err)
		}
		return sts
	}
	t.Fatalf("render printed no StatefulSet:\n%s", out.String())
	return nil
}

func etcdArg(sts *appsv1.StatefulSet, flag string) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if strings.HasPrefix(a, flag+"=") {
				return strings.TrimPrefix(a, flag+"=")
			}
		}
	}
	return ""
}

// TestRenderLiveShowsWhatIsApplied: `render --live` prints the StatefulSet the operator
// applied: the same cluster token and owner reference (from the live object's UID), the patches,
// and the claim labels the live StatefulSet keeps; with -f, the file's spec over the live
// object. A render of the file alone cannot know the UID, and says a different token.
func TestRenderLiveShowsWhatIsApplied(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"storage":{"claimLabels":{"tier":"gold"}}}`)}
		c.Spec.Chart.Patches = []v1alpha1.ChartPatch{{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"},
			StrategicMerge: &runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"metadata":{"annotations":{"patched":"yes"}}}}}`)}}}
	})
	applied := waitStatefulSet(t, ns)
	kc := kubeconfigFile(t)

	got := renderedStatefulSet(t, "--live", "--kubeconfig", kc, "-n", ns, "--name", "etcd")
	if a, b := etcdArg(got, "--initial-cluster-token"), etcdArg(applied, "--initial-cluster-token"); a == "" || a != b {
		t.Fatalf("rendered token %q, applied %q", a, b)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != applied.OwnerReferences[0].UID {
		t.Fatalf("rendered owners %v, applied %v", got.OwnerReferences, applied.OwnerReferences)
	}
	if got.Spec.Template.Annotations["patched"] != "yes" {
		t.Fatalf("the patch is not in the render: %v", got.Spec.Template.Annotations)
	}

	// The file: the claim labels changed, which the operator does not apply (the live ones
	// stay), and a new pod annotation, which it does.
	c := getCluster(t, ns)
	file := fmt.Sprintf(`apiVersion: etcdpilot.io/v1alpha1
kind: EtcdCluster
metadata:
  name: etcd
  namespace: %s
spec:
  insecure: true
  podAnnotations: {new: "1"}
  chart:
    values: {storage: {claimLabels: {tier: silver}}}
`, ns)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	got = renderedStatefulSet(t, "--live", "--kubeconfig", kc, "-f", path)
	if got.Spec.Template.Annotations["new"] != "1" || got.Spec.Template.Annotations["patched"] != "" {
		t.Fatalf("render of the file over the live object: pod annotations %v", got.Spec.Template.Annotations)
	}
	if l := got.Spec.VolumeClaimTemplates[0].Labels["tier"]; l != "gold" {
		t.Fatalf("claim label tier=%q; the operator keeps the live gold", l)
	}
	if etcdArg(got, "--initial-cluster-token") != "etcd-"+string(c.UID) {
		t.Fatalf("token %q", etcdArg(got, "--initial-cluster-token"))
	}
	offline := renderedStatefulSet(t, "-f", path)
	if etcdArg(offline, "--initial-cluster-token") == etcdArg(applied, "--initial-cluster-token") {
		t.Fatal("a render without the live object cannot know the token; the test is not testing --live")
	}
}

// TestRenderLiveRendersATenantChartInTheSandbox: `render --live` of a cluster whose chart (a
// ConfigMap, the tenant's) renders `{{ repeat 400000000 "a" }}` stops at the sandbox's
// memory budget, as the operator does, instead of taking 400 MB of the machine it runs on.
func TestRenderLiveRendersATenantChartInTheSandbox(t *testing.T) {
	ns := env.Namespace(t)
	archive := testutil.PackageChart(t, filepath.Join("..", "charts", charts.ChartDir), "etcd-cluster",
		map[string][]byte{"templates/hostile.yaml": []byte(`{{ repeat 400000000 "a" }}`)})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chart", Namespace: ns}, BinaryData: map[string][]byte{"chart.tgz": archive}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Source = &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "chart"}}
	})
	var out, errOut bytes.Buffer
	before := peakRSS(t)
	code := cli.Run(context.Background(), []string{"render", "--live", "--kubeconfig", kubeconfigFile(t), "-n", ns, "--name", "etcd"}, nil, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "--chart-render-memory") {
		t.Fatalf("render --live exit %d: %s; want the memory budget exceeded", code, errOut.String())
	}
	if grew := peakRSS(t) - before; grew > 64<<20 {
		t.Fatalf("this process's peak RSS grew by %d MiB: the chart rendered here", grew>>20)
	}
}

func peakRSS(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss << 10
}

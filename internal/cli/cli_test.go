package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

const sample = "../../config/samples/etcdcluster.yaml"

func TestRenderSamplePrintsTheTopology(t *testing.T) {
	out, errOut, code := run(t, "", "render", "-f", sample)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	objs, err := charts.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if len(o.GetOwnerReferences()) != 0 {
			t.Errorf("%s has owner references, but the sample has no uid", o.GetName())
		}
	}
	// A file without a uid is a new cluster: secure defaults, so a NetworkPolicy and TLS.
	want := "NetworkPolicy/demo PodDisruptionBudget/demo ServiceAccount/demo Service/demo-client Service/demo StatefulSet/demo"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("render printed %s, want %s", got, want)
	}
	for _, flag := range []string{"--client-cert-auth=true", "--peer-client-cert-auth=true", "--listen-client-urls=https://"} {
		if !strings.Contains(out, flag) {
			t.Errorf("the sample renders without %s: it is not secure by default", flag)
		}
	}
}

// TestRenderInsecureIsPlain: spec.insecure renders plain HTTP and no NetworkPolicy.
func TestRenderInsecureIsPlain(t *testing.T) {
	b, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	// The sample's spec.tls (its application certificate) removed: spec.insecure is plain
	// only where spec.tls names no side.
	tlsBlock := "  tls:\n    client:\n      certificates:\n        - name: app\n"
	if !strings.Contains(string(b), tlsBlock) {
		t.Fatalf("the sample has no application certificate block %q", tlsBlock)
	}
	in := strings.Replace(strings.Replace(string(b), tlsBlock, "", 1), "spec:\n", "spec:\n  insecure: true\n", 1)
	out, errOut, code := run(t, in, "render", "-f", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "kind: NetworkPolicy") || strings.Contains(out, "https://") {
		t.Errorf("spec.insecure renders a NetworkPolicy or TLS:\n%s", out)
	}
}

func TestRenderWithUIDAddsOwnerReferencesAndSetOverrides(t *testing.T) {
	b, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Replace(string(b), "  namespace: default\n", "  namespace: default\n  uid: 0b4b7c1e-1111-2222-3333-444455556666\n", 1)
	out, errOut, code := run(t, in, "render", "-f", "-", "--set", "podDisruptionBudget.enabled=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	objs, _ := charts.DecodeManifests(out)
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			t.Fatalf("--set podDisruptionBudget.enabled=false was ignored")
		}
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || string(refs[0].UID) != "0b4b7c1e-1111-2222-3333-444455556666" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Fatalf("%s owner references %+v", o.GetName(), refs)
		}
	}
	if !strings.Contains(out, "--initial-cluster-token=demo-0b4b7c1e-1111-2222-3333-444455556666") {
		t.Fatalf("the cluster token does not derive from the uid")
	}
}

func TestValuesFileIsMergedLast(t *testing.T) {
	f := filepath.Join(t.TempDir(), "v.yaml")
	if err := os.WriteFile(f, []byte("replicas: 5\netcd:\n  extraArgs:\n    log-level: debug\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "", "values", "-f", sample, "--values", f)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"replicas: 5", "log-level: debug", "version: 3.6.16"} {
		if !strings.Contains(out, want) {
			t.Errorf("values output lacks %q:\n%s", want, out)
		}
	}
}

const npCluster = "apiVersion: etcdpilot.io/v1alpha1\nkind: EtcdCluster\nmetadata: {name: x, namespace: db}\nspec: {networkPolicy: {enabled: true}}\n"

// TestRenderNetworkPolicyNamesTheOperator: render prints the NetworkPolicy the operator would
// apply, admitting the operator where config/default deploys it unless told otherwise.
func TestRenderNetworkPolicyNamesTheOperator(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"kubernetes.io/metadata.name: etcd-pilot-system", "app.kubernetes.io/name: etcd-pilot"}},
		{[]string{"--operator-namespace", "platform", "--operator-pod-labels", "app=pilot,tier=ops"},
			[]string{"kubernetes.io/metadata.name: platform", "app: pilot", "tier: ops"}},
	} {
		out, errOut, code := run(t, npCluster, append([]string{"render", "-f", "-"}, tt.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tt.args, code, errOut)
		}
		if !strings.Contains(out, "kind: NetworkPolicy") {
			t.Fatalf("%v: no NetworkPolicy rendered:\n%s", tt.args, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: the render lacks %q", tt.args, w)
			}
		}
	}
}

func TestBadInputSaysWhatToFix(t *testing.T) {
	tests := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"no file", "", []string{"render"}, "missing -f"},
		{"unknown field", "apiVersion: etcdpilot.io/v1alpha1\nkind: EtcdCluster\nmetadata: {name: x}\nspec: {replica: 3}\n", []string{"render", "-f", "-"}, "unknown field"},
		{"wrong kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", []string{"values", "-f", "-"}, "want kind EtcdCluster"},
		{"no name", "apiVersion: etcdpilot.io/v1alpha1\nkind: EtcdCluster\nmetadata: {}\n", []string{"values", "-f", "-"}, "metadata.name is required"},
		{"owned flag", "apiVersion: etcdpilot.io/v1alpha1\nkind: EtcdCluster\nmetadata: {name: x}\nspec: {etcd: {extraArgs: {initial-cluster: y}}}\n", []string{"render", "-f", "-"}, "initial-cluster"},
		{"chart refuses", "apiVersion: etcdpilot.io/v1alpha1\nkind: EtcdCluster\nmetadata: {name: x}\n", []string{"render", "-f", "-", "--set", "replicas=0"}, "spec.chart.values"},
		{"unknown command", "", []string{"frobnicate"}, "unknown command"},
		{"operator pod labels", npCluster, []string{"render", "-f", "-", "--operator-pod-labels", "app in (a,b)"}, "--operator-pod-labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, tt.stdin, tt.args...)
			if code == 0 {
				t.Fatalf("exit 0, want a failure")
			}
			if !strings.Contains(errOut, tt.want) {
				t.Fatalf("error %q does not say %q", errOut, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "", "version")
	if code != 0 || !strings.Contains(out, "etcd-cluster 0.1.0") || !strings.Contains(out, "3.6.16") {
		t.Fatalf("version printed %q (exit %d)", out, code)
	}
}

// privilegedCluster patches its etcd container to run privileged as root.
const privilegedCluster = `apiVersion: etcdpilot.io/v1alpha1
kind: EtcdCluster
metadata: {name: x, namespace: tenant}
spec:
  chart:
    patches:
    - target: {kind: StatefulSet}
      strategicMerge:
        spec: {template: {spec: {containers: [{name: etcd, securityContext: {privileged: true, runAsUser: 0}}]}}}
`

// TestRenderHoldsPodsToTheLevel: render refuses what the operator refuses, with the same
// message, at the level --pod-security-level names (restricted unless told otherwise).
func TestRenderHoldsPodsToTheLevel(t *testing.T) {
	for _, args := range [][]string{{"render", "-f", "-"}, {"render", "-f", "-", "--pod-security-level", "baseline"}} {
		out, errOut, code := run(t, privilegedCluster, args...)
		if code == 0 || out != "" {
			t.Fatalf("%v: exit %d, printed %d bytes; want a refusal and nothing printed", args, code, len(out))
		}
		for _, w := range []string{"StatefulSet x: spec.template.spec: privileged", `container "etcd" must not set securityContext.privileged=true`} {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: the refusal does not say %q: %s", args, w, errOut)
			}
		}
	}
	// runAsUser 0 is baseline; privileged checks nothing.
	if _, errOut, _ := run(t, privilegedCluster, "render", "-f", "-", "--pod-security-level", "baseline"); strings.Contains(errOut, "runAsUser") {
		t.Errorf("baseline refuses runAsUser 0: %s", errOut)
	}
	out, errOut, code := run(t, privilegedCluster, "render", "-f", "-", "--pod-security-level", "privileged")
	if code != 0 || !strings.Contains(out, "privileged: true") {
		t.Fatalf("--pod-security-level privileged: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, privilegedCluster, "render", "-f", "-", "--pod-security-level", "none"); code == 0 || !strings.Contains(errOut, "--pod-security-level") {
		t.Fatalf("an unknown level: exit %d: %s", code, errOut)
	}
}

package controllers_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestAnUnsafeFlagFromAPatchIsRefusedWithACondition: admission cannot judge what a chart patch
// writes into the etcd container's arguments; the chart contract refuses a single-dash
// -unsafe-no-fsync and a second, single-dash -client-cert-auth=false on a TLS cluster, the
// Degraded condition names each flag and the argument that set it, and nothing is applied.
func TestAnUnsafeFlagFromAPatchIsRefusedWithACondition(t *testing.T) {
	ns := env.Namespace(t)
	addArg := func(arg string) v1alpha1.JSONPatchOperation {
		return v1alpha1.JSONPatchOperation{Op: "add", Path: "/spec/template/spec/containers/0/args/-", Value: &runtime.RawExtension{Raw: []byte(`"` + arg + `"`)}}
	}
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
		c.Spec.Chart.Patches = []v1alpha1.ChartPatch{{Target: v1alpha1.PatchTarget{Kind: "StatefulSet"},
			JSON: []v1alpha1.JSONPatchOperation{addArg("-unsafe-no-fsync"), addArg("-client-cert-auth=false")}}}
	})
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonChartContractBroken)
	msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message
	for _, want := range []string{"may not set --unsafe-no-fsync (args[", "sets --client-cert-auth twice (args["} {
		if !strings.Contains(msg, want) {
			t.Errorf("Degraded does not say %q: %s", want, msg)
		}
	}
	if err := getObject(ns, "etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the StatefulSet of a refused render was applied (get: %v)", err)
	}
}

package testutil

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// CertManagerCluster is an EtcdCluster etcd/ns whose peer certificates come from the Issuer
// "ca" and whose client certificates come from the ClusterIssuer "root", with two extra SANs;
// mutate, when set, edits its spec.tls.
func CertManagerCluster(mutate func(*v1alpha1.TLSSpec)) *v1alpha1.EtcdCluster {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", UID: "uid-1"},
		Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{
			Peer:      &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}},
			Client:    &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "root", Kind: v1alpha1.IssuerKindClusterIssuer, Group: "cert-manager.io"}},
			ExtraSANs: []string{"etcd.example", "10.0.0.7"},
		}}}
	if mutate != nil {
		mutate(c.Spec.TLS)
	}
	return c
}

// KStatus is what kstatus (the library behind kpt, Flux's health checks and cli-utils' apply
// waiters) computes for obj of kind gvk.
func KStatus(t *testing.T, obj runtime.Object, gvk schema.GroupVersionKind) *kstatus.Result {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstr.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	res, err := kstatus.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

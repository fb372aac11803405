package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

func certManagerCluster(mutate func(*v1alpha1.TLSSpec)) *v1alpha1.EtcdCluster {
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

// Without cert-manager's CRDs the pass says to install it and creates nothing.
func TestCertManagerNotInstalled(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(s).Build()
	r := &EtcdClusterReconciler{Client: cl, Scheme: s, Recorder: events.NewFakeRecorder(10)}
	c := certManagerCluster(nil)
	_, _, err := r.reconcileCertManager(context.Background(), c, render.TopologyOf(c, nil), time.Now())
	if !render.IsTLSError(err) || !strings.Contains(err.Error(), "install cert-manager") {
		t.Fatalf("error %v, want a TLSError saying to install cert-manager", err)
	}
	// No side from cert-manager: nothing is looked up at all.
	c = certManagerCluster(func(s *v1alpha1.TLSSpec) { s.Peer, s.Client = &v1alpha1.PeerTLS{}, nil })
	if m, exp, err := r.reconcileCertManager(context.Background(), c, render.TopologyOf(c, nil), time.Now()); err != nil || m != nil || exp != nil {
		t.Fatalf("without a CertManager side: %v %v %v", m, exp, err)
	}
}

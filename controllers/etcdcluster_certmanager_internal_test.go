package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// Without cert-manager's CRDs the pass says to install it and creates nothing.
func TestCertManagerNotInstalled(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(s).Build()
	r := &EtcdClusterReconciler{Client: cl, Scheme: s, Recorder: events.NewFakeRecorder(10)}
	c := testutil.CertManagerCluster(nil)
	_, _, err := r.reconcileCertManager(context.Background(), c, render.TopologyOf(c, nil), time.Now())
	if !render.IsTLSError(err) || !strings.Contains(err.Error(), "install cert-manager") {
		t.Fatalf("error %v, want a TLSError saying to install cert-manager", err)
	}
	// No side from cert-manager: nothing is looked up at all.
	c = testutil.CertManagerCluster(func(s *v1alpha1.TLSSpec) { s.Peer, s.Client = &v1alpha1.PeerTLS{}, nil })
	if m, exp, err := r.reconcileCertManager(context.Background(), c, render.TopologyOf(c, nil), time.Now()); err != nil || m != nil || exp != nil {
		t.Fatalf("without a CertManager side: %v %v %v", m, exp, err)
	}
}

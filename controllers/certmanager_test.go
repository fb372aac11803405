package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// certManagerCRDs is the folder of cert-manager's CRDs that hack/build-certmanager.sh puts
// next to its controllers (built once, cached in bin/).
func certManagerCRDs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "hack", "build-certmanager.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-certmanager.sh: %v\n%s", err, stderr.String())
	}
	return filepath.Join(strings.TrimSpace(string(out)), "crds")
}

func degradedMessage(t *testing.T, ns string) (string, string) {
	t.Helper()
	d := meta.FindStatusCondition(getCluster(t, ns).Status.Conditions, v1alpha1.ConditionDegraded)
	if d == nil {
		return "", ""
	}
	return d.Reason, d.Message
}

func waitDegradedWith(t *testing.T, ns, reason string, parts ...string) {
	t.Helper()
	eventually(t, timeout, "Degraded "+reason+" saying "+strings.Join(parts, ", "), func() error {
		r, m := degradedMessage(t, ns)
		if r != reason {
			return fmt.Errorf("Degraded reason %q: %s", r, m)
		}
		for _, p := range parts {
			if !strings.Contains(m, p) {
				return fmt.Errorf("Degraded message %q lacks %q", m, p)
			}
		}
		return nil
	})
}

// Source CertManager against a real kube-apiserver (no cert-manager controller runs here):
// without cert-manager's CRDs the cluster says to install it and applies nothing; with them
// the operator creates the Certificates and waits, naming the missing Secrets; Secrets as
// cert-manager writes them are picked up through the watch and the cluster is rendered; a side
// moved to the Operator source loses its Certificates, and the Operator source does not
// overwrite a Secret cert-manager wrote.
func TestCertManagerSourceAgainstTheAPIServer(t *testing.T) {
	crdDir := certManagerCRDs(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	installed := getObject("", "certificates.cert-manager.io", crd) == nil
	ref := &v1alpha1.IssuerReference{Name: "ca"}
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{
			Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
		}
	})
	if !installed {
		waitDegradedWith(t, ns, v1alpha1.ReasonTLSNotReady, "install cert-manager", "cert-manager.io/v1")
		if err := getObject(ns, "etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			t.Fatalf("StatefulSet applied without cert-manager: %v", err)
		}
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{crdDir}, ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
	}

	// The Certificates exist; nothing has issued them, and the cluster says which Secrets it
	// waits for.
	names := []string{"etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"}
	for _, name := range names {
		eventually(t, timeout, "Certificate "+name, func() error {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(render.CertificateGVK)
			return getObject(ns, name, u)
		})
	}
	waitDegradedWith(t, ns, v1alpha1.ReasonTLSNotReady, "Secret "+ns+"/etcd-peer-tls of Certificate "+ns+"/etcd-peer-tls does not exist yet",
		"etcd-operator-client-tls", "no Ready condition yet")
	if err := getObject(ns, "etcd", &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("StatefulSet applied before cert-manager issued the certificates: %v", err)
	}

	// Secrets as cert-manager writes them (its annotation, the secretTemplate's labels).
	now := time.Now()
	ca, err := certs.NewCA("issuer CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dns := []string{"*.etcd." + ns + ".svc", "*.etcd." + ns + ".svc.cluster.local", "etcd-client", "etcd-client." + ns, "etcd-client." + ns + ".svc", "etcd-client." + ns + ".svc.cluster.local"}
	reqs := map[string]certs.Request{
		"etcd-peer-tls":            {CommonName: "etcd-peer", DNSNames: dns, Server: true, Client: true, Validity: time.Hour},
		"etcd-server-tls":          {CommonName: "etcd-server", DNSNames: dns, Server: true, Client: true, Validity: time.Hour},
		"etcd-operator-client-tls": {CommonName: render.OperatorCommonName(getCluster(t, ns)), Client: true, Validity: time.Hour},
	}
	for _, name := range names {
		p, err := certs.Issue(ca, reqs[name], now)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{v1alpha1.LabelCluster: "etcd", v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
			Annotations: map[string]string{"cert-manager.io/certificate-name": name}},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key, "ca.crt": ca.Cert}}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStatefulSet(t, ns)
	eventually(t, timeout, "status.certificates from cert-manager's Secrets", func() error {
		c := getCluster(t, ns)
		if len(c.Status.Certificates) != 3 {
			return fmt.Errorf("status.certificates %+v", c.Status.Certificates)
		}
		for _, s := range c.Status.Certificates {
			if s.RenewAt != nil {
				return fmt.Errorf("%s has a renewal time, but cert-manager renews it", s.Secret)
			}
		}
		if r, m := degradedMessage(t, ns); r == v1alpha1.ReasonTLSNotReady {
			return fmt.Errorf("still TLSNotReady: %s", m)
		}
		return nil
	})
	// Passes went by (one every 10 s while TLS was not ready, one per Secret event): an
	// unchanged Certificate was never written again.
	for _, name := range names {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(render.CertificateGVK)
		if err := getObject(ns, name, u); err != nil {
			t.Fatal(err)
		}
		if u.GetGeneration() != 1 {
			t.Fatalf("Certificate %s was rewritten: generation %d", name, u.GetGeneration())
		}
	}
	evs := &eventsv1.EventList{}
	if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "CertificateUpdated" {
			t.Fatalf("an unchanged Certificate was updated: %s", e.Note)
		}
	}
	if err := getObject(ns, "etcd-ca", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the operator created a CA for a cluster whose certificates cert-manager issues: %v", err)
	}

	// The client side moves to the Operator source: its Certificates go, the peer's stays,
	// and the operator names the Secret cert-manager wrote instead of overwriting it.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns)
		c.Spec.TLS.Client = &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator}
		return env.Client.Update(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd-server-tls", "etcd-operator-client-tls"} {
		eventually(t, timeout, "Certificate "+name+" deleted", func() error {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(render.CertificateGVK)
			if err := getObject(ns, name, u); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
	}
	peer := &unstructured.Unstructured{}
	peer.SetGroupVersionKind(render.CertificateGVK)
	if err := getObject(ns, "etcd-peer-tls", peer); err != nil {
		t.Fatalf("the peer's Certificate: %v", err)
	}
	waitDegradedWith(t, ns, v1alpha1.ReasonTLSNotReady, "written by cert-manager for Certificate "+ns+"/etcd-server-tls")
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd-server-tls"}, s); err != nil {
		t.Fatal(err)
	}
	if leaf, _ := certs.Parse(s.Data["tls.crt"]); leaf == nil || leaf.Issuer.CommonName != "issuer CA" {
		t.Fatalf("the Secret cert-manager wrote was overwritten")
	}
}

// TestAClusterIssuerIsRefusedUnlessTheAdminAllowsIt (issue 26): a tenant whose spec.tls names
// a ClusterIssuer (which signs for every namespace) gets TLSNotReady saying so, and no
// Certificate is written for the issuer to sign; the operator under test runs with the
// default, which refuses them.
func TestAClusterIssuerIsRefusedUnlessTheAdminAllowsIt(t *testing.T) {
	crdDir := certManagerCRDs(t)
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if getObject("", "certificates.cert-manager.io", crd) != nil {
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{crdDir}, ErrorIfPathMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	ns := env.Namespace(t)
	shared := &v1alpha1.IssuerReference{Name: "shared", Kind: v1alpha1.IssuerKindClusterIssuer, Group: "cert-manager.io"}
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{
			Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}},
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: shared},
		}
	})
	waitDegradedWith(t, ns, v1alpha1.ReasonTLSNotReady, "cluster-scoped issuer ClusterIssuer shared", "--allow-cluster-issuers")
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(render.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		t.Fatalf("%d Certificates written for a refused issuer", len(list.Items))
	}
}

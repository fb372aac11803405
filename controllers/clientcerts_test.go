package controllers_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
)

// TestApplicationCertificatesAreIssuedAndRevoked: spec.tls.client.certificates gets each
// application a Secret with a client certificate of the cluster's CA (common name: the
// entry's name) and ca.crt, so nobody needs the CA's key; the members read a revocation list
// from then on. Removing an entry puts its certificate's serial number in the list before
// its Secret is emptied, and the members keep reading the list. Listed again, it gets a new
// certificate into the same Secret.
func TestApplicationCertificatesAreIssuedAndRevoked(t *testing.T) {
	ns := env.Namespace(t)
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{
			Certificates: []v1alpha1.ClientCertificate{{Name: "app"}, {Name: "reports"}}}}
	})
	app := &corev1.Secret{}
	eventually(t, timeout, "Secret etcd-client-app", func() error { return getObject(ns, "etcd-client-app", app) })
	leaf, err := certs.Parse(app.Data[certs.CertKey])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "app" || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || len(leaf.DNSNames) != 0 {
		t.Errorf("the application's certificate: CN %q, usages %v, names %v", leaf.Subject.CommonName, leaf.ExtKeyUsage, leaf.DNSNames)
	}
	ca := &corev1.Secret{}
	if err := getObject(ns, "etcd-ca", ca); err != nil {
		t.Fatal(err)
	}
	if err := certs.Verify(certs.KeyPair{Cert: app.Data[certs.CertKey], Key: app.Data[certs.KeyKey]}, ca.Data[certs.CertKey], false, true, leaf.NotBefore.Add(1)); err != nil {
		t.Errorf("the application's certificate does not chain to the cluster's CA: %v", err)
	}
	if len(app.Data[certs.CAKey]) == 0 || len(app.Data["ca.key"]) != 0 || app.Labels[v1alpha1.LabelClientCertificate] != "app" {
		t.Errorf("Secret etcd-client-app: keys %v, labels %v; want tls.crt, tls.key and ca.crt, labelled with the entry", keys(app.Data), app.Labels)
	}
	eventually(t, timeout, "the members reading the revocation list", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := etcdArg(sts, "--client-crl-file"); got != "/etc/etcd/tls/crl/crl.der" {
			return fmt.Errorf("--client-crl-file=%q", got)
		}
		if !slices.ContainsFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "client-crl" && v.Secret != nil && v.Secret.SecretName == "etcd-crl"
		}) {
			return fmt.Errorf("no client-crl volume of Secret etcd-crl")
		}
		return nil
	})
	if revokedOf(t, ns) == nil {
		t.Fatal("the revocation list holds no entries key")
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS.Client.Certificates = []v1alpha1.ClientCertificate{{Name: "reports"}}
	})
	eventually(t, timeout, "Secret etcd-client-app emptied", func() error { return retired(ns, "etcd-client-app") })
	revoked := revokedOf(t, ns)
	if !slices.ContainsFunc(revoked, func(r certificates.Revoked) bool { return r.Serial == certs.Serial(leaf) && r.Name == "app" }) {
		t.Fatalf("the list %+v lacks the removed certificate's serial %s", revoked, certs.Serial(leaf))
	}
	crl := &corev1.Secret{}
	if err := getObject(ns, "etcd-crl", crl); err != nil {
		t.Fatal(err)
	}
	if len(crl.Data[certs.CRLKey]) == 0 {
		t.Fatal("no crl.der")
	}
	if err := getObject(ns, "etcd-client-reports", &corev1.Secret{}); err != nil {
		t.Errorf("the other application's Secret: %v", err)
	}

	// The last entry removed: the list stays, and so does the members' flag.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.TLS.Client.Certificates = nil })
	eventually(t, timeout, "Secret etcd-client-reports emptied", func() error { return retired(ns, "etcd-client-reports") })
	eventually(t, timeout, "a pass over the spec without certificates", func() error {
		if c := getCluster(t, ns); c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("observedGeneration %d of %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})
	if c := getCluster(t, ns); !c.Status.ClientRevocationList {
		t.Errorf("status.clientRevocationList is false with the list in place")
	}
	sts := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", sts); err != nil {
		t.Fatal(err)
	}
	if got := etcdArg(sts, "--client-crl-file"); got == "" {
		t.Errorf("the members stopped reading the list with its last entry removed: a revoked certificate would be taken again")
	}
	if n := len(revokedOf(t, ns)); n != 2 {
		t.Errorf("the list holds %d entries, want both removed certificates", n)
	}

	// Status lost (a restore of the object, a status written by hand): the members keep
	// reading the list, since a pass takes it from the list's Secret.
	c := getCluster(t, ns)
	c.Status.ClientRevocationList = false
	if err := env.Client.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	poke(t, ns)
	eventually(t, timeout, "status.clientRevocationList recorded again", func() error {
		if !getCluster(t, ns).Status.ClientRevocationList {
			return fmt.Errorf("still false")
		}
		return nil
	})
	if err := getObject(ns, "etcd", sts); err != nil {
		t.Fatal(err)
	}
	if got := etcdArg(sts, "--client-crl-file"); got == "" {
		t.Errorf("the members stopped reading the list when status forgot it")
	}

	// Listed again: a new certificate into the emptied Secret.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS.Client.Certificates = []v1alpha1.ClientCertificate{{Name: "app"}}
	})
	eventually(t, timeout, "a new certificate in Secret etcd-client-app", func() error {
		s := &corev1.Secret{}
		if err := getObject(ns, "etcd-client-app", s); err != nil {
			return err
		}
		again, err := certs.Parse(s.Data[certs.CertKey])
		if err != nil {
			return err
		}
		if certs.Serial(again) == certs.Serial(leaf) || s.Labels[v1alpha1.LabelClientCertificate] != "app" || s.Annotations[v1alpha1.AnnotationRevoked] != "" {
			return fmt.Errorf("serial %s, labels %v, annotations %v", certs.Serial(again), s.Labels, s.Annotations)
		}
		return nil
	})
}

// retired says why the Secret name of an application certificate is not retired: its key
// and certificate removed, no longer labelled as an application's, annotated as revoked.
func retired(ns, name string) error {
	s := &corev1.Secret{}
	if err := getObject(ns, name, s); err != nil {
		return err
	}
	if len(s.Data[certs.KeyKey]) != 0 || len(s.Data[certs.CertKey]) != 0 || len(s.Data[certs.CAKey]) != 0 {
		return fmt.Errorf("still holds keys %v", keys(s.Data))
	}
	if _, ok := s.Labels[v1alpha1.LabelClientCertificate]; ok || s.Annotations[v1alpha1.AnnotationRevoked] == "" {
		return fmt.Errorf("labels %v, annotations %v", s.Labels, s.Annotations)
	}
	return nil
}

// revokedOf is the entries of the revocation list's Secret (nil when it has none).
func revokedOf(t *testing.T, ns string) []certificates.Revoked {
	t.Helper()
	s := &corev1.Secret{}
	if err := getObject(ns, "etcd-crl", s); err != nil {
		t.Fatal(err)
	}
	b, ok := s.Data[certs.RevokedKey]
	if !ok {
		return nil
	}
	out := []certificates.Revoked{}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

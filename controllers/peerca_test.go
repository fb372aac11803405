package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// TestPeerCertificatesHaveACAOfTheirOwn (issue 26): a new cluster's peer certificate comes
// from a CA of its own (etcd-peer-ca), its client side's certificates from another
// (etcd-ca), and each side's Secrets carry only their CA as the trust bundle the members
// mount, so the peer port trusts no client certificate and the client port no peer
// certificate.
func TestPeerCertificatesHaveACAOfTheirOwn(t *testing.T) {
	ns := env.Namespace(t)
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
	})
	got := map[string]*corev1.Secret{}
	for _, name := range []string{"etcd-ca", "etcd-peer-ca", "etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"} {
		got[name] = &corev1.Secret{}
		eventually(t, timeout, "Secret "+name, func() error { return getObject(ns, name, got[name]) })
	}
	clientCA, peerCA := got["etcd-ca"].Data[certs.CertKey], got["etcd-peer-ca"].Data[certs.CertKey]
	for _, tc := range []struct {
		secret    string
		signer    []byte
		other     []byte
		server    bool
		signerFor string
	}{
		{"etcd-peer-tls", peerCA, clientCA, true, "the peer CA"},
		{"etcd-server-tls", clientCA, peerCA, true, "the client side's CA"},
		{"etcd-operator-client-tls", clientCA, peerCA, false, "the client side's CA"},
	} {
		s := got[tc.secret]
		pair := certs.KeyPair{Cert: s.Data[certs.CertKey], Key: s.Data[certs.KeyKey]}
		leaf, err := certs.Parse(pair.Cert)
		if err != nil {
			t.Fatal(err)
		}
		at := leaf.NotBefore.Add(time.Second)
		if err := certs.Verify(pair, tc.signer, tc.server, true, at); err != nil {
			t.Errorf("%s is not signed by %s: %v", tc.secret, tc.signerFor, err)
		}
		if err := certs.Verify(pair, tc.other, tc.server, true, at); err == nil {
			t.Errorf("%s chains to the other side's CA too", tc.secret)
		}
		if !certs.SameBundle(s.Data[certs.CAKey], tc.signer) {
			t.Errorf("%s's ca.crt is not %s alone: the members would trust the other side's certificates", tc.secret, tc.signerFor)
		}
	}
	if slices.Equal(clientCA, peerCA) {
		t.Fatal("one CA in both Secrets")
	}
}

// TestClusterOnOneCAKeepsIt: a cluster whose peer certificate the one CA signed (issued
// before the peer side had a CA of its own) keeps that CA for its peers: no peer CA is
// created, and its peer certificate, issued again, chains to etcd-ca. A new peer CA would
// make its members refuse each other.
func TestClusterOnOneCAKeepsIt(t *testing.T) {
	ns := env.Namespace(t)
	ca, err := certs.NewCA(fmt.Sprintf("etcd-pilot CA of %s/etcd", ns), time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Names the members' certificate no longer covers: the operator issues it again, from
	// the CA its issuer names.
	peer, err := certs.Issue(ca, certs.Request{CommonName: "etcd-peer", DNSNames: []string{"old.example"}, Server: true, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{v1alpha1.LabelCluster: "etcd", v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}
	for name, data := range map[string]map[string][]byte{
		"etcd-ca":       {certs.CertKey: ca.Cert, certs.KeyKey: ca.Key, certs.CAKey: ca.Cert},
		"etcd-peer-tls": {certs.CertKey: peer.Cert, certs.KeyKey: peer.Key, certs.CAKey: ca.Cert},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Type: corev1.SecretTypeTLS, Data: data}
		if err := env.Client.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}
	})
	eventually(t, timeout, "the peer certificate issued again from etcd-ca", func() error {
		s := &corev1.Secret{}
		if err := getObject(ns, "etcd-peer-tls", s); err != nil {
			return err
		}
		leaf, err := certs.Parse(s.Data[certs.CertKey])
		if err != nil {
			return err
		}
		if slices.Contains(leaf.DNSNames, "old.example") {
			return fmt.Errorf("still the old certificate")
		}
		return certs.Verify(certs.KeyPair{Cert: s.Data[certs.CertKey], Key: s.Data[certs.KeyKey]}, ca.Cert, true, true, time.Now())
	})
	eventually(t, timeout, "Secret etcd-server-tls", func() error { return getObject(ns, "etcd-server-tls", &corev1.Secret{}) })
	if err := getObject(ns, "etcd-peer-ca", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Secret etcd-peer-ca: %v, want none for a cluster on one CA", err)
	}
}

package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestIssueVerifyAndRenewal(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("test-ca", now, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca", now, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{CommonName: "etcd", DNSNames: []string{"*.etcd.ns.svc", "etcd-client.ns.svc"}, Server: true, Client: true, Validity: 90 * 24 * time.Hour}
	leaf, err := Issue(ca, req, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(leaf, ca.Cert, true, true, now); err != nil {
		t.Fatalf("leaf does not verify against its CA: %v", err)
	}
	if err := Verify(leaf, other.Cert, true, false, now); err == nil {
		t.Fatal("leaf verifies against a CA that did not sign it")
	}
	// A bundle with both CAs (the overlap of a CA rotation) trusts it.
	if err := Verify(leaf, append(append([]byte{}, other.Cert...), ca.Cert...), true, true, now); err != nil {
		t.Fatalf("leaf does not verify against a bundle holding its CA: %v", err)
	}
	serverOnly, err := Issue(ca, Request{CommonName: "s", Server: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(serverOnly, ca.Cert, true, true, now); err == nil {
		t.Fatal("a server-only certificate verifies for client authentication")
	}
	if err := Verify(KeyPair{Cert: leaf.Cert, Key: serverOnly.Key}, ca.Cert, true, false, now); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Fatalf("mismatched key: %v", err)
	}
	c, err := Parse(leaf.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if !Covers(c, req) || Covers(c, Request{CommonName: "etcd", DNSNames: []string{"x.ns.svc"}}) {
		t.Fatal("Covers is wrong")
	}
	if DueForRenewal(c, now.Add(59*24*time.Hour), 0) {
		t.Fatal("due for renewal before two thirds of its life")
	}
	if !DueForRenewal(c, now.Add(61*24*time.Hour), 0) {
		t.Fatal("not due for renewal after two thirds of its life")
	}
	if !DueForRenewal(c, now.Add(80*24*time.Hour), 11*24*time.Hour) || DueForRenewal(c, now.Add(70*24*time.Hour), 11*24*time.Hour) {
		t.Fatal("renewBefore is not honoured")
	}
	// A leaf never outlives its CA.
	short, _ := NewCA("short", now, time.Hour)
	l2, err := Issue(short, Request{CommonName: "x", Server: true, Validity: 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := Parse(l2.Cert); c2.NotAfter.After(now.Add(time.Hour)) {
		t.Fatalf("leaf outlives its CA: %v", c2.NotAfter)
	}
	if !SameBundle(ca.Cert, ca.Cert) || SameBundle(ca.Cert, other.Cert) {
		t.Fatal("SameBundle is wrong")
	}
}

// A leaf signed by an intermediate CA, with the intermediate after it in tls.crt (as
// cert-manager writes it) and only the root in the bundle, verifies; without the intermediate
// it does not.
func TestVerifyThroughAnIntermediate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLen: 1}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	midKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	midTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "intermediate"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	midDER, err := x509.CreateCertificate(rand.Reader, midTmpl, root, &midKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	mid, err := encode(midDER, midKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := Issue(mid, Request{CommonName: "etcd-peer", Server: true, Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	rootPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER})
	withChain := KeyPair{Cert: append(append([]byte{}, leaf.Cert...), mid.Cert...), Key: leaf.Key}
	if err := Verify(withChain, rootPEM, true, true, now); err != nil {
		t.Fatalf("leaf with its intermediate: %v", err)
	}
	if err := Verify(leaf, rootPEM, true, true, now); err == nil {
		t.Fatal("a leaf without its intermediate verified against the root alone")
	}
}

// Package certs issues and inspects the X.509 material of etcd-pilot's TLS: a CA per cluster
// and the leaf certificates signed by it (members' peer and server certificates, the
// operator's client certificate). Keys are ECDSA P-256. The package does no Kubernetes I/O;
// it reads its randomness from crypto/rand.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Keys of a kubernetes.io/tls Secret, with the trust bundle under ca.crt as cert-manager
// writes it.
const (
	// CRLKey and RevokedKey are the revocation list's Secret's keys: the list in DER (what
	// the members read) and the entries it is written from (JSON).
	CRLKey     = "crl.der"
	RevokedKey = "revoked"
	CertKey    = "tls.crt"
	KeyKey     = "tls.key"
	CAKey      = "ca.crt"
)

// Keys of the next CA in the CA Secret during a rotation.
const (
	NextCertKey = "next.crt"
	NextKeyKey  = "next.key"
)

// KeyPair is a PEM certificate and its PEM private key.
type KeyPair struct {
	Cert []byte
	Key  []byte
}

// backdate covers clocks a little behind the issuer's.
const backdate = 5 * time.Minute

// NewCA creates a self-signed CA valid from now (less a few minutes) for validity.
func NewCA(commonName string, now time.Time, validity time.Duration) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to generate a CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"etcd-pilot"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to create the CA certificate: %w", err)
	}
	return encode(der, key)
}

// Request is a leaf certificate to issue.
type Request struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// Server and Client set the extended key usages (both for a peer certificate, which etcd
	// presents when it accepts and when it dials).
	Server, Client bool
	Validity       time.Duration
}

// Issue signs a leaf certificate for r with ca, valid from now (less a few minutes).
func Issue(ca KeyPair, r Request, now time.Time) (KeyPair, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to read the CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to generate a key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	notAfter := now.Add(r.Validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: r.CommonName},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
	}
	if r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if r.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to sign the certificate for %s: %w", r.CommonName, err)
	}
	return encode(der, key)
}

// Parse returns the first certificate of a PEM bundle.
func Parse(pemBytes []byte) (*x509.Certificate, error) {
	all, err := ParseAll(pemBytes)
	if err != nil {
		return nil, err
	}
	return all[0], nil
}

// ParseAll returns every certificate of a PEM bundle; it fails on an empty bundle.
func ParseAll(pemBytes []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := pemBytes
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("failed to parse a certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return out, nil
}

// Fingerprint is the hex SHA-256 of a certificate's DER bytes.
func Fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// Verify checks that the leaf of pair chains to one of the CAs in bundle for the usage asked
// (server, client or both) at now, and that its key matches it. Certificates after the leaf
// in pair.Cert are intermediates (as cert-manager writes tls.crt when its issuer's CA is not
// a root): TLS peers receive them with the leaf, so the chain may go through them.
func Verify(pair KeyPair, bundle []byte, server, client bool, now time.Time) error {
	if _, err := tls.X509KeyPair(pair.Cert, pair.Key); err != nil {
		return fmt.Errorf("certificate and key do not match: %w", err)
	}
	chain, err := ParseAll(pair.Cert)
	if err != nil {
		return err
	}
	leaf := chain[0]
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	cas, err := ParseAll(bundle)
	if err != nil {
		return fmt.Errorf("no CA: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	var usages []x509.ExtKeyUsage
	if server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	// x509 accepts any one of KeyUsages; check each one asked for on its own.
	for _, u := range usages {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return err
		}
	}
	return nil
}

// Covers reports whether c names every DNS name and IP of r (extra names are fine).
func Covers(c *x509.Certificate, r Request) bool {
	for _, n := range r.DNSNames {
		if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	for _, ip := range r.IPs {
		if !slices.ContainsFunc(c.IPAddresses, func(x net.IP) bool { return x.Equal(ip) }) {
			return false
		}
	}
	return c.Subject.CommonName == r.CommonName
}

// DueForRenewal reports whether c has used up at least two thirds of its lifetime at now (the
// share cert-manager renews at by default), or expires within renewBefore when that is set.
func DueForRenewal(c *x509.Certificate, now time.Time, renewBefore time.Duration) bool {
	if renewBefore > 0 {
		return !now.Before(c.NotAfter.Add(-renewBefore))
	}
	life := c.NotAfter.Sub(c.NotBefore)
	return !now.Before(c.NotBefore.Add(life * 2 / 3))
}

// SameBundle reports whether two PEM bundles hold the same certificates in the same order.
func SameBundle(a, b []byte) bool {
	ca, errA := ParseAll(a)
	cb, errB := ParseAll(b)
	if errA != nil || errB != nil || len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i].Raw, cb[i].Raw) {
			return false
		}
	}
	return true
}

func parsePair(p KeyPair) (*x509.Certificate, any, error) {
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	return c, pair.PrivateKey, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (KeyPair, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("failed to encode a key: %w", err)
	}
	return KeyPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("failed to draw a serial number: %w", err)
	}
	return s, nil
}

// RevocationList is a certificate revocation list in DER (etcd's --client-crl-file reads
// DER), signed by ca, listing the serial numbers given in hexadecimal, as revoked at now.
// number orders lists (a CRL's number grows with each one issued). etcd reads only the
// serial numbers; the signature and the next update are for other readers.
func RevocationList(ca KeyPair, serials []string, number int64, now time.Time) ([]byte, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return nil, fmt.Errorf("failed to read the CA: %w", err)
	}
	signer, ok := caKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA's key cannot sign")
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: now.Add(-backdate), NextUpdate: now.Add(7 * 24 * time.Hour)}
	for _, s := range serials {
		n, ok := new(big.Int).SetString(s, 16)
		if !ok {
			return nil, fmt.Errorf("serial number %q is not hexadecimal", s)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: now})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, caCert, signer)
	if err != nil {
		return nil, fmt.Errorf("failed to sign the revocation list: %w", err)
	}
	return der, nil
}

// Serial is a certificate's serial number in hexadecimal, as RevocationList takes it.
func Serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

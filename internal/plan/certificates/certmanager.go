package certificates

import (
	"fmt"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// CertManagerProblem says why the Secret cert-manager keeps for l cannot be used ("" when it
// can): missing, invalid, or not naming what the Certificate asks for. ready is the live
// Certificate's Ready condition as text (see observe.ReadyText), for the messages; m is the
// Secret's material.
func CertManagerProblem(namespace string, l Leaf, ready string, m Material, found bool, now time.Time) (problem string, waits bool) {
	where := fmt.Sprintf("Secret %s/%s of Certificate %s/%s", namespace, l.Secret, namespace, l.Secret)
	switch {
	case !found:
		return fmt.Sprintf("%s does not exist yet: cert-manager has not issued it (%s)", where, ready), true
	default:
		if err := certs.Verify(certs.KeyPair{Cert: m.Cert, Key: m.Key}, m.CA, l.Request.Server, l.Request.Client, now); err != nil {
			return fmt.Sprintf("%s cannot be used: %v (it needs tls.crt, tls.key and ca.crt with the issuer's CA; %s)", where, err, ready), false
		}
		leaf, _ := certs.Parse(m.Cert)
		if !certs.Covers(leaf, l.Request) {
			return fmt.Sprintf("%s does not name everything the Certificate asks for yet (common name %s, DNS names and IP addresses of the members): cert-manager issues it again (%s)", where, l.Request.CommonName, ready), true
		}
	}
	return "", false
}

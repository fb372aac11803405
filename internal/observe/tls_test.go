package observe

import (
	"strings"
	"testing"
	"time"

	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
)

// What the operator says about the Secret cert-manager keeps: missing, invalid, stale names,
// or usable.
func TestCertManagerProblem(t *testing.T) {
	now := time.Now()
	ca, err := certs.NewCA("issuer CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("another CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req := certs.Request{CommonName: "etcd-peer", DNSNames: []string{"*.etcd.ns.svc"}, Server: true, Client: true, Validity: time.Hour}
	leaf := certificates.Leaf{Secret: "etcd-peer-tls", Request: req}
	issue := func(from certs.KeyPair, r certs.Request) certificates.Material {
		p, err := certs.Issue(from, r, now)
		if err != nil {
			t.Fatal(err)
		}
		return certificates.Material{Cert: p.Cert, Key: p.Key, CA: from.Cert}
	}
	notReady := &unstr.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Issuing", "status": "True"},
		map[string]any{"type": "Ready", "status": "False", "reason": "DoesNotExist", "message": "Issuing certificate as Secret does not exist"},
	}}}}
	good := issue(ca, req)
	serverOnly := req
	serverOnly.Client = false
	fewerNames := req
	fewerNames.DNSNames = nil
	for _, tc := range []struct {
		name  string
		cert  *unstr.Unstructured
		m     certificates.Material
		found bool
		want  []string // "" for none
		// waits: cert-manager is expected to fix it by itself (Reconciling, not Stalled).
		waits bool
	}{
		{name: "just created, no Secret", want: []string{"Secret ns/etcd-peer-tls of Certificate ns/etcd-peer-tls does not exist yet", "Certificate just created"}, waits: true},
		{name: "no Secret, not ready", cert: notReady, want: []string{"does not exist yet", "Ready=False, DoesNotExist: Issuing certificate as Secret does not exist"}, waits: true},
		{name: "no Secret, no status", cert: &unstr.Unstructured{Object: map[string]any{}}, want: []string{"is cert-manager's controller running?"}, waits: true},
		{name: "usable", cert: notReady, m: good, found: true},
		{name: "no ca.crt", m: certificates.Material{Cert: good.Cert, Key: good.Key}, found: true, want: []string{"cannot be used", "no CA"}},
		{name: "another CA in ca.crt", m: certificates.Material{Cert: good.Cert, Key: good.Key, CA: other.Cert}, found: true, want: []string{"cannot be used"}},
		{name: "key of another certificate", m: certificates.Material{Cert: good.Cert, Key: issue(ca, req).Key, CA: ca.Cert}, found: true, want: []string{"cannot be used", "do not match"}},
		{name: "server usage only", m: issue(ca, serverOnly), found: true, want: []string{"cannot be used"}},
		{name: "names not yet covered", cert: notReady, m: issue(ca, fewerNames), found: true, want: []string{"does not name everything", "cert-manager issues it again", "Ready=False"}, waits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, waits := certificates.CertManagerProblem("ns", leaf, ReadyText(tc.cert), tc.m, tc.found, now)
			if waits != tc.waits {
				t.Fatalf("waits %v, want %v (problem %q)", waits, tc.waits, got)
			}
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("problem %q, want none", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("problem %q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "BEGIN ") {
				t.Fatalf("problem carries PEM: %q", got)
			}
		})
	}
}

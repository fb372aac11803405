package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func TestTLSAdmission(t *testing.T) {
	tlsSpec := func(tl *v1alpha1.TLSSpec) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) { s.TLS = tl }
	}
	runCreateCases(t, []createCase{
		{name: "operator source on both sides accepted", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}})},
		{name: "user Secrets accepted", spec: tlsSpec(&v1alpha1.TLSSpec{
			Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "p"},
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "s", OperatorSecretName: "o"}})},
		{name: "peer Secret source without a name refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceSecret}}),
			wantErr: []string{"tls.peer.secretName is required"}},
		{name: "client Secret source without the operator's Secret refused", spec: tlsSpec(&v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "s"}}),
			wantErr: []string{"tls.client.operatorSecretName"}},
		{name: "unknown source refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: "Vault"}}),
			wantErr: []string{"spec.tls.peer.source", "Operator", "Secret"}},
		{name: "short certificate duration refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, CertificateDuration: ptr.To(metaDuration("5m"))}),
			wantErr: []string{"at least 10m"}},
		{name: "renewBefore longer than the duration refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, CertificateDuration: ptr.To(metaDuration("10m")), RenewBefore: ptr.To(metaDuration("10m"))}),
			wantErr: []string{"renewBefore must be shorter"}},
		{name: "auth with spec.insecure and no client TLS refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Auth = &v1alpha1.AuthSpec{Enabled: true}
			s.Insecure = true
		}, wantErr: []string{"auth.enabled needs client TLS with clientCertAuth"}},
		// The secure default's client TLS (the operator's certificate, client certificates
		// required): nothing to write. A cluster created before secure defaults without
		// tls.client is plain, and the auth planner says it waits for the certificate.
		{name: "auth on the secure default accepted", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Auth = &v1alpha1.AuthSpec{Enabled: true} }},
		{name: "auth without client certificates refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Auth = &v1alpha1.AuthSpec{Enabled: true}
			s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{ClientCertAuth: ptr.To(false)}}
		}, wantErr: []string{"auth.enabled needs client TLS with clientCertAuth"}},
		{name: "auth with client TLS accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Auth = &v1alpha1.AuthSpec{Enabled: true}
			s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}}
		}},
		{name: "auth off without TLS accepted", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Auth = &v1alpha1.AuthSpec{} }},
		{name: "cert-manager issuers on both sides accepted", spec: tlsSpec(&v1alpha1.TLSSpec{
			Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}},
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "root", Kind: v1alpha1.IssuerKindClusterIssuer}}})},
		{name: "cert-manager source without an issuer refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager}}),
			wantErr: []string{"tls.peer.issuerRef goes with source CertManager"}},
		{name: "issuer with the operator source refused", spec: tlsSpec(&v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}}}),
			wantErr: []string{"tls.client.issuerRef goes with source CertManager"}},
		{name: "issuer of an unknown kind refused", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca", Kind: "Vault"}}}),
			wantErr: []string{"spec.tls.peer.issuerRef.kind", "ClusterIssuer"}},
		{name: "cert-manager with a duration under 1h refused", spec: tlsSpec(&v1alpha1.TLSSpec{
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}}, CertificateDuration: ptr.To(metaDuration("30m"))}),
			wantErr: []string{"with source CertManager, tls.certificateDuration must be at least 1h"}},
		{name: "cert-manager with renewBefore under 5m refused", spec: tlsSpec(&v1alpha1.TLSSpec{
			Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: &v1alpha1.IssuerReference{Name: "ca"}}, RenewBefore: ptr.To(metaDuration("1m"))}),
			wantErr: []string{"tls.renewBefore at least 5m"}},
		{name: "a 30m duration with the operator source accepted", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, CertificateDuration: ptr.To(metaDuration("30m"))})},
		{name: "renewBefore within the duration accepted", spec: tlsSpec(&v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, CertificateDuration: ptr.To(metaDuration("10m")), RenewBefore: ptr.To(metaDuration("9m45s"))})},
	})

	ns := env.Namespace(t)
	for i, tc := range []struct {
		name    string
		create  *v1alpha1.TLSSpec
		auth    bool
		update  func(*v1alpha1.EtcdClusterSpec)
		wantErr []string
	}{
		{name: "peer TLS added to a live cluster accepted (the operator moves the peer URLs)", update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}} }},
		{name: "peer TLS removed from a live cluster accepted", create: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }},
		{name: "client TLS removed without acceptPlain refused", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }, wantErr: []string{"tls.client can be removed only from acceptPlain: true"}},
		{name: "client TLS removed from acceptPlain accepted", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{AcceptPlain: true}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }},
		{name: "client TLS removed beside peer TLS from acceptPlain accepted", create: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{AcceptPlain: true}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client = nil }},
		{name: "client TLS added accepted", update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}} }},
		{name: "client TLS added with acceptPlain accepted", update: func(s *v1alpha1.EtcdClusterSpec) {
			s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{AcceptPlain: true}}
		}},
		{name: "acceptPlain turned on and off accepted", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client.AcceptPlain = true }},
		{name: "acceptPlain under auth refused", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}}, auth: true,
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client.AcceptPlain = true }, wantErr: []string{"acceptPlain cannot be set while auth is enabled"}},
		{name: "operator certificate source changed under auth refused", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}},
			auth: true, update: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS.Client.Source, s.TLS.Client.SecretName, s.TLS.Client.OperatorSecretName = v1alpha1.TLSSourceSecret, "s", "o"
			}, wantErr: []string{"cannot change while auth is enabled"}},
		{name: "operator certificate source changed without auth accepted", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}},
			update: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS.Client.Source, s.TLS.Client.SecretName, s.TLS.Client.OperatorSecretName = v1alpha1.TLSSourceSecret, "s", "o"
			}},
		{name: "extra SANs changed accepted", create: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS.ExtraSANs = []string{"etcd.example"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(100+i), func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS = tc.create
				if tc.auth {
					s.Auth = &v1alpha1.AuthSpec{Enabled: true}
				}
			})
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatal(err)
			}
			tc.update(&ec.Spec)
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

func metaDuration(s string) metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: d}
}

// TestClientIdentityKeptWhileAuthMayBeOn: the operator authenticates to etcd by its client
// certificate, so tls.client (with clientCertAuth) cannot go while etcd's authentication may
// be on: status.authEnabled says so, or, before the operator read it, spec.auth was set.
// Removing spec.auth alone leaves etcd as it is and the operator keeps its identity.
func TestClientIdentityKeptWhileAuthMayBeOn(t *testing.T) {
	ns := env.Namespace(t)
	const refused = "tls.client (with clientCertAuth) cannot be removed while etcd's authentication may be on"
	plainable := func() *v1alpha1.TLSSpec {
		return &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{AcceptPlain: true}}
	}
	for i, tc := range []struct {
		name string
		// create is the spec stored first; authEnabled, when set, is written to status
		// (as the operator reports what etcd said) before the update.
		create      func(*v1alpha1.EtcdClusterSpec)
		authEnabled *bool
		update      func(*v1alpha1.EtcdClusterSpec)
		wantErr     []string
	}{
		{name: "tls.client removed while etcd reports auth on refused",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = plainable() }, authEnabled: ptr.To(true),
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }, wantErr: []string{refused, "spec.auth.enabled: false"}},
		{name: "tls.client removed once etcd reports auth off accepted",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = plainable(); s.Auth = &v1alpha1.AuthSpec{} }, authEnabled: ptr.To(false),
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }},
		{name: "tls.client and spec.auth removed together before etcd's auth was read refused",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = plainable(); s.Auth = &v1alpha1.AuthSpec{} },
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil; s.Auth = nil }, wantErr: []string{refused}},
		{name: "tls.client removed with auth.enabled false before etcd's auth was read refused",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = plainable(); s.Auth = &v1alpha1.AuthSpec{} },
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }, wantErr: []string{refused}},
		{name: "auth turned off and tls.client removed in one edit refused",
			create: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}}
				s.Auth = &v1alpha1.AuthSpec{Enabled: true}
			},
			update:  func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil; s.Auth = nil },
			wantErr: []string{refused}},
		{name: "clientCertAuth turned off while etcd reports auth on refused",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}} }, authEnabled: ptr.To(true),
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client.ClientCertAuth = ptr.To(false) }, wantErr: []string{refused}},
		{name: "spec.auth removed while etcd reports auth on accepted (the operator keeps its certificate)",
			create: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}}
				s.Auth = &v1alpha1.AuthSpec{Enabled: true}
			}, authEnabled: ptr.To(true),
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Auth = nil }},
		{name: "tls.client removed without auth ever set accepted",
			create: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = plainable() },
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(i), tc.create)
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatal(err)
			}
			if tc.authEnabled != nil {
				ec.Status.AuthEnabled = tc.authEnabled
				if err := env.Client.Status().Update(reqCtx(t), ec); err != nil {
					t.Fatalf("failed to set status.authEnabled: %v", err)
				}
			}
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatal(err)
			}
			tc.update(&ec.Spec)
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

// TestInsecureDoesNotDropClientTLSAtOnce: spec.insecure on a cluster whose client port
// serves TLS by default (status.security TLS, no spec.tls.client) would switch its clients to
// plain HTTP in one step; it is refused, as removing tls.client is without acceptPlain. With
// tls.client written (acceptPlain: the clients move first), or on a cluster that serves plain
// already (created before secure defaults), it is accepted.
func TestInsecureDoesNotDropClientTLSAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	const refused = "spec.insecure cannot be set on a cluster whose client port serves TLS by default"
	for i, tc := range []struct {
		name     string
		create   func(*v1alpha1.EtcdClusterSpec)
		security v1alpha1.SecurityMode
		update   func(*v1alpha1.EtcdClusterSpec)
		wantErr  []string
	}{
		{name: "on the secure default refused", security: v1alpha1.SecurityTLS,
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Insecure = true }, wantErr: []string{refused, "acceptPlain: true"}},
		{name: "with tls.client acceptPlain accepted", security: v1alpha1.SecurityTLS,
			create: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{AcceptPlain: true}}
			},
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Insecure = true }},
		{name: "on a plain cluster from before secure defaults accepted", security: v1alpha1.SecurityPlain,
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Insecure = true }},
		{name: "before the operator reported security accepted",
			update: func(s *v1alpha1.EtcdClusterSpec) { s.Insecure = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(100+i), tc.create)
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatal(err)
			}
			if tc.security != "" {
				ec.Status.Security = tc.security
				if err := env.Client.Status().Update(reqCtx(t), ec); err != nil {
					t.Fatalf("failed to set status.security: %v", err)
				}
			}
			if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), ec); err != nil {
				t.Fatal(err)
			}
			tc.update(&ec.Spec)
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

// TestOperatorIdentityKeptUnderAuthOnTheSecureDefault: with auth on and the secure default's
// client TLS (no tls.client written: source Operator), writing tls.client with another
// source would change the operator's certificate, and its user in etcd: refused, as a
// written tls.client's source change is.
func TestOperatorIdentityKeptUnderAuthOnTheSecureDefault(t *testing.T) {
	ns := env.Namespace(t)
	const refused = "tls.client.source and tls.client.operatorSecretName cannot change while auth is enabled"
	authOn := func(s *v1alpha1.EtcdClusterSpec) { s.Auth = &v1alpha1.AuthSpec{Enabled: true} }
	for i, tc := range []struct {
		name    string
		create  func(*v1alpha1.EtcdClusterSpec)
		update  func(*v1alpha1.EtcdClusterSpec)
		wantErr []string
	}{
		{name: "the user's Secret written over the default refused", create: authOn,
			update: func(s *v1alpha1.EtcdClusterSpec) {
				s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "s", OperatorSecretName: "o"}}
			}, wantErr: []string{refused}},
		{name: "the default written out (source Operator) accepted", create: authOn,
			update: func(s *v1alpha1.EtcdClusterSpec) { s.TLS = &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := newCluster(ns, objectName(200+i), tc.create)
			if err := env.Client.Create(reqCtx(t), ec); err != nil {
				t.Fatal(err)
			}
			tc.update(&ec.Spec)
			checkAdmission(t, env.Client.Update(reqCtx(t), ec), tc.wantErr)
		})
	}
}

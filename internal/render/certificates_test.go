package render

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

func strs(t *testing.T, u *unstr.Unstructured, path ...string) []string {
	t.Helper()
	v, _, err := unstr.NestedStringSlice(u.Object, path...)
	if err != nil {
		t.Fatalf("%v: %v", path, err)
	}
	return v
}

func str(u *unstr.Unstructured, path ...string) string {
	v, _, _ := unstr.NestedString(u.Object, path...)
	return v
}

// The Certificates ask cert-manager for what the Operator source issues: the same Secrets,
// common names, DNS names and IPs, usages, lifetimes, with the side's issuer.
func TestCertManagerCertificates(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mutate     func(*v1alpha1.TLSSpec)
		wantSecret []string
		check      func(t *testing.T, byName map[string]*unstr.Unstructured)
	}{
		{name: "both sides", wantSecret: []string{"etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"},
			check: func(t *testing.T, by map[string]*unstr.Unstructured) {
				peer, server, op := by["etcd-peer-tls"], by["etcd-server-tls"], by["etcd-operator-client-tls"]
				if got := strs(t, peer, "spec", "usages"); !slices.Equal(got, []string{"digital signature", "server auth", "client auth"}) {
					t.Errorf("peer usages %v", got)
				}
				if got := strs(t, op, "spec", "usages"); !slices.Equal(got, []string{"digital signature", "client auth"}) {
					t.Errorf("operator usages %v", got)
				}
				if str(op, "spec", "commonName") != LegacyOperatorCommonName || len(strs(t, op, "spec", "dnsNames")) != 0 {
					t.Errorf("operator certificate: %v", op.Object["spec"])
				}
				dns := strs(t, server, "spec", "dnsNames")
				for _, want := range []string{"*.etcd.ns.svc", "*.etcd.ns.svc.cluster.local", "etcd-client.ns.svc", "etcd.example"} {
					if !slices.Contains(dns, want) {
						t.Errorf("server dnsNames %v lack %s", dns, want)
					}
				}
				if got := strs(t, server, "spec", "ipAddresses"); !slices.Equal(got, []string{"10.0.0.7"}) {
					t.Errorf("server ipAddresses %v", got)
				}
				if str(peer, "spec", "issuerRef", "kind") != "Issuer" || str(peer, "spec", "issuerRef", "group") != "cert-manager.io" || str(peer, "spec", "issuerRef", "name") != "ca" {
					t.Errorf("peer issuerRef defaults: %v", peer.Object["spec"])
				}
				if str(server, "spec", "issuerRef", "kind") != "ClusterIssuer" || str(server, "spec", "issuerRef", "name") != "root" {
					t.Errorf("server issuerRef: %v", server.Object["spec"])
				}
				for name, u := range by {
					if str(u, "spec", "secretName") != name || str(u, "spec", "duration") != "2160h0m0s" || str(u, "spec", "renewBefore") != "" {
						t.Errorf("%s: secretName, duration or renewBefore: %v", name, u.Object["spec"])
					}
					if str(u, "spec", "privateKey", "algorithm") != "ECDSA" || str(u, "spec", "privateKey", "rotationPolicy") != "Always" {
						t.Errorf("%s privateKey: %v", name, u.Object["spec"])
					}
					if l, _, _ := unstr.NestedStringMap(u.Object, "spec", "secretTemplate", "labels"); l[v1alpha1.LabelCluster] != "etcd" || l[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
						t.Errorf("%s: the Secret would not be labelled for the operator's cache: %v", name, l)
					}
					if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Controller == nil || !*refs[0].Controller {
						t.Errorf("%s owner references %+v", name, refs)
					}
					if u.GroupVersionKind() != CertificateGVK || u.GetNamespace() != "ns" {
						t.Errorf("%s: %v in %s", name, u.GroupVersionKind(), u.GetNamespace())
					}
				}
			}},
		{name: "peer only from cert-manager, client from the operator", wantSecret: []string{"etcd-peer-tls"},
			mutate: func(s *v1alpha1.TLSSpec) { s.Client = &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator} }},
		{name: "client only, with lifetimes", wantSecret: []string{"etcd-server-tls", "etcd-operator-client-tls"},
			mutate: func(s *v1alpha1.TLSSpec) {
				s.Peer = nil
				s.CertificateDuration = &metav1.Duration{Duration: 48 * time.Hour}
				s.RenewBefore = &metav1.Duration{Duration: 12 * time.Hour}
			},
			check: func(t *testing.T, by map[string]*unstr.Unstructured) {
				for name, u := range by {
					if str(u, "spec", "duration") != "48h0m0s" || str(u, "spec", "renewBefore") != "12h0m0s" {
						t.Errorf("%s: %v", name, u.Object["spec"])
					}
				}
			}},
		{name: "no side from cert-manager", mutate: func(s *v1alpha1.TLSSpec) {
			s.Peer.Source, s.Peer.IssuerRef = v1alpha1.TLSSourceSecret, nil
			s.Client.Source, s.Client.IssuerRef = "", nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testutil.CertManagerCluster(tc.mutate)
			topo := TopologyOf(c, nil)
			by := map[string]*unstr.Unstructured{}
			var names []string
			_, renewBefore := LeafTimes(c)
			for _, l := range CertManagerLeaves(c, topo) {
				u := CertManagerCertificate(c, l, renewBefore)
				by[u.GetName()] = u
				names = append(names, u.GetName())
			}
			if !slices.Equal(names, tc.wantSecret) {
				t.Fatalf("Certificates %v, want %v", names, tc.wantSecret)
			}
			// The operator issues the other sides: no Secret is asked of both.
			for _, want := range OperatorCertificates(c, topo, SeparatePeerCA) {
				for _, l := range want.Leaves {
					if by[l.Secret] != nil {
						t.Errorf("%s is asked of cert-manager and issued by the operator", l.Secret)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, by)
			}
		})
	}
}

// TestClusterIssuersOnlyWhereTheAdminAllowsThem (issue 26): a tenant's spec.tls naming a
// cluster-scoped issuer is refused unless the operator's administrator allows them; a
// namespaced Issuer always passes.
func TestClusterIssuersOnlyWhereTheAdminAllowsThem(t *testing.T) {
	c := testutil.CertManagerCluster(nil) // client side: ClusterIssuer "root"
	leaves := CertManagerLeaves(c, TopologyOf(c, nil))
	if p := ClusterIssuerProblem(leaves, false); !strings.Contains(p, "ClusterIssuer root") || !strings.Contains(p, "--allow-cluster-issuers") {
		t.Fatalf("a ClusterIssuer, not allowed: %q", p)
	}
	if p := ClusterIssuerProblem(leaves, true); p != "" {
		t.Fatalf("a ClusterIssuer, allowed: %q", p)
	}
	ext := testutil.CertManagerCluster(func(s *v1alpha1.TLSSpec) {
		s.Client.IssuerRef = &v1alpha1.IssuerReference{Name: "pca", Kind: "AWSPCAClusterIssuer", Group: "awspca.cert-manager.io"}
	})
	if p := ClusterIssuerProblem(CertManagerLeaves(ext, TopologyOf(ext, nil)), false); !strings.Contains(p, "AWSPCAClusterIssuer pca") {
		t.Fatalf("an external cluster-scoped issuer, not allowed: %q", p)
	}
	ns := testutil.CertManagerCluster(func(s *v1alpha1.TLSSpec) { s.Client.IssuerRef = &v1alpha1.IssuerReference{Name: "ca"} })
	if p := ClusterIssuerProblem(CertManagerLeaves(ns, TopologyOf(ns, nil)), false); p != "" {
		t.Fatalf("namespaced issuers: %q", p)
	}
}

// TestOperatorCommonNameIsPerCluster: under secure defaults the operator's client certificate
// names its own cluster (etcd-pilot-<hash of namespace/name>), in what the Operator source
// issues and in what cert-manager is asked for, so two clusters on one CA never share the
// operator's etcd user, whatever their names; the same cluster recreated (a new UID) keeps
// it; a cluster created before keeps the name its etcd knows.
func TestOperatorCommonNameIsPerCluster(t *testing.T) {
	legacy := func() *v1alpha1.EtcdCluster {
		return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "team-a", UID: "uid-1"},
			Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}}}
	}
	marked := func(ns, uid string) *v1alpha1.EtcdCluster {
		c := legacy()
		c.Namespace, c.UID = ns, types.UID(uid)
		c.Annotations = map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}
		return c
	}
	a, b := marked("team-a", "6f1c2a9e-0d4b-4e8a-9f3c-1b2d3e4f5a6b"), marked("team-b", "0a9b8c7d-6e5f-4a3b-8c1d-0e9f8a7b6c5d")
	sum := sha256.Sum256([]byte("team-a/etcd"))
	if got := OperatorCommonName(a); got != "etcd-pilot-"+hex.EncodeToString(sum[:16]) {
		t.Errorf("OperatorCommonName = %q, want etcd-pilot- and 32 hex digits", got)
	}
	if OperatorCommonName(a) == OperatorCommonName(b) {
		t.Errorf("two clusters named etcd in two namespaces share the operator's user %q", OperatorCommonName(a))
	}
	if again := marked("team-a", "11111111-2222-3333-4444-555555555555"); OperatorCommonName(again) != OperatorCommonName(a) {
		t.Errorf("the cluster recreated under its name gets another user (%q, then %q): its etcd knows the first", OperatorCommonName(a), OperatorCommonName(again))
	}
	if got := OperatorCommonName(legacy()); got != LegacyOperatorCommonName {
		t.Errorf("a cluster from before secure defaults gets %q, want %q (its etcd knows that user)", got, LegacyOperatorCommonName)
	}
	if n := len(OperatorCommonName(a)); n > 64 {
		t.Errorf("the common name is %d characters: X.509 allows 64", n)
	}
	wants := OperatorCertificates(a, TopologyOf(a, nil), SeparatePeerCA)
	if len(wants) == 0 {
		t.Fatal("no certificates")
	}
	found := false
	for _, l := range wants[0].Leaves {
		if l.Secret == v1alpha1.OperatorTLSSecretName(a.Name) {
			found = l.Request.CommonName == OperatorCommonName(a)
		}
	}
	if !found {
		t.Errorf("the Operator source issues the operator's certificate without the cluster's name: %+v", wants[0].Leaves)
	}
	a.Spec.TLS.Client.Source = v1alpha1.TLSSourceCertManager
	a.Spec.TLS.Client.IssuerRef = &v1alpha1.IssuerReference{Name: "shared", Kind: "ClusterIssuer"}
	found = false
	for _, l := range CertManagerLeaves(a, TopologyOf(a, nil)) {
		if l.Leaf.Secret == v1alpha1.OperatorTLSSecretName(a.Name) {
			found = l.Leaf.Request.CommonName == OperatorCommonName(a)
		}
	}
	if !found {
		t.Errorf("cert-manager is asked for the operator's certificate without the cluster's name")
	}
}

// TestPeerSideHasACAOfItsOwn (issue 26): the Operator source signs the peer certificates
// with a CA of their own and the client side's with another, so no client certificate is one
// the peer port trusts. A cluster whose members run with peer certificates from the one CA
// (issued before) keeps it, so nothing restarts or breaks.
func TestPeerSideHasACAOfItsOwn(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "team-a", UID: "uid-1"},
		Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{},
			Client: &v1alpha1.ClientTLS{Certificates: []v1alpha1.ClientCertificate{{Name: "app"}}}}}}
	secretsOf := func(w certificates.Want) []string {
		var out []string
		for _, l := range w.Leaves {
			out = append(out, l.Secret)
		}
		return out
	}
	topo := TopologyOf(c, nil)
	sep := OperatorCertificates(c, topo, SeparatePeerCA)
	if len(sep) != 2 || sep[0].CASecret != "etcd-ca" || sep[1].CASecret != "etcd-peer-ca" {
		t.Fatalf("separate layout: %d CAs %+v, want etcd-ca then etcd-peer-ca", len(sep), sep)
	}
	if got := secretsOf(sep[0]); !slices.Equal(got, []string{"etcd-server-tls", "etcd-operator-client-tls", "etcd-client-app"}) {
		t.Errorf("the client side's CA signs %v", got)
	}
	if got := secretsOf(sep[1]); !slices.Equal(got, []string{"etcd-peer-tls"}) {
		t.Errorf("the peer CA signs %v, want the peer certificate only", got)
	}
	if sep[0].CASigns != CASignsClient || sep[1].CASigns != CASignsPeer || shared0Signs(c, topo) != "" {
		t.Errorf("CA Secrets record %q and %q (shared %q): a new CA must say which side it signs for", sep[0].CASigns, sep[1].CASigns, shared0Signs(c, topo))
	}
	if sep[0].CACommonName == sep[1].CACommonName || sep[1].CACommonName != PeerCACommonName(c) {
		t.Errorf("CA names %q and %q: the peer certificate's issuer must tell which CA signed it", sep[0].CACommonName, sep[1].CACommonName)
	}
	shared := OperatorCertificates(c, topo, SharedCA)
	if len(shared) != 1 || shared[0].CASecret != "etcd-ca" || len(shared[0].Leaves) != 4 {
		t.Fatalf("shared layout: %+v, want etcd-ca signing all four", shared)
	}
	if got := secretsOf(shared[0]); got[0] != "etcd-peer-tls" {
		t.Errorf("shared layout leaves %v", got)
	}
	peerOnly := c.DeepCopy()
	peerOnly.Spec.TLS.Client = nil
	if w := OperatorCertificates(peerOnly, topo, SeparatePeerCA); len(w) != 1 || w[0].CASecret != "etcd-peer-ca" {
		t.Errorf("peer side only, separate: %+v", w)
	}
	if w := OperatorCertificates(peerOnly, topo, SharedCA); len(w) != 1 || w[0].CASecret != "etcd-ca" {
		t.Errorf("peer side only, shared: %+v", w)
	}
	clientOnly := c.DeepCopy()
	clientOnly.Spec.TLS.Peer = nil
	if w := OperatorCertificates(clientOnly, topo, SeparatePeerCA); len(w) != 1 || w[0].CASecret != "etcd-ca" {
		t.Errorf("client side only: %+v", w)
	}

	for _, tc := range []struct {
		name    string
		peerCA  bool
		issuer  string
		signs   string
		mounted bool
		want    CALayout
	}{
		{name: "a new cluster", want: SeparatePeerCA},
		{name: "both peer Secrets lost, the client side's CA signs for it only", signs: CASignsClient, mounted: true, want: SeparatePeerCA},
		{name: "the peer CA exists", peerCA: true, issuer: CACommonName(c), mounted: true, want: SeparatePeerCA},
		{name: "the peer CA's Secret lost, its certificate names it", issuer: PeerCACommonName(c), mounted: true, want: SeparatePeerCA},
		{name: "peer certificates from the one CA", issuer: CACommonName(c), mounted: true, want: SharedCA},
		{name: "peer certificates from the one CA, not mounted yet", issuer: CACommonName(c), want: SharedCA},
		{name: "members mount a peer Secret that is gone", mounted: true, want: SharedCA},
	} {
		if got := CALayoutOf(c, tc.peerCA, tc.issuer, tc.signs, tc.mounted); got != tc.want {
			t.Errorf("%s: layout %d, want %d", tc.name, got, tc.want)
		}
	}
}

func shared0Signs(c *v1alpha1.EtcdCluster, t Topology) string {
	return OperatorCertificates(c, t, SharedCA)[0].CASigns
}

// TestOperatorKeepsTheNameOfItsCertificate: the operator's certificate keeps the common name
// it has when it is one the operator gives (legacy or the cluster's own), whatever the
// cluster's annotations say now: a changed name would leave the operator without a user in
// an etcd that knows only the current one. A name it does not give is replaced.
func TestOperatorKeepsTheNameOfItsCertificate(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "team-a",
		Annotations: map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}},
		Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}}}}
	own := PerClusterOperatorCommonName(c)
	legacy := c.DeepCopy()
	legacy.Annotations = nil
	for _, tc := range []struct {
		c                       *v1alpha1.EtcdCluster
		current, recorded, want string
	}{
		{c, "", "", own},
		{c, LegacyOperatorCommonName, "", LegacyOperatorCommonName},
		{c, own, "", own},
		{c, "someone", "", own},
		// A cluster from before: its own name once the operator moved to it, even when the
		// certificate's Secret is lost (the CA Secret records the move).
		{legacy, "", "", LegacyOperatorCommonName},
		{legacy, "", own, own},
		{legacy, LegacyOperatorCommonName, own, LegacyOperatorCommonName},
	} {
		c := tc.c
		w := OperatorCertificates(c, TopologyOf(c, nil), SeparatePeerCA)[0]
		KeepOperatorCommonName(c, w.Leaves, tc.current, tc.recorded)
		for _, l := range w.Leaves {
			if l.Secret == v1alpha1.OperatorTLSSecretName(c.Name) && l.Request.CommonName != tc.want {
				t.Errorf("current %q, recorded %q: the operator's certificate is asked as %q, want %q", tc.current, tc.recorded, l.Request.CommonName, tc.want)
			}
			if l.Secret == v1alpha1.ServerTLSSecretName(c.Name) && l.Request.CommonName != "etcd-server" {
				t.Errorf("the server certificate was renamed to %q", l.Request.CommonName)
			}
		}
	}
}

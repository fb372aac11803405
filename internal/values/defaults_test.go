package values

import (
	"k8s.io/utils/ptr"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
)

func TestEffective(t *testing.T) {
	yes := true
	secureTLS := &v1alpha1.TLSSpec{
		Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceOperator},
		Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator, ClientCertAuth: &yes},
	}
	marked := map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}
	peerOnly := &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "p"}}
	np := &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(false)}
	cases := []struct {
		name    string
		ann     map[string]string
		spec    v1alpha1.EtcdClusterSpec
		op      Operator
		wantTLS *v1alpha1.TLSSpec
		wantNP  *v1alpha1.NetworkPolicySpec
		mode    v1alpha1.SecurityMode
		reason  string
	}{
		{name: "created before secure defaults: as it was", mode: v1alpha1.SecurityPlain, reason: v1alpha1.ReasonCreatedBeforeSecureDefaults},
		{name: "a marker with another value is no marker", ann: map[string]string{v1alpha1.AnnotationDefaults: "plain"}, mode: v1alpha1.SecurityPlain, reason: v1alpha1.ReasonCreatedBeforeSecureDefaults},
		{name: "secure defaults", ann: marked, wantTLS: secureTLS, wantNP: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		{name: "secure defaults with the admin's SANs", ann: marked, op: Operator{DefaultExtraSANs: []string{"127.0.0.1"}},
			wantTLS: &v1alpha1.TLSSpec{Peer: secureTLS.Peer, Client: secureTLS.Client, ExtraSANs: []string{"127.0.0.1"}}, wantNP: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		{name: "insecure by choice", ann: marked, spec: v1alpha1.EtcdClusterSpec{Insecure: true}, mode: v1alpha1.SecurityPlain, reason: v1alpha1.ReasonInsecureByChoice},
		{name: "insecure with tls asked for", ann: marked, spec: v1alpha1.EtcdClusterSpec{Insecure: true, TLS: secureTLS}, wantTLS: secureTLS, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		// A side spec.tls names is the user's; one it leaves out still gets TLS.
		{name: "the user's side and policy win, the other side stays TLS", ann: marked, spec: v1alpha1.EtcdClusterSpec{TLS: peerOnly, NetworkPolicy: np},
			wantTLS: &v1alpha1.TLSSpec{Peer: peerOnly.Peer, Client: secureTLS.Client}, wantNP: np, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		{name: "spec.tls written for its SANs alone keeps both sides on TLS", ann: marked, spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{ExtraSANs: []string{"etcd.example"}}},
			wantTLS: &v1alpha1.TLSSpec{Peer: secureTLS.Peer, Client: secureTLS.Client, ExtraSANs: []string{"etcd.example"}}, wantNP: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		{name: "the admin's SANs go with spec.tls's own too", ann: marked, op: Operator{DefaultExtraSANs: []string{"127.0.0.1"}}, spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Peer: peerOnly.Peer, ExtraSANs: []string{"etcd.example", "127.0.0.1"}}},
			wantTLS: &v1alpha1.TLSSpec{Peer: peerOnly.Peer, Client: secureTLS.Client, ExtraSANs: []string{"etcd.example", "127.0.0.1"}}, wantNP: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}, mode: v1alpha1.SecurityTLS, reason: v1alpha1.ReasonTLS},
		{name: "one side plain takes spec.insecure", ann: marked, spec: v1alpha1.EtcdClusterSpec{Insecure: true, TLS: peerOnly},
			wantTLS: peerOnly, mode: v1alpha1.SecurityPartial, reason: v1alpha1.ReasonInsecureByChoice},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: tc.ann, Finalizers: []string{v1alpha1.FinalizerName}}, Spec: tc.spec}
			orig := c.DeepCopy()
			got := Effective(c, tc.op)
			if !equality.Semantic.DeepEqual(got.Spec.TLS, tc.wantTLS) {
				t.Errorf("tls = %+v, want %+v", got.Spec.TLS, tc.wantTLS)
			}
			if !equality.Semantic.DeepEqual(got.Spec.NetworkPolicy, tc.wantNP) {
				t.Errorf("networkPolicy = %+v, want %+v", got.Spec.NetworkPolicy, tc.wantNP)
			}
			if !equality.Semantic.DeepEqual(c, orig) {
				t.Errorf("Effective changed its input")
			}
			if again := Effective(got, tc.op); !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("Effective is not idempotent: %+v, then %+v", got.Spec, again.Spec)
			}
			mode, reason, msg := Security(got)
			if mode != tc.mode || reason != tc.reason || msg == "" {
				t.Errorf("Security = %s %s %q, want %s %s", mode, reason, msg, tc.mode, tc.reason)
			}
		})
	}
}

// TestPinPeers: the peer port is pinned to the members' names for clusters created under
// secure defaults whose peer certificates the operator or cert-manager issues, never for one
// created before (its members would restart) or with the user's own Secret, unless the spec
// says so either way; the chart renders the flag only then.
func TestPinPeers(t *testing.T) {
	yes, no := true, false
	marked := map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}
	peer := func(src v1alpha1.TLSSource, pin *bool) *v1alpha1.TLSSpec {
		return &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: src, SecretName: "p", PinPeers: pin}}
	}
	withApps := func(pin *bool) *v1alpha1.TLSSpec {
		t := peer(v1alpha1.TLSSourceOperator, pin)
		t.Client = &v1alpha1.ClientTLS{Certificates: []v1alpha1.ClientCertificate{{Name: "app"}}}
		return t
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		tls  *v1alpha1.TLSSpec
		want bool
		crl  bool
	}{
		{name: "created before, with application certificates (they must not speak raft)", tls: withApps(nil), want: true},
		{name: "created before, the list kept after the last application certificate went", tls: peer(v1alpha1.TLSSourceOperator, nil), crl: true, want: true},
		{name: "application certificates, pinning turned off", tls: withApps(&no), want: false},
		{name: "secure defaults, operator's certificates", ann: marked, tls: peer(v1alpha1.TLSSourceOperator, nil), want: true},
		{name: "secure defaults, cert-manager's", ann: marked, tls: peer(v1alpha1.TLSSourceCertManager, nil), want: true},
		{name: "secure defaults, the user's Secret", ann: marked, tls: peer(v1alpha1.TLSSourceSecret, nil), want: false},
		{name: "the user's Secret, asked for", ann: marked, tls: peer(v1alpha1.TLSSourceSecret, &yes), want: true},
		{name: "created before secure defaults", ann: nil, tls: peer(v1alpha1.TLSSourceOperator, nil), want: false},
		{name: "created before, asked for", ann: nil, tls: peer(v1alpha1.TLSSourceOperator, &yes), want: true},
		{name: "secure defaults, turned off", ann: marked, tls: peer(v1alpha1.TLSSourceOperator, &no), want: false},
		{name: "no peer TLS", ann: marked, tls: &v1alpha1.TLSSpec{}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: tc.ann}, Spec: v1alpha1.EtcdClusterSpec{TLS: tc.tls}}
			m := memory.Memory{ClientRevocationList: tc.crl}
			if got := PinPeers(c, m); got != tc.want {
				t.Errorf("PinPeers = %v, want %v", got, tc.want)
			}
			tv, err := tlsValues(c, Phase{}, m)
			if err != nil {
				t.Fatal(err)
			}
			if got := tv != nil && tv.Peer.PinPeers; got != tc.want {
				t.Errorf("the chart's tls.peer.pinPeers = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNetworkPolicyWrittenForItsClientsStaysOn: under secure defaults a spec.networkPolicy
// that names allowedClients without enabled keeps the policy; enabled: false turns it off; a
// cluster created before keeps reading an unset enabled as off.
func TestNetworkPolicyWrittenForItsClientsStaysOn(t *testing.T) {
	marked := map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}
	clients := []v1alpha1.NetworkPolicyPeer{{NamespaceSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "apps"}}}}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		np   *v1alpha1.NetworkPolicySpec
		want bool
	}{
		{name: "secure defaults, allowedClients only", ann: marked, np: &v1alpha1.NetworkPolicySpec{AllowedClients: clients}, want: true},
		{name: "secure defaults, turned off", ann: marked, np: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(false), AllowedClients: clients}, want: false},
		{name: "created before, allowedClients only", ann: nil, np: &v1alpha1.NetworkPolicySpec{AllowedClients: clients}, want: false},
		{name: "created before, turned on", ann: nil, np: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: tc.ann}, Spec: v1alpha1.EtcdClusterSpec{NetworkPolicy: tc.np}}
			stored := c.DeepCopy()
			got := networkPolicyValues(Effective(c, Operator{}), Operator{}) != nil
			if got != tc.want {
				t.Errorf("policy rendered %v, want %v", got, tc.want)
			}
			if !equality.Semantic.DeepEqual(c, stored) {
				t.Errorf("Effective changed the stored spec: %+v, then %+v", stored.Spec.NetworkPolicy, c.Spec.NetworkPolicy)
			}
		})
	}
}

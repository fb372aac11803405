package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// TLSSource says where a side's certificates come from.
// +kubebuilder:validation:Enum=Operator;Secret;CertManager
type TLSSource string

const (
	// TLSSourceOperator: the operator keeps a CA for the cluster in the Secret <name>-ca and
	// issues and renews the certificates from it.
	TLSSourceOperator TLSSource = "Operator"
	// TLSSourceSecret: the user provides the Secrets (keys tls.crt, tls.key and ca.crt, as
	// kubernetes.io/tls Secrets and cert-manager write them) and renews them.
	TLSSourceSecret TLSSource = "Secret"
	// TLSSourceCertManager: the operator creates cert-manager Certificates, signed by the
	// issuer the side's issuerRef names, into the same Secrets the Operator source writes
	// (<name>-peer-tls; <name>-server-tls and <name>-operator-client-tls); cert-manager
	// issues and renews them. cert-manager must be installed.
	TLSSourceCertManager TLSSource = "CertManager"
)

// Defaults of IssuerReference.
const (
	// CertManagerGroup is cert-manager's API group, the default group of an issuer.
	CertManagerGroup = "cert-manager.io"
	// IssuerKindIssuer is an Issuer in the cluster's namespace.
	IssuerKindIssuer = "Issuer"
	// IssuerKindClusterIssuer is a ClusterIssuer.
	IssuerKindClusterIssuer = "ClusterIssuer"
)

// IssuerReference names the cert-manager issuer that signs a side's certificates (source
// CertManager).
type IssuerReference struct {
	// Name of the Issuer (in the cluster's namespace) or ClusterIssuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Kind of the issuer: Issuer (default) or ClusterIssuer.
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer: cert-manager.io (default), or an external issuer's API group.
	// +kubebuilder:default=cert-manager.io
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// TLSSpec turns on TLS for the peer and the client side of etcd, each on its own. A side that
// is absent speaks plain HTTP. Both sides can be turned on and off on a live cluster: the
// client side passes through serving both on one port (see ClientTLS.AcceptPlain); the peer
// side moves the members' peer URLs one at a time through a second listener (see the
// README's "Turning TLS on and off").
// +kubebuilder:validation:XValidation:rule="!has(self.peer) || !has(self.peer.source) || self.peer.source != 'Secret' || has(self.peer.secretName)",message="tls.peer.secretName is required with source Secret: name a Secret with tls.crt, tls.key and ca.crt"
// +kubebuilder:validation:XValidation:rule="!has(self.client) || !has(self.client.source) || self.client.source != 'Secret' || (has(self.client.secretName) && has(self.client.operatorSecretName))",message="tls.client.secretName (the members' server certificate) and tls.client.operatorSecretName (the client certificate the operator presents) are required with source Secret"
// +kubebuilder:validation:XValidation:rule="!has(self.client) || !has(self.client.certificates) || size(self.client.certificates) == 0 || !has(self.client.source) || self.client.source == 'Operator'",message="tls.client.certificates needs source Operator (the operator keeps the CA and the revocation list): with source CertManager ask your issuer for your clients' certificates (a Certificate naming it), with source Secret issue them yourself"
// +kubebuilder:validation:XValidation:rule="!has(self.renewBefore) || duration(self.renewBefore) < (has(self.certificateDuration) ? duration(self.certificateDuration) : duration('2160h'))",message="tls.renewBefore must be shorter than tls.certificateDuration (default 2160h)"
// +kubebuilder:validation:XValidation:rule="!has(self.peer) || (has(self.peer.source) && self.peer.source == 'CertManager') == has(self.peer.issuerRef)",message="tls.peer.issuerRef goes with source CertManager, and only with it: name the cert-manager Issuer or ClusterIssuer that signs the peer certificates, or remove issuerRef for the other sources"
// +kubebuilder:validation:XValidation:rule="!has(self.client) || (has(self.client.source) && self.client.source == 'CertManager') == has(self.client.issuerRef)",message="tls.client.issuerRef goes with source CertManager, and only with it: name the cert-manager Issuer or ClusterIssuer that signs the server and client certificates, or remove issuerRef for the other sources"
// +kubebuilder:validation:XValidation:rule="!((has(self.peer) && has(self.peer.source) && self.peer.source == 'CertManager') || (has(self.client) && has(self.client.source) && self.client.source == 'CertManager')) || ((!has(self.certificateDuration) || duration(self.certificateDuration) >= duration('1h')) && (!has(self.renewBefore) || duration(self.renewBefore) >= duration('5m')))",message="with source CertManager, tls.certificateDuration must be at least 1h and tls.renewBefore at least 5m: cert-manager refuses shorter ones"
type TLSSpec struct {
	// Peer secures the traffic between members (mutual TLS: each member presents its
	// certificate to the others).
	// +optional
	Peer *PeerTLS `json:"peer,omitempty"`
	// Client secures the client port, the operator's connections included.
	// +optional
	Client *ClientTLS `json:"client,omitempty"`
	// ExtraSANs are further DNS names or IP addresses the members' certificates carry,
	// besides the pod DNS names and the Services (Operator and CertManager sources).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	ExtraSANs []string `json:"extraSANs,omitempty"`
	// CertificateDuration is the lifetime of the leaf certificates the operator issues or
	// asks cert-manager for (Operator and CertManager sources). Default 2160h (90 days).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10m')",message="tls.certificateDuration must be at least 10m"
	// +optional
	CertificateDuration *metav1.Duration `json:"certificateDuration,omitempty"`
	// RenewBefore renews a leaf certificate this long before it expires (Operator and
	// CertManager sources). Default: when two thirds of its lifetime have passed.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// PeerTLS is the peer side's TLS.
type PeerTLS struct {
	// Source of the certificates: Operator (default), Secret or CertManager.
	// +kubebuilder:default=Operator
	// +optional
	Source TLSSource `json:"source,omitempty"`
	// IssuerRef (source CertManager, required there) names the cert-manager issuer of this
	// side's certificates.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`
	// SecretName (source Secret) holds the members' peer certificate: tls.crt and tls.key,
	// valid for server and client authentication and naming every member's peer DNS name
	// (a wildcard *.<name>.<namespace>.svc and *.<name>.<namespace>.svc.<cluster domain>
	// covers them), and ca.crt, the CA that signed the peers' certificates.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// PinPeers takes on the peer port only certificates valid for the members' own DNS
	// names (etcd's --peer-cert-allowed-hostname), so that a client certificate signed by
	// the same CA (the operator's, an application's) cannot speak raft with the members.
	// Unset: on for clusters created under secure defaults whose peer certificates the
	// operator or cert-manager issues; off for clusters created before them and for source
	// Secret (whose certificates must then name the members, as SecretName says). Changing
	// it restarts the members one at a time.
	// +optional
	PinPeers *bool `json:"pinPeers,omitempty"`
}

// ClientTLS is the client side's TLS.
type ClientTLS struct {
	// Source of the certificates: Operator (default), Secret or CertManager.
	// +kubebuilder:default=Operator
	// +optional
	Source TLSSource `json:"source,omitempty"`
	// IssuerRef (source CertManager, required there) names the cert-manager issuer of this
	// side's certificates.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`
	// SecretName (source Secret) holds the members' server certificate (tls.crt, tls.key,
	// naming the pod DNS names and the client Service) and ca.crt, the CA that clients'
	// certificates must chain to.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// OperatorSecretName (source Secret) holds the client certificate the operator presents
	// to etcd (tls.crt, tls.key) and ca.crt, the CA the members' server certificate chains to.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	OperatorSecretName string `json:"operatorSecretName,omitempty"`
	// ClientCertAuth makes etcd refuse clients without a certificate signed by the client CA
	// (--client-cert-auth). Default true.
	// +kubebuilder:default=true
	// +optional
	ClientCertAuth *bool `json:"clientCertAuth,omitempty"`
	// AcceptPlain makes the members serve plain HTTP on the client port too, beside TLS, on
	// the same port (clients without TLS are not asked for a certificate). It is how clients
	// move between plain and TLS on a live cluster: set it while they move, and the operator
	// holds the members in that phase. Turning client TLS on passes through it by itself;
	// turning it off (removing tls.client) is allowed only from acceptPlain: true. It cannot
	// be set while auth is enabled.
	// +optional
	AcceptPlain bool `json:"acceptPlain,omitempty"`
	// Certificates (source Operator) are client certificates the operator keeps for your
	// applications, so that nobody needs the CA's key: each is issued from the cluster's CA
	// into the Secret <cluster>-client-<name> (tls.crt, tls.key, and ca.crt to verify the
	// members), with the common name <name> (the etcd user it authenticates as under
	// spec.auth), and renewed like the members' certificates. Removing an entry revokes its
	// certificates (the current one and those renewals replaced): their serial numbers go
	// into a revocation list (Secret <cluster>-crl) the members check on every TLS
	// connection, then its Secret is emptied (key and certificate removed; delete it when
	// you like, or it goes with the cluster). The members read the list from the first entry
	// on (they restart once for it) and keep reading it.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Certificates []ClientCertificate `json:"certificates,omitempty"`
}

// ClientCertificate is a client certificate the operator keeps for an application.
type ClientCertificate struct {
	// Name is the certificate's common name (the etcd user it authenticates as) and names
	// its Secret, <cluster>-client-<name>. Names starting with etcd-pilot are the operator's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('etcd-pilot')",message="tls.client.certificates[].name may not start with etcd-pilot: that is the operator's own identity"
	Name string `json:"name"`
}

// ClientTLSMode is what a member's client port serves.
// +kubebuilder:validation:Enum=Plain;Both;TLS
type ClientTLSMode string

const (
	// ClientTLSPlain: plain HTTP only.
	ClientTLSPlain ClientTLSMode = "Plain"
	// ClientTLSBoth: plain HTTP and TLS on the same port (etcd multiplexes them).
	ClientTLSBoth ClientTLSMode = "Both"
	// ClientTLSOnly: TLS only.
	ClientTLSOnly ClientTLSMode = "TLS"
)

// TLSTransitionStatus says where a switch of the client side between plain and TLS stands.
// It is for humans: the operator derives the phase on every pass from the members' pods and
// etcd's member list, never from here.
type TLSTransitionStatus struct {
	// Client is the client side's switch; absent when the members serve what the spec asks.
	// +optional
	Client *ClientTLSTransition `json:"client,omitempty"`
	// Peer is the peer side's switch; absent when the members serve and advertise what the
	// spec asks.
	// +optional
	Peer *PeerTLSTransition `json:"peer,omitempty"`
}

// PeerTLSTransition is a peer side switch in progress: the members' peer URLs move, one at a
// time, through a second listener on the transition port (etcd.peerTransitionPort, by default
// the peer port + 2), with a restart round before, between and after.
type PeerTLSTransition struct {
	// PeerPort is the scheme the members' pod template serves on the peer port (http or
	// https).
	PeerPort string `json:"peerPort"`
	// TransitionPort is the scheme it serves on the transition port; empty when it has no
	// second listener.
	// +optional
	TransitionPort string `json:"transitionPort,omitempty"`
	// Target is the scheme the spec asks for.
	Target string `json:"target"`
	// MembersOnTarget is how many members have their peer URL on the target (etcd's member
	// list).
	MembersOnTarget int32 `json:"membersOnTarget"`
	// Members is the number of members in etcd's member list (0 when it was not read).
	Members int32 `json:"members"`
	// Message says what the switch waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// ClientTLSTransition is a client side switch in progress.
type ClientTLSTransition struct {
	// Phase is what the members' pod template serves now; the rollout restarts the members
	// onto it one at a time.
	Phase ClientTLSMode `json:"phase"`
	// Target is what the spec asks for.
	Target ClientTLSMode `json:"target"`
	// Dial is the scheme the operator reaches the members with: one every member accepts.
	Dial string `json:"dial"`
	// MembersOnPhase is how many member pods run with the phase's listeners.
	MembersOnPhase int32 `json:"membersOnPhase"`
	// Members is the number of member pods.
	Members int32 `json:"members"`
	// Message says what the switch waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// CASecretName is the Secret holding the CA the operator keeps for a cluster (Operator
// source): tls.crt and tls.key of the CA, and ca.crt, the trust bundle. It signs the client
// side's certificates (the members' server certificate, the operator's and the applications'
// client certificates), and also the peer certificates of a cluster whose peer certificates
// were first issued before the peer side got a CA of its own (PeerCASecretName).
func CASecretName(cluster string) string { return cluster + "-ca" }

// PeerCASecretName is the Secret holding the CA that signs only the members' peer
// certificates (Operator source), laid out like CASecretName's: a client certificate of the
// cluster is then no certificate its peer port trusts.
func PeerCASecretName(cluster string) string { return cluster + "-peer-ca" }

// PeerTLSSecretName is the Secret with the members' peer certificate (Operator and
// CertManager sources; with CertManager also the name of its Certificate).
func PeerTLSSecretName(cluster string) string { return cluster + "-peer-tls" }

// ServerTLSSecretName is the Secret with the members' client-side server certificate
// (Operator and CertManager sources; with CertManager also the name of its Certificate).
func ServerTLSSecretName(cluster string) string { return cluster + "-server-tls" }

// OperatorTLSSecretName is the Secret with the client certificate the operator presents to
// the cluster (Operator and CertManager sources; with CertManager also the name of its
// Certificate).
func OperatorTLSSecretName(cluster string) string { return cluster + "-operator-client-tls" }

// ClientCertificateSecretName is the Secret of the application client certificate name of
// spec.tls.client.certificates.
func ClientCertificateSecretName(cluster, name string) string { return cluster + "-client-" + name }

// ClientCRLSecretName is the Secret with the revocation list of the cluster's client
// certificates (crl.der), which the members read on every TLS connection.
func ClientCRLSecretName(cluster string) string { return cluster + "-crl" }

// LabelClientCertificate is on the Secret of an application client certificate the operator
// keeps: the entry's name in spec.tls.client.certificates.
const LabelClientCertificate = "etcdpilot.io/client-certificate"

// CertificateStatus is one certificate of spec.tls.
type CertificateStatus struct {
	// Secret holds the certificate.
	Secret string `json:"secret"`
	// NotAfter is when it expires.
	NotAfter metav1.Time `json:"notAfter"`
	// RenewAt is when the operator renews it (certificates it issues, except the CA).
	// +optional
	RenewAt *metav1.Time `json:"renewAt,omitempty"`
}

// AuthSpec turns etcd's authentication on or off.
type AuthSpec struct {
	// Enabled turns authentication on once the cluster has formed: the operator creates the
	// root user, with a password it generates into the Secret <name>-root-auth (keys
	// username and password), and the user etcd-pilot with the root role, which it
	// authenticates as by its client certificate; then anonymous requests are refused. Set
	// false to turn authentication off again (removing spec.auth leaves etcd as it is).
	Enabled bool `json:"enabled"`
}

// RootAuthSecretName is the Secret with the password of etcd's root user (spec.auth).
func RootAuthSecretName(cluster string) string { return cluster + "-root-auth" }

// Annotations of CA rotation (Operator TLS source).
const (
	// AnnotationRotateCA on an EtcdCluster asks for a CA rotation: set it to a new value (a
	// date, a ticket) and the operator rotates once per value. The CA is also rotated by
	// itself two thirds through its lifetime.
	AnnotationRotateCA = "etcdpilot.io/rotate-ca"
	// AnnotationTrustGeneration is on the CA Secret and on the members' pod template: the
	// generation of the trust bundle. It rises when the bundle changes in a way etcd only
	// reads at start (a CA added or dropped), so the members restart onto it one at a time.
	AnnotationTrustGeneration = "etcdpilot.io/trust-generation"
	// AnnotationPeerTrustGeneration is AnnotationTrustGeneration's counterpart for the peer
	// side's own CA (PeerCASecretName) on the members' pod template: present once that CA's
	// bundle has changed (a rotation). On the CA Secret itself the generation is
	// AnnotationTrustGeneration, as on every CA Secret.
	AnnotationPeerTrustGeneration = "etcdpilot.io/peer-trust-generation"
	// AnnotationCASigns is on a CA Secret the operator created for one side only: "client"
	// (CASecretName, when the peer side has its own CA) or "peer" (PeerCASecretName). A CA
	// Secret without it (created before the peer side had a CA of its own) signs both.
	AnnotationCASigns = "etcdpilot.io/ca-signs"
	// AnnotationOperatorUser is on the client side's CA Secret once the operator of a cluster
	// created before secure defaults has moved to the cluster's own etcd user: that user's
	// name, which the operator's certificate keeps even when its Secret is lost or the client
	// side's source changes.
	AnnotationOperatorUser = "etcdpilot.io/operator-user"
	// AnnotationRotationRequest is on the CA Secret: the value of AnnotationRotateCA whose
	// rotation it started.
	AnnotationRotationRequest = "etcdpilot.io/rotation-request"
	// AnnotationIssuedSerials is on the Secret of an application client certificate: the
	// certificates issued into it before the current one that have not expired (serial/unix
	// expiry, comma-separated), revoked with it when its entry is removed.
	AnnotationIssuedSerials = "etcdpilot.io/issued-serials"
	// AnnotationRevoked is on the Secret of an application certificate removed from the
	// spec: when it was revoked and its key and certificate removed from the Secret.
	AnnotationRevoked = "etcdpilot.io/revoked"
	// AnnotationCRLNumber is on the revocation list's Secret: the number of the list it holds.
	AnnotationCRLNumber = "etcdpilot.io/crl-number"
)

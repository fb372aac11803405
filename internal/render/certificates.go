package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Defaults of the certificates the operator issues.
const (
	defaultCertificateDuration = 90 * 24 * time.Hour
	caValidity                 = 10 * 365 * 24 * time.Hour
)

// CALayout is how the CAs the operator keeps for a cluster divide its certificates.
type CALayout int

const (
	// SeparatePeerCA: the peer certificates have a CA of their own (PeerCASecretName), the
	// client side's certificates another (CASecretName). A client certificate, an
	// application's included, is then no certificate the peer port trusts, and a peer
	// certificate none the client port trusts. Every cluster gets it whose peer certificates
	// the operator issues from now on.
	SeparatePeerCA CALayout = iota
	// SharedCA: one CA (CASecretName) signs both sides, as for clusters whose members run
	// with peer certificates issued before the peer side got a CA of its own. They keep it:
	// a new peer CA would make the members refuse each other, and moving to one takes a trust
	// rotation with restarts that nothing asks for.
	SharedCA
)

// CACommonName and PeerCACommonName name a new CA of c: the client side's (or the one CA of
// SharedCA), and the peer side's. The issuer of a peer certificate says which CA signed it
// (see CALayoutOf).
func CACommonName(c *v1alpha1.EtcdCluster) string {
	return fmt.Sprintf("etcd-pilot CA of %s/%s", c.Namespace, c.Name)
}

// PeerCACommonName: see CACommonName.
func PeerCACommonName(c *v1alpha1.EtcdCluster) string {
	return fmt.Sprintf("etcd-pilot peer CA of %s/%s", c.Namespace, c.Name)
}

// OperatorCertificates is what the Operator source asks for, one Want per CA: the CA and the
// leaves of the sides whose source is Operator, divided as layout says (the client side's CA
// first). It is empty when no side's source is Operator.
func OperatorCertificates(c *v1alpha1.EtcdCluster, t Topology, layout CALayout) []certificates.Want {
	spec := c.Spec.TLS
	_, renewBefore := LeafTimes(c)
	client := certificates.Want{CASecret: v1alpha1.CASecretName(c.Name), CACommonName: CACommonName(c), CAValidity: caValidity, RenewBefore: renewBefore}
	peer := certificates.Want{CASecret: v1alpha1.PeerCASecretName(c.Name), CACommonName: PeerCACommonName(c), CAValidity: caValidity, RenewBefore: renewBefore}
	if layout == SharedCA {
		peer = client
	} else {
		client.CASigns, peer.CASigns = CASignsClient, CASignsPeer
	}
	if p := spec.Peer; p != nil && SourceOf(p.Source) == v1alpha1.TLSSourceOperator {
		peer.Leaves = append(peer.Leaves, leavesOf(c, t, sidePeer)...)
	}
	if layout == SharedCA {
		client = peer
	}
	if cl := spec.Client; cl != nil && SourceOf(cl.Source) == v1alpha1.TLSSourceOperator {
		client.Leaves = append(client.Leaves, leavesOf(c, t, sideClient)...)
		validity, _ := LeafTimes(c)
		for _, a := range cl.Certificates {
			client.Leaves = append(client.Leaves, certificates.Leaf{Secret: v1alpha1.ClientCertificateSecretName(c.Name, a.Name), Application: a.Name,
				Request: certs.Request{CommonName: a.Name, Client: true, Validity: validity}})
		}
	}
	var out []certificates.Want
	for i, w := range []certificates.Want{client, peer} {
		if len(w.Leaves) > 0 && (i == 0 || layout == SeparatePeerCA) {
			out = append(out, w)
		}
	}
	return out
}

// AnnotationCASigns' values on the CAs of SeparatePeerCA.
const (
	CASignsClient = "client"
	CASignsPeer   = "peer"
)

// CALayoutOf decides the layout of c's CAs from what exists, read in one pass through one
// reader: peerCA is whether the peer CA's Secret exists, peerIssuer the issuer's common name
// of the peer certificate in its Secret ("" when there is none, or it cannot be read),
// clientCASigns the AnnotationCASigns of the client side's CA Secret ("" when it has none or
// does not exist), and peerMounted whether a member or the pod template mounts the peer
// certificate's Secret. A cluster keeps the layout its members run with:
//
//   - SeparatePeerCA when the peer CA exists, the peer certificate names it as issuer, or the
//     client side's CA was created as the client side's only (then a missing peer CA is a
//     problem to report, never a reason to sign peers with the client side's CA);
//   - SharedCA when the peer certificate is another CA's (the one CA's, from before), or,
//     with none of that, members mount a peer Secret that is gone;
//   - SeparatePeerCA otherwise: no member runs with peer TLS yet.
func CALayoutOf(c *v1alpha1.EtcdCluster, peerCA bool, peerIssuer, clientCASigns string, peerMounted bool) CALayout {
	switch {
	case peerCA || peerIssuer == PeerCACommonName(c):
		return SeparatePeerCA
	case peerIssuer != "":
		return SharedCA
	case clientCASigns == CASignsClient:
		return SeparatePeerCA
	case peerMounted:
		return SharedCA
	}
	return SeparatePeerCA
}

// Revocations is what the spec asks of the revocation list of application client
// certificates (spec.tls.client.certificates, source Operator): certificates the spec no
// longer lists, whatever its client side is now, are revoked.
func Revocations(c *v1alpha1.EtcdCluster) certificates.RevocationWant {
	w := certificates.RevocationWant{CRLSecret: v1alpha1.ClientCRLSecretName(c.Name), Wanted: map[string]bool{}}
	if t := c.Spec.TLS; t != nil && t.Client != nil && SourceOf(t.Client.Source) == v1alpha1.TLSSourceOperator {
		for _, a := range t.Client.Certificates {
			w.Wanted[v1alpha1.ClientCertificateSecretName(c.Name, a.Name)] = true
		}
		w.Asked = len(w.Wanted) > 0
	}
	return w
}

// SourceOf is a side's source, Operator when unset (the API's default).
func SourceOf(s v1alpha1.TLSSource) v1alpha1.TLSSource {
	if s == "" {
		return v1alpha1.TLSSourceOperator
	}
	return s
}

// side is the peer or the client side of spec.tls.
type side int

const (
	sidePeer side = iota
	sideClient
)

// LeafTimes are the lifetime of the leaf certificates the operator issues or asks
// cert-manager for, and how long before expiry they are renewed (0: at two thirds of their
// lifetime).
func LeafTimes(c *v1alpha1.EtcdCluster) (validity, renewBefore time.Duration) {
	validity = defaultCertificateDuration
	spec := c.Spec.TLS
	if d := spec.CertificateDuration; d != nil && d.Duration > 0 {
		validity = d.Duration
	}
	if d := spec.RenewBefore; d != nil && d.Duration > 0 && d.Duration < validity {
		renewBefore = d.Duration
	}
	return validity, renewBefore
}

// leavesOf are the leaf certificates of one side, in the Secrets named after the cluster,
// whichever source issues them (Operator or CertManager): the peer certificate, or the
// members' server certificate and the operator's client certificate.
func leavesOf(c *v1alpha1.EtcdCluster, t Topology, s side) []certificates.Leaf {
	validity, _ := LeafTimes(c)
	dns, ips := memberNames(c, t)
	if s == sidePeer {
		return []certificates.Leaf{{Secret: v1alpha1.PeerTLSSecretName(c.Name), Request: certs.Request{
			CommonName: c.Name + "-peer", DNSNames: dns, IPs: ips, Server: true, Client: true, Validity: validity}}}
	}
	// etcd's gRPC gateway dials the member itself with the server certificate, so it is
	// valid for client authentication too.
	return []certificates.Leaf{
		{Secret: v1alpha1.ServerTLSSecretName(c.Name), Request: certs.Request{
			CommonName: c.Name + "-server", DNSNames: dns, IPs: ips, Server: true, Client: true, Validity: validity}},
		{Secret: v1alpha1.OperatorTLSSecretName(c.Name), Request: certs.Request{
			CommonName: OperatorCommonName(c), Client: true, Validity: validity}},
	}
}

// LegacyOperatorCommonName is the common name of the operator's client certificate for
// clusters created before secure defaults: the same for every cluster. Under etcd's
// authentication it is a user with the root role, so with a CA shared between clusters (one
// cert-manager ClusterIssuer) one cluster's operator certificate was root on another's etcd.
const LegacyOperatorCommonName = "etcd-pilot"

// OperatorCommonName is the subject common name of a new client certificate the operator
// presents for c; etcd takes it as the user name when authentication is on. A cluster created
// under secure defaults gets its own from the start (PerClusterOperatorCommonName); a cluster
// created before gets LegacyOperatorCommonName: its etcd may know that user only.
//
// Once the operator has a certificate, its name is kept (see KeepOperatorCommonName), whatever
// the annotations say: only the authentication planner moves it to the cluster's own name
// (plan.AdoptOperatorUser), after etcd reported that user as root.
func OperatorCommonName(c *v1alpha1.EtcdCluster) string {
	if !values.SecureDefaults(c) {
		return LegacyOperatorCommonName
	}
	return PerClusterOperatorCommonName(c)
}

// KeepOperatorCommonName sets the common name of the operator's certificate among leaves to
// current's, the one it has now, when that is one of the names the operator gives (the legacy
// or the cluster's own): a name change would leave the operator without a user in an etcd
// that knows only the current one. current is "" without a certificate; then recorded, the
// name the operator moved to (AnnotationOperatorUser on the client side's CA Secret, "" when
// it did not), is kept.
func KeepOperatorCommonName(c *v1alpha1.EtcdCluster, leaves []certificates.Leaf, current, recorded string) {
	own := PerClusterOperatorCommonName(c)
	if current != LegacyOperatorCommonName && current != own {
		if recorded != own {
			return
		}
		current = recorded
	}
	for i := range leaves {
		if leaves[i].Secret == v1alpha1.OperatorTLSSecretName(c.Name) {
			leaves[i].Request.CommonName = current
		}
	}
}

// PerClusterOperatorCommonName is the operator's common name of c's own:
// etcd-pilot-<32 hex digits of the SHA-256 of namespace/name>, so no other cluster's operator
// certificate names its user even when both come from one CA (no two clusters share a
// namespace and a name). It is not the UID: a cluster recreated under its name over its
// volumes, or restored from its own backup, keeps the user its etcd knows.
func PerClusterOperatorCommonName(c *v1alpha1.EtcdCluster) string {
	sum := sha256.Sum256([]byte(c.Namespace + "/" + c.Name))
	return LegacyOperatorCommonName + "-" + hex.EncodeToString(sum[:16])
}

// memberNames are the names a member is reached by: every pod's DNS name (a wildcard below
// the headless Service, with and without the cluster domain), the client Service's names, and
// spec.tls.extraSANs (IP addresses among them go in as IPs).
func memberNames(c *v1alpha1.EtcdCluster, t Topology) ([]string, []net.IP) {
	short := fmt.Sprintf("%s.%s.svc", t.Service, t.Namespace)
	dns := []string{"*." + short}
	if t.DomainSuffix != "" && t.DomainSuffix != short {
		dns = append(dns, "*."+t.DomainSuffix)
	}
	client := t.ClientService
	dns = append(dns, client, client+"."+t.Namespace, client+"."+t.Namespace+".svc")
	if t.ClusterDomain != "" {
		dns = append(dns, client+"."+t.Namespace+".svc."+t.ClusterDomain)
	}
	var ips []net.IP
	for _, s := range c.Spec.TLS.ExtraSANs {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// CertificateGVK is cert-manager's Certificate kind.
var CertificateGVK = schema.GroupVersionKind{Group: v1alpha1.CertManagerGroup, Version: "v1", Kind: "Certificate"}

// CertManagerCertificateAnnotation is on every Secret cert-manager writes: the name of its
// Certificate.
const CertManagerCertificateAnnotation = "cert-manager.io/certificate-name"

// CertManagerLeaf is a certificate of a side whose source is CertManager, and its issuer.
type CertManagerLeaf struct {
	Leaf   certificates.Leaf
	Issuer v1alpha1.IssuerReference
}

// CertManagerLeaves are the certificates the sides with source CertManager ask cert-manager
// for: the same as the Operator source issues (see leavesOf).
func CertManagerLeaves(c *v1alpha1.EtcdCluster, t Topology) []CertManagerLeaf {
	var out []CertManagerLeaf
	spec := c.Spec.TLS
	if p := spec.Peer; p != nil && SourceOf(p.Source) == v1alpha1.TLSSourceCertManager && p.IssuerRef != nil {
		for _, l := range leavesOf(c, t, sidePeer) {
			out = append(out, CertManagerLeaf{Leaf: l, Issuer: *p.IssuerRef})
		}
	}
	if cl := spec.Client; cl != nil && SourceOf(cl.Source) == v1alpha1.TLSSourceCertManager && cl.IssuerRef != nil {
		for _, l := range leavesOf(c, t, sideClient) {
			out = append(out, CertManagerLeaf{Leaf: l, Issuer: *cl.IssuerRef})
		}
	}
	return out
}

// ClusterIssuerProblem says why leaves may not be asked of the issuers they name ("" when
// they may): a cluster-scoped issuer (cert-manager's ClusterIssuer, or an external issuer's
// cluster-scoped kind) signs for every namespace that names it, so one tenant's certificates
// would be trusted by another's cluster. The operator's administrator allows them
// (--allow-cluster-issuers); a tenant cannot.
func ClusterIssuerProblem(leaves []CertManagerLeaf, allowed bool) string {
	if allowed {
		return ""
	}
	seen := map[string]bool{}
	var names []string
	for _, l := range leaves {
		if !strings.HasSuffix(l.Issuer.Kind, v1alpha1.IssuerKindClusterIssuer) || seen[l.Issuer.Kind+"/"+l.Issuer.Name] {
			continue
		}
		seen[l.Issuer.Kind+"/"+l.Issuer.Name] = true
		names = append(names, l.Issuer.Kind+" "+l.Issuer.Name)
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.tls names the cluster-scoped issuer %s: a cluster-scoped issuer signs for every namespace, so another tenant could get certificates this cluster trusts; "+
		"name an Issuer in this namespace, or ask the operator's administrator to allow cluster-scoped issuers (--allow-cluster-issuers)", strings.Join(names, ", "))
}

// CertManagerCertificate is the cert-manager Certificate that asks for l: written by
// cert-manager to the Secret of the same name, labelled so the operator's cache holds and
// watches that Secret, owned by the cluster.
func CertManagerCertificate(c *v1alpha1.EtcdCluster, l CertManagerLeaf, renewBefore time.Duration) *unstructured {
	r := l.Leaf.Request
	usages := []any{"digital signature"}
	if r.Server {
		usages = append(usages, "server auth")
	}
	if r.Client {
		usages = append(usages, "client auth")
	}
	kind, group := l.Issuer.Kind, l.Issuer.Group
	if kind == "" {
		kind = v1alpha1.IssuerKindIssuer
	}
	if group == "" {
		group = v1alpha1.CertManagerGroup
	}
	labels := map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}
	spec := map[string]any{
		"secretName": l.Leaf.Secret,
		"commonName": r.CommonName,
		"duration":   r.Validity.String(),
		"usages":     usages,
		// A new key at every issuance, as the Operator source does.
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":  map[string]any{"name": l.Issuer.Name, "kind": kind, "group": group},
		// cert-manager puts these labels on the Secret.
		"secretTemplate": map[string]any{"labels": labels},
	}
	if len(r.DNSNames) > 0 {
		dns := make([]any, 0, len(r.DNSNames))
		for _, n := range r.DNSNames {
			dns = append(dns, n)
		}
		spec["dnsNames"] = dns
	}
	if len(r.IPs) > 0 {
		ips := make([]any, 0, len(r.IPs))
		for _, ip := range r.IPs {
			ips = append(ips, ip.String())
		}
		spec["ipAddresses"] = ips
	}
	if renewBefore > 0 {
		spec["renewBefore"] = renewBefore.String()
	}
	owner, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(OwnerRef(c)))
	u := &unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name": l.Leaf.Secret, "namespace": c.Namespace,
			"labels":          map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
			"ownerReferences": []any{owner},
		},
		"spec": spec,
	}}
	u.SetGroupVersionKind(CertificateGVK)
	return u
}

package values

import (
	"fmt"
	"slices"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// SecureDefaults reports whether c was first seen under secure defaults: it carries
// v1alpha1.AnnotationDefaults with the value v1alpha1.DefaultsSecure.
func SecureDefaults(c *v1alpha1.EtcdCluster) bool {
	return c.Annotations[v1alpha1.AnnotationDefaults] == v1alpha1.DefaultsSecure
}

// MarkSecureDefaults adds v1alpha1.AnnotationDefaults to c. The caller writes it with the
// finalizer, when it first sees c, and never to a cluster that already has the finalizer (a
// cluster created before secure defaults keeps what it has).
func MarkSecureDefaults(c *v1alpha1.EtcdCluster) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1alpha1.AnnotationDefaults] = v1alpha1.DefaultsSecure
}

// Effective returns a copy of c with the spec a pass acts on: under secure defaults (see
// SecureDefaults) and without spec.insecure, a side spec.tls leaves out (or all of spec.tls)
// gets TLS with certificates from the operator (the client side with client-certificate
// authentication), tls.extraSANs gets op.DefaultExtraSANs besides its own, and an absent
// spec.networkPolicy an enabled one. Everything else is
// c's. The copy is for decisions and renders only: it must never be written back to the
// API server (a spec write would store the defaults and make them the user's).
func Effective(c *v1alpha1.EtcdCluster, op Operator) *v1alpha1.EtcdCluster {
	out := c.DeepCopy()
	if !SecureDefaults(c) || c.Spec.Insecure {
		return out
	}
	// A side the spec leaves out gets TLS too: writing spec.tls only for extraSANs or a
	// certificate duration, or for one side, must not switch the other to plain (spec.insecure
	// is the way out).
	if out.Spec.TLS == nil {
		out.Spec.TLS = &v1alpha1.TLSSpec{}
	}
	// The admin's names and addresses go into every member certificate of such a cluster,
	// besides the ones spec.tls lists: a spec.tls written for an application certificate or
	// one side must not drop the address the admin knows its members need.
	for _, san := range op.DefaultExtraSANs {
		if !slices.Contains(out.Spec.TLS.ExtraSANs, san) {
			out.Spec.TLS.ExtraSANs = append(out.Spec.TLS.ExtraSANs, san)
		}
	}
	if out.Spec.TLS.Peer == nil {
		out.Spec.TLS.Peer = &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceOperator}
	}
	if out.Spec.TLS.Client == nil {
		auth := true
		out.Spec.TLS.Client = &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator, ClientCertAuth: &auth}
	}
	on := true
	switch np := out.Spec.NetworkPolicy; {
	case np == nil:
		out.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Enabled: &on}
	case np.Enabled == nil:
		// Written for its allowedClients (or egress), not to turn the policy off.
		np.Enabled = &on
	}
	return out
}

// Security is what c's spec (the effective one, see Effective) asks of the transport, and
// the reason of the InsecureTransport condition with a message that says how to turn TLS on.
func Security(c *v1alpha1.EtcdCluster) (mode v1alpha1.SecurityMode, reason, message string) {
	peer := c.Spec.TLS != nil && c.Spec.TLS.Peer != nil
	client := c.Spec.TLS != nil && c.Spec.TLS.Client != nil
	switch {
	case peer && client:
		return v1alpha1.SecurityTLS, v1alpha1.ReasonTLS, "peer and client traffic use TLS"
	case peer || client:
		mode = v1alpha1.SecurityPartial
	default:
		mode = v1alpha1.SecurityPlain
	}
	plain := "the client and peer ports serve plain HTTP to any pod that reaches them"
	switch {
	case peer:
		plain = "the client port serves plain HTTP to any pod that reaches it"
	case client:
		plain = "the peer port serves plain HTTP: members' raft traffic is not encrypted or authenticated"
	}
	how := "set spec.tls.peer and spec.tls.client (for example {source: Operator} each) to switch the running cluster to TLS without downtime"
	switch {
	case c.Spec.Insecure && c.Spec.TLS == nil:
		return mode, v1alpha1.ReasonInsecureByChoice, fmt.Sprintf("spec.insecure is set: %s; %s", plain, how)
	case c.Spec.TLS == nil:
		return mode, v1alpha1.ReasonCreatedBeforeSecureDefaults, fmt.Sprintf("the cluster was created before TLS became the default and has no spec.tls: %s; %s", plain, how)
	default:
		return mode, v1alpha1.ReasonInsecureByChoice, fmt.Sprintf("spec.tls leaves a side out: %s; %s", plain, how)
	}
}

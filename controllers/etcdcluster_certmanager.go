package controllers

import (
	"context"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update;patch;delete

// The TLS source CertManager: the operator creates a cert-manager Certificate per Secret the
// Operator source would write (same names, same names in the certificate), and uses the
// Secrets cert-manager writes as it uses the Secrets a user provides. cert-manager is not
// imported: Certificates are unstructured, read from the API server (never cached or
// watched, so a cluster without cert-manager's CRDs costs nothing), and the kind is looked up
// before every use.

// reconcileCertManager creates or updates the Certificates of the sides with source
// CertManager, deletes those of sides that no longer use it, and reads the Secrets
// cert-manager wrote. It returns their material by Secret name and their expiry, or a
// TLSError while cert-manager is not installed or a Secret is not usable yet.
func (r *EtcdClusterReconciler) reconcileCertManager(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, now time.Time) (map[string]certificates.Material, []certificates.Expiry, error) {
	leaves := render.CertManagerLeaves(c, t)
	if len(leaves) == 0 {
		return nil, nil, nil
	}
	if err := observe.CertificateKindKnown(r.Client.RESTMapper()); err != nil {
		return nil, nil, err
	}
	// The operator's certificate keeps the user the operator moved to, when it did, also
	// when the client side moved from source Operator (the CA Secret records it).
	if ca, ok, err := observe.ReadTLSSecret(ctx, r.Client, c.Namespace, v1alpha1.CASecretName(c.Name)); err != nil {
		return nil, nil, err
	} else if ok && ca.OperatorUser != "" {
		plain := make([]certificates.Leaf, len(leaves))
		for i := range leaves {
			plain[i] = leaves[i].Leaf
		}
		render.KeepOperatorCommonName(c, plain, "", ca.OperatorUser)
		for i := range leaves {
			leaves[i].Leaf = plain[i]
		}
	}
	// A cluster created before the rule (no secure-defaults marker) keeps its issuer: refusing
	// it would stop its management after an operator upgrade.
	if p := render.ClusterIssuerProblem(leaves, r.Operator.AllowClusterIssuers || !values.SecureDefaults(c)); p != "" {
		// Nothing is asked of the issuer: no Certificate is written.
		return nil, nil, &render.TLSError{Msg: p}
	}
	_, renewBefore := render.LeafTimes(c)
	keep := map[string]bool{}
	var problems []string
	waits := true
	material := map[string]certificates.Material{}
	var expiries []certificates.Expiry
	for _, l := range leaves {
		keep[l.Leaf.Secret] = true
		desired := render.CertManagerCertificate(c, l, renewBefore)
		live, err := observe.Certificate(ctx, r.apiReader(), client.ObjectKeyFromObject(desired))
		if err != nil {
			return nil, nil, err
		}
		if live, err = r.exec.ApplyCertificate(ctx, c, desired, live); err != nil {
			return nil, nil, err
		}
		m, found, err := observe.ReadTLSSecret(ctx, r.Client, c.Namespace, l.Leaf.Secret)
		if err != nil {
			return nil, nil, err
		}
		if p, w := certificates.CertManagerProblem(c.Namespace, l.Leaf, observe.ReadyText(live), m, found, now); p != "" {
			problems = append(problems, p)
			waits = waits && w
			continue
		}
		material[l.Leaf.Secret] = m
		leaf, _ := certs.Parse(m.Cert)
		// No RenewAt: cert-manager renews it, not the operator.
		expiries = append(expiries, certificates.Expiry{Secret: l.Leaf.Secret, NotAfter: leaf.NotAfter})
	}
	// Only a side with another source can have left Certificates behind.
	spec := c.Spec.TLS
	if (spec.Peer != nil && render.SourceOf(spec.Peer.Source) != v1alpha1.TLSSourceCertManager) ||
		(spec.Client != nil && render.SourceOf(spec.Client.Source) != v1alpha1.TLSSourceCertManager) {
		list, err := observe.ClusterCertificates(ctx, r.apiReader(), c)
		if err != nil {
			return nil, nil, err
		}
		if err := r.exec.PruneCertificates(ctx, c, list, keep); err != nil {
			return nil, nil, err
		}
	}
	if len(problems) > 0 {
		return nil, nil, &render.TLSError{Msg: strings.Join(problems, "; "), Waits: waits}
	}
	return material, expiries, nil
}

// clusterOfCertManagerSecret maps a Secret cert-manager wrote for a cluster's Certificate
// (labelled through the Certificate's secretTemplate) to the cluster, so a Secret issued or
// renewed is used at once.
func clusterOfCertManagerSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetAnnotations()[render.CertManagerCertificateAnnotation] == "" {
		return nil
	}
	return clusterOfLabel(ctx, o)
}

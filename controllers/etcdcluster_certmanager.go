package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update;patch;delete

// The TLS source CertManager: the operator creates a cert-manager Certificate per Secret the
// Operator source would write (same names, same names in the certificate), and uses the
// Secrets cert-manager writes as it uses the Secrets a user provides. cert-manager is not
// imported: Certificates are unstructured, read from the API server (never cached or
// watched, so a cluster without cert-manager's CRDs costs nothing), and the kind is looked up
// before every use.

// CertificateGVK is cert-manager's Certificate kind.
var CertificateGVK = schema.GroupVersionKind{Group: v1alpha1.CertManagerGroup, Version: "v1", Kind: "Certificate"}

// certManagerCertificateAnnotation is on every Secret cert-manager writes: the name of its
// Certificate.
const certManagerCertificateAnnotation = "cert-manager.io/certificate-name"

// certManagerLeaf is a certificate of a side whose source is CertManager, and its issuer.
type certManagerLeaf struct {
	leaf   certificates.Leaf
	issuer v1alpha1.IssuerReference
}

// certManagerLeaves are the certificates the sides with source CertManager ask cert-manager
// for: the same as the Operator source issues (see leavesOf).
func certManagerLeaves(c *v1alpha1.EtcdCluster, t render.Topology) []certManagerLeaf {
	var out []certManagerLeaf
	spec := c.Spec.TLS
	if p := spec.Peer; p != nil && sourceOf(p.Source) == v1alpha1.TLSSourceCertManager && p.IssuerRef != nil {
		for _, l := range leavesOf(c, t, sidePeer) {
			out = append(out, certManagerLeaf{leaf: l, issuer: *p.IssuerRef})
		}
	}
	if cl := spec.Client; cl != nil && sourceOf(cl.Source) == v1alpha1.TLSSourceCertManager && cl.IssuerRef != nil {
		for _, l := range leavesOf(c, t, sideClient) {
			out = append(out, certManagerLeaf{leaf: l, issuer: *cl.IssuerRef})
		}
	}
	return out
}

// certManagerCertificate is the cert-manager Certificate that asks for l: written by
// cert-manager to the Secret of the same name, labelled so the operator's cache holds and
// watches that Secret, owned by the cluster.
func certManagerCertificate(c *v1alpha1.EtcdCluster, l certManagerLeaf, renewBefore time.Duration) *unstr.Unstructured {
	r := l.leaf.Request
	usages := []any{"digital signature"}
	if r.Server {
		usages = append(usages, "server auth")
	}
	if r.Client {
		usages = append(usages, "client auth")
	}
	kind, group := l.issuer.Kind, l.issuer.Group
	if kind == "" {
		kind = v1alpha1.IssuerKindIssuer
	}
	if group == "" {
		group = v1alpha1.CertManagerGroup
	}
	labels := map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}
	spec := map[string]any{
		"secretName": l.leaf.Secret,
		"commonName": r.CommonName,
		"duration":   r.Validity.String(),
		"usages":     usages,
		// A new key at every issuance, as the Operator source does.
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":  map[string]any{"name": l.issuer.Name, "kind": kind, "group": group},
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
	owner, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.To(render.OwnerRef(c)))
	u := &unstr.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name": l.leaf.Secret, "namespace": c.Namespace,
			"labels":          map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
			"ownerReferences": []any{owner},
		},
		"spec": spec,
	}}
	u.SetGroupVersionKind(CertificateGVK)
	return u
}

// certManagerProblem says why the Secret cert-manager keeps for l cannot be used ("" when it
// can): missing, invalid, or not naming what the Certificate asks for. cert is the live
// Certificate (nil if just created), for its Ready condition; m is the Secret's material.
func certManagerProblem(namespace string, l certificates.Leaf, cert *unstr.Unstructured, m certificates.Material, found bool, now time.Time) (problem string, waits bool) {
	where := fmt.Sprintf("Secret %s/%s of Certificate %s/%s", namespace, l.Secret, namespace, l.Secret)
	switch {
	case !found:
		return fmt.Sprintf("%s does not exist yet: cert-manager has not issued it (%s)", where, readyText(cert)), true
	default:
		if err := certs.Verify(certs.KeyPair{Cert: m.Cert, Key: m.Key}, m.CA, l.Request.Server, l.Request.Client, now); err != nil {
			return fmt.Sprintf("%s cannot be used: %v (it needs tls.crt, tls.key and ca.crt with the issuer's CA; %s)", where, err, readyText(cert)), false
		}
		leaf, _ := certs.Parse(m.Cert)
		if !certs.Covers(leaf, l.Request) {
			return fmt.Sprintf("%s does not name everything the Certificate asks for yet (common name %s, DNS names and IP addresses of the members): cert-manager issues it again (%s)", where, l.Request.CommonName, readyText(cert)), true
		}
	}
	return "", false
}

// readyText is a Certificate's Ready condition, for messages.
func readyText(cert *unstr.Unstructured) string {
	if cert == nil {
		return "Certificate just created"
	}
	conds, _, _ := unstr.NestedSlice(cert.Object, "status", "conditions")
	for _, x := range conds {
		m, ok := x.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		return fmt.Sprintf("Certificate Ready=%v, %v: %v", m["status"], m["reason"], m["message"])
	}
	return "the Certificate has no Ready condition yet: is cert-manager's controller running?"
}

// reconcileCertManager creates or updates the Certificates of the sides with source
// CertManager, deletes those of sides that no longer use it, and reads the Secrets
// cert-manager wrote. It returns their material by Secret name and their expiry, or a
// TLSError while cert-manager is not installed or a Secret is not usable yet.
func (r *EtcdClusterReconciler) reconcileCertManager(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, now time.Time) (map[string]certificates.Material, []certificates.Expiry, error) {
	leaves := certManagerLeaves(c, t)
	if len(leaves) == 0 {
		return nil, nil, nil
	}
	if _, err := r.Client.RESTMapper().RESTMapping(CertificateGVK.GroupKind(), CertificateGVK.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil, &render.TLSError{Msg: fmt.Sprintf("tls source CertManager needs cert-manager, and the API server does not know its Certificate kind (%s): install cert-manager (its CRDs and controller), or use tls source Operator or Secret", CertificateGVK.GroupVersion())}
		}
		return nil, nil, fmt.Errorf("failed to look up the kind %s: %w", CertificateGVK, err)
	}
	_, renewBefore := leafTimes(c)
	keep := map[string]bool{}
	var problems []string
	waits := true
	material := map[string]certificates.Material{}
	var expiries []certificates.Expiry
	for _, l := range leaves {
		keep[l.leaf.Secret] = true
		live, err := r.applyCertificate(ctx, c, certManagerCertificate(c, l, renewBefore))
		if err != nil {
			return nil, nil, err
		}
		m, found, err := r.readTLSSecret(ctx, r.Client, c.Namespace, l.leaf.Secret)
		if err != nil {
			return nil, nil, err
		}
		if p, w := certManagerProblem(c.Namespace, l.leaf, live, m, found, now); p != "" {
			problems = append(problems, p)
			waits = waits && w
			continue
		}
		material[l.leaf.Secret] = m
		leaf, _ := certs.Parse(m.Cert)
		// No RenewAt: cert-manager renews it, not the operator.
		expiries = append(expiries, certificates.Expiry{Secret: l.leaf.Secret, NotAfter: leaf.NotAfter})
	}
	// Only a side with another source can have left Certificates behind.
	spec := c.Spec.TLS
	if (spec.Peer != nil && sourceOf(spec.Peer.Source) != v1alpha1.TLSSourceCertManager) ||
		(spec.Client != nil && sourceOf(spec.Client.Source) != v1alpha1.TLSSourceCertManager) {
		if err := r.pruneCertificates(ctx, c, keep); err != nil {
			return nil, nil, err
		}
	}
	if len(problems) > 0 {
		return nil, nil, &render.TLSError{Msg: strings.Join(problems, "; "), Waits: waits}
	}
	return material, expiries, nil
}

// applyCertificate creates the Certificate, or updates it when it differs from desired (an
// unchanged Certificate costs no write), and returns the live one (nil when just created).
// A Certificate of that name the cluster does not own is left alone and reported.
func (r *EtcdClusterReconciler) applyCertificate(ctx context.Context, c *v1alpha1.EtcdCluster, desired *unstr.Unstructured) (*unstr.Unstructured, error) {
	live := &unstr.Unstructured{}
	live.SetGroupVersionKind(CertificateGVK)
	err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(desired), live)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("failed to create Certificate %s/%s: %w", desired.GetNamespace(), desired.GetName(), err)
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateRequested", "CreateCertificate", "Created cert-manager Certificate %s for Secret %s", desired.GetName(), desired.GetName())
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get Certificate %s/%s: %w", desired.GetNamespace(), desired.GetName(), err)
	}
	if !metav1.IsControlledBy(live, c) {
		return nil, &render.TLSError{Msg: fmt.Sprintf("Certificate %s/%s exists and is not this cluster's: the operator keeps this name for the cluster's certificates and does not change it; rename or delete that Certificate", live.GetNamespace(), live.GetName())}
	}
	if apply.Contains(live.Object, desired.Object, nil) {
		return live, nil
	}
	upd := live.DeepCopy()
	upd.Object["spec"] = desired.Object["spec"]
	labels := upd.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range desired.GetLabels() {
		labels[k] = v
	}
	upd.SetLabels(labels)
	// Only if unchanged since it was read (optimistic lock through resourceVersion).
	if err := r.Client.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("failed to update Certificate %s/%s: %w", upd.GetNamespace(), upd.GetName(), err)
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateUpdated", "UpdateCertificate", "Updated cert-manager Certificate %s to what spec.tls asks for", upd.GetName())
	return upd, nil
}

// pruneCertificates deletes the Certificates the cluster owns that keep does not name (a
// side moved from source CertManager to another source).
func (r *EtcdClusterReconciler) pruneCertificates(ctx context.Context, c *v1alpha1.EtcdCluster, keep map[string]bool) error {
	list := &unstr.UnstructuredList{}
	list.SetGroupVersionKind(CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := r.apiReader().List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: render.InventorySelector(c.Name)}); err != nil {
		return fmt.Errorf("failed to list the Certificates of EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	for i := range list.Items {
		cert := &list.Items[i]
		if keep[cert.GetName()] || !metav1.IsControlledBy(cert, c) {
			continue
		}
		uid := cert.GetUID()
		if err := r.Client.Delete(ctx, cert, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete Certificate %s/%s: %w", cert.GetNamespace(), cert.GetName(), err)
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateDeleted", "DeleteCertificate", "Deleted cert-manager Certificate %s: its side no longer uses source CertManager", cert.GetName())
	}
	return nil
}

// clusterOfCertManagerSecret maps a Secret cert-manager wrote for a cluster's Certificate
// (labelled through the Certificate's secretTemplate) to the cluster, so a Secret issued or
// renewed is used at once.
func clusterOfCertManagerSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetAnnotations()[certManagerCertificateAnnotation] == "" {
		return nil
	}
	return clusterOfLabel(ctx, o)
}

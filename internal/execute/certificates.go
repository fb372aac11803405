package execute

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// Issue carries out one certificate step: it writes the Secret and updates observed. Like
// every step, it ends on Done, failed or not.
func (x *Executor) Issue(ctx context.Context, c *v1alpha1.EtcdCluster, want certificates.Want, s certificates.Step, observed map[string]certificates.Material, now time.Time) error {
	err := x.issue(ctx, c, want, s, observed, now)
	x.Done(c, plan.Kind(s.Kind), err)
	return err
}

func (x *Executor) issue(ctx context.Context, c *v1alpha1.EtcdCluster, want certificates.Want, s certificates.Step, observed map[string]certificates.Material, now time.Time) error {
	var m certificates.Material
	switch s.Kind {
	case certificates.CreateCA:
		ca, err := certs.NewCA(want.CACommonName, now, want.CAValidity)
		if err != nil {
			return err
		}
		// The rotation request standing now is not one for this CA: it would rotate it at once.
		m = certificates.Material{Cert: ca.Cert, Key: ca.Key, CA: ca.Cert, Signs: want.CASigns, RotationRequest: want.RotationRequest}
	case certificates.IssueLeaf:
		caMat, ok := observed[want.CASecret]
		if !ok {
			return fmt.Errorf("failed to issue %s: the CA Secret %s is missing", s.Secret, want.CASecret)
		}
		pair, err := certs.Issue(certs.KeyPair{Cert: caMat.Cert, Key: caMat.Key}, s.Leaf.Request, now)
		if err != nil {
			return err
		}
		bundle := caMat.CA
		if len(bundle) == 0 {
			bundle = caMat.Cert
		}
		m = certificates.Material{Cert: pair.Cert, Key: pair.Key, CA: bundle}
		if s.Leaf.Application != "" {
			// The certificate replaced stays valid until it expires: keep it with the
			// Secret, so that removing the entry revokes it too.
			issued := certificates.ParseIssued(observed[s.Secret].Issued)
			if prev, err := certs.Parse(observed[s.Secret].Cert); err == nil {
				issued = append(issued, certificates.Revoked{Serial: certs.Serial(prev), NotAfter: prev.NotAfter})
			}
			m.Issued = certificates.FormatIssued(issued, now)
		}
	case certificates.StartCARotation:
		cur := observed[want.CASecret]
		next, err := certs.NewCA(want.CACommonName, now, want.CAValidity)
		if err != nil {
			return err
		}
		bundle := cur.CA
		if len(bundle) == 0 {
			bundle = cur.Cert
		}
		m = cur
		m.NextCert, m.NextKey = next.Cert, next.Key
		m.CA = append(append([]byte{}, bundle...), next.Cert...)
		m.Generation = cur.Generation + 1
		if want.RotationRequest != "" {
			m.RotationRequest = want.RotationRequest
		}
	case certificates.MarkCA:
		m = observed[want.CASecret]
		m.Signs = want.CASigns
	case certificates.SwitchCA:
		cur := observed[want.CASecret]
		m = cur
		m.Cert, m.Key, m.NextCert, m.NextKey = cur.NextCert, cur.NextKey, nil, nil
	case certificates.DropOldCA:
		cur := observed[want.CASecret]
		m = cur
		m.CA = cur.Cert
		m.Generation = cur.Generation + 1
	default:
		return fmt.Errorf("unknown certificate step %q", s.Kind)
	}
	// Created when this pass did not see it, else replaced only if unchanged since.
	m.ResourceVersion = observed[s.Secret].ResourceVersion
	if err := x.writeTLSSecret(ctx, c, s.Secret, s.Leaf.Application, m); err != nil {
		return err
	}
	observed[s.Secret] = m
	what := "Issued"
	switch {
	case s.Kind == certificates.StartCARotation || s.Kind == certificates.SwitchCA || s.Kind == certificates.DropOldCA || s.Kind == certificates.MarkCA:
		what = string(s.Kind)
	case s.Reason != certificates.ReasonMissing:
		what = "Renewed"
	}
	// Names of Secrets only: never their contents.
	// The Secret as the related object: each Secret's event is its own (see memberPod).
	x.Recorder.Eventf(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: s.Secret}}, corev1.EventTypeNormal,
		"Certificate"+what, string(s.Kind), "%s the certificate in Secret %s (%s)", what, s.Secret, s.Reason)
	return nil
}

// writeTLSSecret creates or replaces a kubernetes.io/tls Secret the operator keeps, owned by
// the cluster and labelled so the operator's cache sees it.
func (x *Executor) writeTLSSecret(ctx context.Context, c *v1alpha1.EtcdCluster, name, application string, m certificates.Material) error {
	sec := &corev1.Secret{
		// Owned by the cluster: it goes with it, and is kept as long as the cluster is.
		ObjectMeta: render.OwnedSecretMeta(c, name),
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{certs.CertKey: m.Cert, certs.KeyKey: m.Key, certs.CAKey: m.CA},
	}
	if application != "" {
		sec.Labels[v1alpha1.LabelClientCertificate] = application
		if m.Issued != "" {
			sec.Annotations = map[string]string{v1alpha1.AnnotationIssuedSerials: m.Issued}
		}
	}
	if len(m.NextCert) > 0 {
		sec.Data[certs.NextCertKey], sec.Data[certs.NextKeyKey] = m.NextCert, m.NextKey
	}
	if m.Generation > 0 || m.RotationRequest != "" {
		sec.Annotations = map[string]string{v1alpha1.AnnotationTrustGeneration: strconv.FormatInt(m.Generation, 10)}
		if m.RotationRequest != "" {
			sec.Annotations[v1alpha1.AnnotationRotationRequest] = m.RotationRequest
		}
	}
	for k, v := range map[string]string{v1alpha1.AnnotationCASigns: m.Signs, v1alpha1.AnnotationOperatorUser: m.OperatorUser} {
		if v == "" {
			continue
		}
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[k] = v
	}
	if m.ResourceVersion == "" {
		// A Secret this pass did not see: create it, never overwrite one (a CA that exists
		// after all must not be replaced).
		if err := x.Client.Create(ctx, sec); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("Secret %s/%s appeared since it was read; looking again", c.Namespace, name)
			}
			return fmt.Errorf("failed to create Secret %s/%s: %w", c.Namespace, name, err)
		}
		return nil
	}
	cur := &corev1.Secret{}
	if err := x.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, cur); err != nil {
		return fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, name, err)
	}
	if cert := cur.Annotations[render.CertManagerCertificateAnnotation]; cert != "" {
		return &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s is written by cert-manager for Certificate %s/%s: delete that Certificate and the Secret for the operator to issue this certificate itself, or use tls source CertManager", c.Namespace, name, c.Namespace, cert)}
	}
	if cur.Type != corev1.SecretTypeTLS || cur.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
		return &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s exists and is not one etcd-pilot keeps (type kubernetes.io/tls, label %s=%s): the operator keeps this name for the cluster's certificates and does not overwrite it; rename or delete that Secret, or use tls source Secret", c.Namespace, name, v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue)}
	}
	if err := ownSecret(c, cur); err != nil {
		return err
	}
	// Only if it is still the Secret this pass planned from (optimistic lock).
	cur.ResourceVersion = m.ResourceVersion
	cur.Data = sec.Data
	for k, v := range sec.Labels {
		cur.Labels[k] = v
	}
	for _, k := range []string{v1alpha1.AnnotationTrustGeneration, v1alpha1.AnnotationRotationRequest, v1alpha1.AnnotationIssuedSerials, v1alpha1.AnnotationRevoked, v1alpha1.AnnotationCASigns, v1alpha1.AnnotationOperatorUser} {
		delete(cur.Annotations, k)
	}
	for k, v := range sec.Annotations {
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[k] = v
	}
	if len(cur.OwnerReferences) == 0 {
		cur.OwnerReferences = sec.OwnerReferences
	}
	if err := x.Client.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to write Secret %s/%s: %w", c.Namespace, name, err)
	}
	return nil
}

// ApplyCertificate creates the Certificate, or updates it when it differs from desired (an
// unchanged Certificate costs no write), and returns the live one (nil when just created).
// A Certificate of that name the cluster does not own is left alone and reported. live is
// the Certificate as this pass read it past the cache (observe.Certificate), nil when it does
// not exist.
func (x *Executor) ApplyCertificate(ctx context.Context, c *v1alpha1.EtcdCluster, desired, live *unstr.Unstructured) (*unstr.Unstructured, error) {
	if live == nil {
		if err := x.Client.Create(ctx, desired); err != nil {
			return nil, fmt.Errorf("failed to create Certificate %s/%s: %w", desired.GetNamespace(), desired.GetName(), err)
		}
		x.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateRequested", "CreateCertificate", "Created cert-manager Certificate %s for Secret %s", desired.GetName(), desired.GetName())
		return nil, nil
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
	if err := x.Client.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("failed to update Certificate %s/%s: %w", upd.GetNamespace(), upd.GetName(), err)
	}
	x.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateUpdated", "UpdateCertificate", "Updated cert-manager Certificate %s to what spec.tls asks for", upd.GetName())
	return upd, nil
}

// PruneCertificates deletes the Certificates the cluster owns that keep does not name (a
// side moved from source CertManager to another source). list is the cluster's Certificates
// as this pass read them (observe.ClusterCertificates).
func (x *Executor) PruneCertificates(ctx context.Context, c *v1alpha1.EtcdCluster, list *unstr.UnstructuredList, keep map[string]bool) error {
	for i := range list.Items {
		cert := &list.Items[i]
		if keep[cert.GetName()] || !metav1.IsControlledBy(cert, c) {
			continue
		}
		uid := cert.GetUID()
		if err := x.Client.Delete(ctx, cert, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("failed to delete Certificate %s/%s: %w", cert.GetNamespace(), cert.GetName(), err)
		}
		x.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CertificateDeleted", "DeleteCertificate", "Deleted cert-manager Certificate %s: its side no longer uses source CertManager", cert.GetName())
	}
	return nil
}

// Revoke carries out one step of the revocation plan (certificates.PlanRevocations): it
// writes the revocation list, signed by the CA in ca, or empties the Secret of a certificate
// the spec no longer lists. crl is the list's Secret as the plan read it; a write replaces
// it only if unchanged since. Like every step, it ends on Done.
func (x *Executor) Revoke(ctx context.Context, c *v1alpha1.EtcdCluster, ca certs.KeyPair, crl observe.CRL, s certificates.RevocationStep, now time.Time) error {
	err := x.revoke(ctx, c, ca, crl, s, now)
	x.Done(c, plan.Kind(s.Kind), err)
	return err
}

func (x *Executor) revoke(ctx context.Context, c *v1alpha1.EtcdCluster, ca certs.KeyPair, crl observe.CRL, s certificates.RevocationStep, now time.Time) error {
	switch s.Kind {
	case certificates.RetireClientSecret:
		// Emptied, not deleted: the operator's role has no delete on Secrets. Only if
		// unchanged since it was read (optimistic lock).
		sec := &corev1.Secret{}
		if err := x.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: s.Secret}, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, s.Secret, err)
		}
		if err := ownSecret(c, sec); err != nil {
			return err
		}
		sec.Data = map[string][]byte{certs.CertKey: {}, certs.KeyKey: {}}
		delete(sec.Labels, v1alpha1.LabelClientCertificate)
		delete(sec.Annotations, v1alpha1.AnnotationIssuedSerials)
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[v1alpha1.AnnotationRevoked] = now.UTC().Format(time.RFC3339)
		if err := x.Client.Update(ctx, sec); err != nil {
			return fmt.Errorf("failed to empty Secret %s/%s: %w", c.Namespace, s.Secret, err)
		}
	case certificates.WriteCRL:
		serials := make([]string, 0, len(s.Entries))
		for _, e := range s.Entries {
			serials = append(serials, e.Serial)
		}
		number := crl.Number + 1
		der, err := certs.RevocationList(ca, serials, number, now)
		if err != nil {
			return err
		}
		entries, err := json.Marshal(s.Entries)
		if err != nil {
			return err
		}
		sec := &corev1.Secret{ObjectMeta: render.OwnedSecretMeta(c, s.Secret), Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{certs.CRLKey: der, certs.RevokedKey: entries}}
		sec.Annotations = map[string]string{v1alpha1.AnnotationCRLNumber: strconv.FormatInt(number, 10)}
		if !crl.Exists() {
			if err := x.Client.Create(ctx, sec); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("Secret %s/%s appeared since it was read; looking again", c.Namespace, s.Secret)
				}
				return fmt.Errorf("failed to create Secret %s/%s: %w", c.Namespace, s.Secret, err)
			}
		} else {
			// Only if it is still the list this pass planned from: a list written since
			// may carry a serial this one lacks.
			sec.ResourceVersion = crl.ResourceVersion
			if err := x.Client.Update(ctx, sec); err != nil {
				return fmt.Errorf("failed to write Secret %s/%s: %w", c.Namespace, s.Secret, err)
			}
		}
	default:
		return fmt.Errorf("unknown revocation step %q", s.Kind)
	}
	// Names of Secrets only: never their contents.
	x.Recorder.Eventf(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: s.Secret}}, corev1.EventTypeNormal,
		string(s.Kind), string(s.Kind), "%s: Secret %s (%s)", s.Kind, s.Secret, s.Reason)
	return nil
}

// ownSecret refuses a Secret another cluster keeps: names are made of the cluster's name and
// a suffix (<cluster>-client-<entry>, <cluster>-crl), so one cluster's name can be another's
// (cluster z's entry foo-ca is cluster z-client-foo's CA Secret). The operator writes only
// Secrets labelled with this cluster.
func ownSecret(c *v1alpha1.EtcdCluster, s *corev1.Secret) error {
	if owner := s.Labels[v1alpha1.LabelCluster]; owner != c.Name {
		return &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s belongs to another cluster (label %s=%q): its name is also one this cluster's certificates would take; rename the spec.tls.client.certificates entry (or the cluster) so that the names differ", s.Namespace, s.Name, v1alpha1.LabelCluster, owner)}
	}
	return nil
}

package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch

// Defaults of the certificates the operator issues.
const (
	defaultCertificateDuration = 90 * 24 * time.Hour
	caValidity                 = 10 * 365 * 24 * time.Hour
	// userSecretRecheck is how often Secrets the user provides are read again while they are
	// missing or invalid (they carry no label, so the operator does not watch them).
	userSecretRecheck = 10 * time.Second
)

// reconcileTLS makes sure the certificates of spec.tls exist (issuing or renewing those the
// operator keeps, asking cert-manager for those of source CertManager), records their expiry
// in status, and returns the TLS configuration the operator dials the members' client port
// with (nil when the client port is plain).
func (r *EtcdClusterReconciler) reconcileTLS(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) (*tls.Config, error) {
	spec := c.Spec.TLS
	if spec == nil || (spec.Peer == nil && spec.Client == nil) {
		c.Status.Certificates = nil
		return nil, nil
	}
	now := time.Now()
	// Source CertManager first: it also deletes the Certificates of a side that moved to the
	// Operator source, before that source looks at their Secrets. Its Secrets are checked
	// like the user's; a TLSError there waits until the Operator source has had its pass.
	cmMaterial, cmExp, cmErr := r.reconcileCertManager(ctx, c, t, now)
	if cmErr != nil && !render.IsTLSError(cmErr) {
		return nil, cmErr
	}
	var expiries []certificates.Expiry
	var operatorMaterial map[string]certificates.Material
	if want, ok := operatorCertificates(c, t); ok {
		want.RotationRequest = c.Annotations[v1alpha1.AnnotationRotateCA]
		// A formed cluster's members run with this CA's certificates once any of them (or the
		// pod template) mounts a TLS Secret; before that (TLS turned on on a live plain
		// cluster) the CA is created like for a new cluster.
		if c.Status.ClusterID != "" {
			var err error
			if want.Formed, err = r.membersMountTLS(ctx, c, t); err != nil {
				return nil, err
			}
		}
		// Plan from the cache; before writing anything, read the Secrets again past it and
		// plan again, so no step acts on a Secret the cache has not caught up with (a CA
		// just rotated, or one the cache does not show).
		var observed map[string]certificates.Material
		var steps []certificates.Step
		var exp []certificates.Expiry
		for pass, rd := range []client.Reader{r.Client, r.apiReader()} {
			var err error
			if observed, err = r.readAll(ctx, rd, c.Namespace, want); err != nil {
				return nil, err
			}
			want.MembersOnGeneration = -1
			want.ServedByCurrentCA = nil
			if rotating(observed[want.CASecret]) {
				g, err := r.membersGeneration(ctx, c, t)
				if err != nil {
					return nil, err
				}
				obs := observed
				want.MembersOnGeneration = g
				want.ServedByCurrentCA = func() bool { return r.servedByCurrentCA(ctx, c, t, obs) }
			}
			var problem *certificates.Problem
			steps, exp, problem = certificates.Plan(want, observed, now)
			if problem == nil && len(steps) == 0 {
				break
			}
			if pass == 1 && problem != nil {
				return nil, &render.TLSError{Msg: problem.Error()}
			}
		}
		for _, s := range steps {
			if err := r.issue(ctx, c, want, s, observed, now); err != nil {
				return nil, err
			}
		}
		if len(steps) > 0 {
			// What was written, for the expiry in status.
			_, exp, _ = certificates.Plan(want, observed, now)
		}
		operatorMaterial = observed
		expiries = exp
		ca := observed[want.CASecret]
		c.Status.TrustGeneration = ca.Generation
		c.Status.CARotation = certificates.Rotation(observed, want.CASecret)
	}
	if cmErr != nil {
		return nil, cmErr
	}
	if len(cmMaterial) > 0 {
		if operatorMaterial == nil {
			operatorMaterial = map[string]certificates.Material{}
		}
		for k, m := range cmMaterial {
			operatorMaterial[k] = m
		}
		expiries = append(expiries, cmExp...)
	}
	if spec.Client == nil {
		c.Status.Certificates = certificateStatus(expiries)
		return nil, nil
	}
	cfg, exp, err := r.clientTLSConfig(ctx, c, now, operatorMaterial)
	if err != nil {
		return nil, err
	}
	expiries = append(expiries, exp...)
	c.Status.Certificates = certificateStatus(expiries)
	return cfg, nil
}

// operatorCertificates is what the Operator source asks for: the CA and the leaves of the
// sides whose source is Operator. ok is false when no side's source is Operator.
func operatorCertificates(c *v1alpha1.EtcdCluster, t render.Topology) (certificates.Want, bool) {
	spec := c.Spec.TLS
	want := certificates.Want{
		CASecret: v1alpha1.CASecretName(c.Name), CACommonName: fmt.Sprintf("etcd-pilot CA of %s/%s", c.Namespace, c.Name),
		CAValidity: caValidity,
	}
	_, want.RenewBefore = leafTimes(c)
	if p := spec.Peer; p != nil && sourceOf(p.Source) == v1alpha1.TLSSourceOperator {
		want.Leaves = append(want.Leaves, leavesOf(c, t, sidePeer)...)
	}
	if cl := spec.Client; cl != nil && sourceOf(cl.Source) == v1alpha1.TLSSourceOperator {
		want.Leaves = append(want.Leaves, leavesOf(c, t, sideClient)...)
	}
	return want, len(want.Leaves) > 0
}

// sourceOf is a side's source, Operator when unset (the API's default).
func sourceOf(s v1alpha1.TLSSource) v1alpha1.TLSSource {
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

// leafTimes are the lifetime of the leaf certificates the operator issues or asks
// cert-manager for, and how long before expiry they are renewed (0: at two thirds of their
// lifetime).
func leafTimes(c *v1alpha1.EtcdCluster) (validity, renewBefore time.Duration) {
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
func leavesOf(c *v1alpha1.EtcdCluster, t render.Topology, s side) []certificates.Leaf {
	validity, _ := leafTimes(c)
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
			CommonName: OperatorCommonName, Client: true, Validity: validity}},
	}
}

// OperatorCommonName is the subject common name of the client certificate the operator
// presents (etcd takes it as the user name when authentication is on).
const OperatorCommonName = "etcd-pilot"

// memberNames are the names a member is reached by: every pod's DNS name (a wildcard below
// the headless Service, with and without the cluster domain), the client Service's names, and
// spec.tls.extraSANs (IP addresses among them go in as IPs).
func memberNames(c *v1alpha1.EtcdCluster, t render.Topology) ([]string, []net.IP) {
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

// issue carries out one certificate step: it writes the Secret and updates observed.
func (r *EtcdClusterReconciler) issue(ctx context.Context, c *v1alpha1.EtcdCluster, want certificates.Want, s certificates.Step, observed map[string]certificates.Material, now time.Time) error {
	var m certificates.Material
	switch s.Kind {
	case certificates.CreateCA:
		ca, err := certs.NewCA(want.CACommonName, now, want.CAValidity)
		if err != nil {
			return err
		}
		m = certificates.Material{Cert: ca.Cert, Key: ca.Key, CA: ca.Cert}
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
	if err := r.writeTLSSecret(ctx, c, s.Secret, m); err != nil {
		return err
	}
	observed[s.Secret] = m
	what := "Issued"
	switch {
	case s.Kind == certificates.StartCARotation || s.Kind == certificates.SwitchCA || s.Kind == certificates.DropOldCA:
		what = string(s.Kind)
	case s.Reason != certificates.ReasonMissing:
		what = "Renewed"
	}
	// Names of Secrets only: never their contents.
	// The Secret as the related object: each Secret's event is its own (see memberPod).
	r.Recorder.Eventf(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: s.Secret}}, corev1.EventTypeNormal,
		"Certificate"+what, string(s.Kind), "%s the certificate in Secret %s (%s)", what, s.Secret, s.Reason)
	if r.AfterStep != nil {
		r.AfterStep(string(s.Kind))
	}
	return nil
}

// writeTLSSecret creates or replaces a kubernetes.io/tls Secret the operator keeps, owned by
// the cluster and labelled so the operator's cache sees it.
func (r *EtcdClusterReconciler) writeTLSSecret(ctx context.Context, c *v1alpha1.EtcdCluster, name string, m certificates.Material) error {
	sec := &corev1.Secret{
		// Owned by the cluster: it goes with it, and is kept as long as the cluster is.
		ObjectMeta: render.OwnedSecretMeta(c, name),
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{certs.CertKey: m.Cert, certs.KeyKey: m.Key, certs.CAKey: m.CA},
	}
	if len(m.NextCert) > 0 {
		sec.Data[nextCertKey], sec.Data[nextKeyKey] = m.NextCert, m.NextKey
	}
	if m.Generation > 0 || m.RotationRequest != "" {
		sec.Annotations = map[string]string{v1alpha1.AnnotationTrustGeneration: strconv.FormatInt(m.Generation, 10)}
		if m.RotationRequest != "" {
			sec.Annotations[v1alpha1.AnnotationRotationRequest] = m.RotationRequest
		}
	}
	if m.ResourceVersion == "" {
		// A Secret this pass did not see: create it, never overwrite one (a CA that exists
		// after all must not be replaced).
		if err := r.Client.Create(ctx, sec); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("Secret %s/%s appeared since it was read; looking again", c.Namespace, name)
			}
			return fmt.Errorf("failed to create Secret %s/%s: %w", c.Namespace, name, err)
		}
		return nil
	}
	cur := &corev1.Secret{}
	if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, cur); err != nil {
		return fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, name, err)
	}
	if cert := cur.Annotations[certManagerCertificateAnnotation]; cert != "" {
		return &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s is written by cert-manager for Certificate %s/%s: delete that Certificate and the Secret for the operator to issue this certificate itself, or use tls source CertManager", c.Namespace, name, c.Namespace, cert)}
	}
	if cur.Type != corev1.SecretTypeTLS || cur.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
		return &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s exists and is not one etcd-pilot keeps (type kubernetes.io/tls, label %s=%s): the operator keeps this name for the cluster's certificates and does not overwrite it; rename or delete that Secret, or use tls source Secret", c.Namespace, name, v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue)}
	}
	// Only if it is still the Secret this pass planned from (optimistic lock).
	cur.ResourceVersion = m.ResourceVersion
	cur.Data = sec.Data
	for k, v := range sec.Labels {
		cur.Labels[k] = v
	}
	for _, k := range []string{v1alpha1.AnnotationTrustGeneration, v1alpha1.AnnotationRotationRequest} {
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
	if err := r.Client.Update(ctx, cur); err != nil {
		return fmt.Errorf("failed to write Secret %s/%s: %w", c.Namespace, name, err)
	}
	return nil
}

// readAll reads the CA and leaf Secrets of want through rd.
func (r *EtcdClusterReconciler) readAll(ctx context.Context, rd client.Reader, namespace string, want certificates.Want) (map[string]certificates.Material, error) {
	observed := map[string]certificates.Material{}
	names := []string{want.CASecret}
	for _, l := range want.Leaves {
		names = append(names, l.Secret)
	}
	for _, n := range names {
		m, ok, err := r.readTLSSecret(ctx, rd, namespace, n)
		if err != nil {
			return nil, err
		}
		if ok {
			observed[n] = m
		}
	}
	return observed, nil
}

// readTLSSecret reads tls.crt, tls.key and ca.crt of a Secret; ok is false when it does not
// exist.
func (r *EtcdClusterReconciler) readTLSSecret(ctx context.Context, rd client.Reader, namespace, name string) (certificates.Material, bool, error) {
	s := &corev1.Secret{}
	err := rd.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return certificates.Material{}, false, nil
	}
	if err != nil {
		return certificates.Material{}, false, fmt.Errorf("failed to get Secret %s/%s: %w", namespace, name, err)
	}
	m := certificates.Material{Cert: s.Data[certs.CertKey], Key: s.Data[certs.KeyKey], CA: s.Data[certs.CAKey],
		NextCert: s.Data[nextCertKey], NextKey: s.Data[nextKeyKey], RotationRequest: s.Annotations[v1alpha1.AnnotationRotationRequest],
		ResourceVersion: s.ResourceVersion}
	m.Generation, _ = strconv.ParseInt(s.Annotations[v1alpha1.AnnotationTrustGeneration], 10, 64)
	return m, true, nil
}

// clientTLSConfig builds the TLS configuration the operator dials the cluster with, from the
// client certificate it presents (its own Secret, or the user's operatorSecretName), and, for
// Secrets the user provides, checks them and returns their expiry.
func (r *EtcdClusterReconciler) clientTLSConfig(ctx context.Context, c *v1alpha1.EtcdCluster, now time.Time, issued map[string]certificates.Material) (*tls.Config, []certificates.Expiry, error) {
	cl := c.Spec.TLS.Client
	var exp []certificates.Expiry
	if cl.Source == v1alpha1.TLSSourceSecret {
		var checks []userSecret
		if p := c.Spec.TLS.Peer; p != nil && p.Source == v1alpha1.TLSSourceSecret {
			checks = append(checks, userSecret{p.SecretName, "tls.peer.secretName", true, true})
		}
		checks = append(checks, userSecret{cl.SecretName, "tls.client.secretName", true, false})
		for _, u := range checks {
			m, err := r.checkUserSecret(ctx, c.Namespace, u, now)
			if err != nil {
				return nil, nil, err
			}
			exp = append(exp, m)
		}
	} else if p := c.Spec.TLS.Peer; p != nil && p.Source == v1alpha1.TLSSourceSecret {
		m, err := r.checkUserSecret(ctx, c.Namespace, userSecret{p.SecretName, "tls.peer.secretName", true, true}, now)
		if err != nil {
			return nil, nil, err
		}
		exp = append(exp, m)
	}
	if m, ok := issued[v1alpha1.OperatorTLSSecretName(c.Name)]; ok && cl.Source != v1alpha1.TLSSourceSecret {
		// The operator's own certificate, as this pass read or wrote it (the cache may not
		// show a Secret written a moment ago).
		cfg, _, err := tlsConfigFrom(c.Namespace, v1alpha1.OperatorTLSSecretName(c.Name), m.Cert, m.Key, m.CA, now)
		return cfg, exp, err
	}
	cfg, leaf, err := buildClientTLS(ctx, r.Client, r.apiReader(), c, now)
	if err != nil {
		return nil, nil, err
	}
	if cl.Source == v1alpha1.TLSSourceSecret {
		exp = append(exp, certificates.Expiry{Secret: cl.OperatorSecretName, NotAfter: leaf.NotAfter})
	}
	return cfg, exp, nil
}

// userSecret is a Secret the user provides, and what it must be valid for.
type userSecret struct {
	name, field    string
	server, client bool
}

// checkUserSecret checks that a Secret the user provides holds a certificate and key that
// chain to its ca.crt, valid for the usage asked, and returns its expiry.
func (r *EtcdClusterReconciler) checkUserSecret(ctx context.Context, namespace string, u userSecret, now time.Time) (certificates.Expiry, error) {
	m, ok, err := r.readTLSSecret(ctx, r.apiReader(), namespace, u.name)
	if err != nil {
		return certificates.Expiry{}, err
	}
	if !ok {
		return certificates.Expiry{}, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s (spec.%s) does not exist: create it with tls.crt, tls.key and ca.crt", namespace, u.name, u.field)}
	}
	if err := certs.Verify(certs.KeyPair{Cert: m.Cert, Key: m.Key}, m.CA, u.server, u.client, now); err != nil {
		return certificates.Expiry{}, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s (spec.%s) cannot be used: %v", namespace, u.name, u.field, err)}
	}
	leaf, _ := certs.Parse(m.Cert)
	return certificates.Expiry{Secret: u.name, NotAfter: leaf.NotAfter}, nil
}

// certificateStatus turns expiries into status.certificates.
func certificateStatus(exp []certificates.Expiry) []v1alpha1.CertificateStatus {
	var out []v1alpha1.CertificateStatus
	for _, e := range exp {
		s := v1alpha1.CertificateStatus{Secret: e.Secret, NotAfter: metav1.NewTime(e.NotAfter.UTC().Truncate(time.Second))}
		if !e.RenewAt.IsZero() {
			s.RenewAt = ptr.To(metav1.NewTime(e.RenewAt.UTC().Truncate(time.Second)))
		}
		out = append(out, s)
	}
	return out
}

// operatorTLSSecret is the Secret with the client certificate the operator presents to c.
func operatorTLSSecret(c *v1alpha1.EtcdCluster) string {
	if cl := c.Spec.TLS.Client; cl != nil && cl.Source == v1alpha1.TLSSourceSecret {
		return cl.OperatorSecretName
	}
	return v1alpha1.OperatorTLSSecretName(c.Name)
}

// loadClientTLS reads the operator's client certificate for c (from the cache for its own
// Secret, past it for the user's) into the TLS configuration it dials the members with.
func loadClientTLS(ctx context.Context, cached, api client.Reader, c *v1alpha1.EtcdCluster) (*tls.Config, error) {
	cfg, _, err := buildClientTLS(ctx, cached, api, c, time.Now())
	return cfg, err
}

// buildClientTLS is loadClientTLS that also returns the client certificate.
func buildClientTLS(ctx context.Context, cached, api client.Reader, c *v1alpha1.EtcdCluster, now time.Time) (*tls.Config, *x509.Certificate, error) {
	name, rd := operatorTLSSecret(c), cached
	if c.Spec.TLS.Client.Source == v1alpha1.TLSSourceSecret {
		// The user's Secrets carry no label of ours: read them past the cache.
		rd = api
	}
	s := &corev1.Secret{}
	err := rd.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s with the operator's client certificate does not exist", c.Namespace, name)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, name, err)
	}
	return tlsConfigFrom(c.Namespace, name, s.Data[certs.CertKey], s.Data[certs.KeyKey], s.Data[certs.CAKey], now)
}

// tlsConfigFrom checks a client certificate, its key and the CA bundle (of Secret name) and
// builds the TLS configuration that presents it and trusts the bundle.
func tlsConfigFrom(namespace, name string, cert, key, bundle []byte, now time.Time) (*tls.Config, *x509.Certificate, error) {
	m := certs.KeyPair{Cert: cert, Key: key}
	if err := certs.Verify(m, bundle, false, true, now); err != nil {
		return nil, nil, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s cannot serve as the operator's client certificate: %v (it needs tls.crt valid for client authentication, its tls.key, and ca.crt with the CA that signed it and the members' server certificate)", namespace, name, err)}
	}
	pair, err := tls.X509KeyPair(m.Cert, m.Key)
	if err != nil {
		return nil, nil, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s: %v", namespace, name, err)}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	leaf, _ := certs.Parse(m.Cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, leaf, nil
}

// Keys of the next CA in the CA Secret during a rotation.
const (
	nextCertKey = "next.crt"
	nextKeyKey  = "next.key"
)

// rotating reports whether a CA rotation is under way in the CA Secret's material.
func rotating(m certificates.Material) bool {
	if len(m.NextCert) > 0 {
		return true
	}
	all, err := certs.ParseAll(m.CA)
	return err == nil && len(all) > 1
}

// membersGeneration is the trust generation every member pod runs with: each of the spec's
// ordinals has a ready pod whose template annotation names the same generation (a pod read
// the Secret's bundle when it started, after the bundle of that generation was written).
// -1 when a pod is missing, not ready, or they differ.
func (r *EtcdClusterReconciler) membersGeneration(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) (int64, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return -1, fmt.Errorf("failed to list member pods: %w", err)
	}
	want := render.SpecReplicas(c)
	gen, seen := int64(-1), int32(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		k, ok := plan.Ordinal(t.StatefulSet, p.Name)
		if !ok || k >= want {
			continue
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if p.DeletionTimestamp != nil || !st.Ready {
			return -1, nil
		}
		g, _ := strconv.ParseInt(p.Annotations[v1alpha1.AnnotationTrustGeneration], 10, 64)
		if gen != -1 && g != gen {
			return -1, nil
		}
		gen = g
		seen++
	}
	if seen != want {
		return -1, nil
	}
	return gen, nil
}

// servedByCurrentCA reads, in a TLS handshake with every member's client and peer port, the
// certificate each serves, and reports whether all of them are signed by the CA that signs
// now: only then may the old CA be dropped from the bundle.
func (r *EtcdClusterReconciler) servedByCurrentCA(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, observed map[string]certificates.Material) bool {
	ca, ok := observed[v1alpha1.CASecretName(c.Name)]
	if !ok {
		return false
	}
	signer := x509.NewCertPool()
	signer.AppendCertsFromPEM(ca.Cert)
	var ports []servedPort
	if p := c.Spec.TLS.Peer; p != nil && sourceOf(p.Source) == v1alpha1.TLSSourceOperator {
		ports = append(ports, servedPort{material: observed[v1alpha1.PeerTLSSecretName(c.Name)], url: t.PeerURL})
	}
	if cl := c.Spec.TLS.Client; cl != nil && sourceOf(cl.Source) == v1alpha1.TLSSourceOperator {
		ports = append(ports, servedPort{material: observed[v1alpha1.OperatorTLSSecretName(c.Name)], url: func(pod string) string { return t.Endpoint(pod) }})
	}
	for k := int32(0); k < render.SpecReplicas(c); k++ {
		pod := fmt.Sprintf("%s-%d", t.StatefulSet, k)
		for _, p := range ports {
			leaf, err := servedLeaf(ctx, p.url(pod), p.material)
			if err != nil {
				log.FromContext(ctx).Info("could not read a member's certificate", "member", pod, "error", err.Error())
				return false
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: signer, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				return false
			}
		}
	}
	return true
}

// servedPort is a port whose certificate servedByCurrentCA reads: the client pair to present
// and the URL of a pod's port.
type servedPort struct {
	material certificates.Material
	url      func(pod string) string
}

// servedLeaf is the certificate the server at rawURL presents, read with a handshake in which
// the pair in m is offered (peer ports ask for one) and the bundle in m trusted.
func servedLeaf(ctx context.Context, rawURL string, m certificates.Material) (*x509.Certificate, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(m.Cert, m.Key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.CA)
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(hctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// membersMountTLS reports whether the live StatefulSet's pod template or any member pod
// mounts a TLS Secret (the chart's peer-tls or client-tls volume).
func (r *EtcdClusterReconciler) membersMountTLS(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) (bool, error) {
	mounts := func(ps *corev1.PodSpec) bool {
		for _, v := range ps.Volumes {
			if (v.Name == "peer-tls" || v.Name == "client-tls") && v.Secret != nil {
				return true
			}
		}
		return false
	}
	sts := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case err == nil && mounts(&sts.Spec.Template.Spec):
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return false, fmt.Errorf("failed to list member pods: %w", err)
	}
	for i := range pods.Items {
		if mounts(&pods.Items[i].Spec) {
			return true, nil
		}
	}
	return false, nil
}

package observe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// ReadyText is a Certificate's Ready condition, for messages.
func ReadyText(cert *unstr.Unstructured) string {
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

// ReadAll reads the CA and leaf Secrets of want through rd.
func ReadAll(ctx context.Context, rd client.Reader, namespace string, want certificates.Want) (map[string]certificates.Material, error) {
	observed := map[string]certificates.Material{}
	names := []string{want.CASecret}
	for _, l := range want.Leaves {
		names = append(names, l.Secret)
	}
	for _, n := range names {
		m, ok, err := ReadTLSSecret(ctx, rd, namespace, n)
		if err != nil {
			return nil, err
		}
		if ok {
			observed[n] = m
		}
	}
	return observed, nil
}

// ReadTLSSecret reads tls.crt, tls.key and ca.crt of a Secret; ok is false when it does not
// exist.
func ReadTLSSecret(ctx context.Context, rd client.Reader, namespace, name string) (certificates.Material, bool, error) {
	s := &corev1.Secret{}
	err := rd.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return certificates.Material{}, false, nil
	}
	if err != nil {
		return certificates.Material{}, false, fmt.Errorf("failed to get Secret %s/%s: %w", namespace, name, err)
	}
	m := certificates.Material{Cert: s.Data[certs.CertKey], Key: s.Data[certs.KeyKey], CA: s.Data[certs.CAKey],
		NextCert: s.Data[certs.NextCertKey], NextKey: s.Data[certs.NextKeyKey], RotationRequest: s.Annotations[v1alpha1.AnnotationRotationRequest],
		Issued: s.Annotations[v1alpha1.AnnotationIssuedSerials], Signs: s.Annotations[v1alpha1.AnnotationCASigns],
		OperatorUser: s.Annotations[v1alpha1.AnnotationOperatorUser], ResourceVersion: s.ResourceVersion}
	m.Generation, _ = strconv.ParseInt(s.Annotations[v1alpha1.AnnotationTrustGeneration], 10, 64)
	return m, true, nil
}

// ClientTLSConfig builds the TLS configuration the operator dials the cluster with, from the
// client certificate it presents (its own Secret, or the user's operatorSecretName), and, for
// Secrets the user provides, checks them and returns their expiry. cached reads the
// operator's own Secret, api the user's (past the cache: they carry no label of ours).
func ClientTLSConfig(ctx context.Context, cached, api client.Reader, c *v1alpha1.EtcdCluster, now time.Time, issued map[string]certificates.Material) (*tls.Config, []certificates.Expiry, error) {
	cl := c.Spec.TLS.Client
	var exp []certificates.Expiry
	if cl.Source == v1alpha1.TLSSourceSecret {
		var checks []userSecret
		if p := c.Spec.TLS.Peer; p != nil && p.Source == v1alpha1.TLSSourceSecret {
			checks = append(checks, userSecret{p.SecretName, "tls.peer.secretName", true, true})
		}
		checks = append(checks, userSecret{cl.SecretName, "tls.client.secretName", true, false})
		for _, u := range checks {
			m, err := checkUserSecret(ctx, api, c.Namespace, u, now)
			if err != nil {
				return nil, nil, err
			}
			exp = append(exp, m)
		}
	} else if p := c.Spec.TLS.Peer; p != nil && p.Source == v1alpha1.TLSSourceSecret {
		m, err := checkUserSecret(ctx, api, c.Namespace, userSecret{p.SecretName, "tls.peer.secretName", true, true}, now)
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
	cfg, leaf, err := buildClientTLS(ctx, cached, api, c, now)
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
func checkUserSecret(ctx context.Context, api client.Reader, namespace string, u userSecret, now time.Time) (certificates.Expiry, error) {
	m, ok, err := ReadTLSSecret(ctx, api, namespace, u.name)
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

// OperatorTLSSecret is the Secret with the client certificate the operator presents to c.
func OperatorTLSSecret(c *v1alpha1.EtcdCluster) string {
	if cl := c.Spec.TLS.Client; cl != nil && cl.Source == v1alpha1.TLSSourceSecret {
		return cl.OperatorSecretName
	}
	return v1alpha1.OperatorTLSSecretName(c.Name)
}

// LoadClientTLS reads the operator's client certificate for c (from the cache for its own
// Secret, past it for the user's) into the TLS configuration it dials the members with.
func LoadClientTLS(ctx context.Context, cached, api client.Reader, c *v1alpha1.EtcdCluster) (*tls.Config, error) {
	cfg, _, err := buildClientTLS(ctx, cached, api, c, time.Now())
	return cfg, err
}

// buildClientTLS is loadClientTLS that also returns the client certificate.
func buildClientTLS(ctx context.Context, cached, api client.Reader, c *v1alpha1.EtcdCluster, now time.Time) (*tls.Config, *x509.Certificate, error) {
	name, rd := OperatorTLSSecret(c), cached
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

// Generations are the trust generations a member pod runs with, by CA Secret name: its pod
// template's AnnotationTrustGeneration for CASecretName, AnnotationPeerTrustGeneration for
// PeerCASecretName (0 when absent).
type Generations map[string]int64

// MembersGeneration is the trust generations every member pod runs with: each of the spec's
// ordinals has a ready pod whose template annotations name the same generations (a pod read
// the Secrets' bundles when it started, after the bundles of those generations were written).
// ok is false when a pod is missing, not ready, or they differ.
func MembersGeneration(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, t render.Topology) (Generations, bool, error) {
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return nil, false, fmt.Errorf("failed to list member pods: %w", err)
	}
	want := render.SpecReplicas(c)
	var gens Generations
	seen := int32(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		k, ok := plan.Ordinal(t.StatefulSet, p.Name)
		if !ok || k >= want {
			continue
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if p.DeletionTimestamp != nil || !st.Ready {
			return nil, false, nil
		}
		g := Generations{}
		g[v1alpha1.CASecretName(c.Name)], _ = strconv.ParseInt(p.Annotations[v1alpha1.AnnotationTrustGeneration], 10, 64)
		g[v1alpha1.PeerCASecretName(c.Name)], _ = strconv.ParseInt(p.Annotations[v1alpha1.AnnotationPeerTrustGeneration], 10, 64)
		if gens != nil && !maps.Equal(g, gens) {
			return nil, false, nil
		}
		gens = g
		seen++
	}
	if seen != want {
		return nil, false, nil
	}
	return gens, true, nil
}

// ServedByCurrentCA reads, in a TLS handshake with every member's ports whose certificates
// want's CA signs (the peer port, the client port, or both), the certificate each serves,
// and reports whether all of them are signed by the CA that signs now: only then may the old
// CA be dropped from the bundle.
func ServedByCurrentCA(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, want certificates.Want, observed map[string]certificates.Material) bool {
	ca, ok := observed[want.CASecret]
	if !ok {
		return false
	}
	signer := x509.NewCertPool()
	signer.AppendCertsFromPEM(ca.Cert)
	var ports []servedPort
	for _, l := range want.Leaves {
		switch l.Secret {
		case v1alpha1.PeerTLSSecretName(c.Name):
			ports = append(ports, servedPort{material: observed[l.Secret], url: t.PeerURL})
		case v1alpha1.ServerTLSSecretName(c.Name):
			ports = append(ports, servedPort{material: observed[v1alpha1.OperatorTLSSecretName(c.Name)], url: func(pod string) string { return t.Endpoint(pod) }})
		}
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

// MembersMountTLS reports whether the live StatefulSet's pod template or any member pod
// mounts a TLS Secret (the chart's peer-tls or client-tls volume).
func MembersMountTLS(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, t render.Topology) (bool, error) {
	return MembersMount(ctx, kc, c, t, PeerTLSVolume, ClientTLSVolume)
}

// The chart's volumes of the peer and the client side's TLS Secrets.
const (
	PeerTLSVolume   = "peer-tls"
	ClientTLSVolume = "client-tls"
)

// MembersMount reports whether the live StatefulSet's pod template or any member pod mounts
// a Secret as one of volumes.
func MembersMount(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, t render.Topology, volumes ...string) (bool, error) {
	mounts := func(ps *corev1.PodSpec) bool {
		for _, v := range ps.Volumes {
			if slices.Contains(volumes, v.Name) && v.Secret != nil {
				return true
			}
		}
		return false
	}
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case err == nil && mounts(&sts.Spec.Template.Spec):
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return false, fmt.Errorf("failed to list member pods: %w", err)
	}
	for i := range pods.Items {
		if mounts(&pods.Items[i].Spec) {
			return true, nil
		}
	}
	return false, nil
}

// CertificateKindKnown looks cert-manager's Certificate kind up with mapper before every use
// of source CertManager (cert-manager may be installed or removed at any time). Without the
// kind it returns a TLSError that says to install cert-manager.
func CertificateKindKnown(mapper meta.RESTMapper) error {
	if _, err := mapper.RESTMapping(render.CertificateGVK.GroupKind(), render.CertificateGVK.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return &render.TLSError{Msg: fmt.Sprintf("tls source CertManager needs cert-manager, and the API server does not know its Certificate kind (%s): install cert-manager (its CRDs and controller), or use tls source Operator or Secret", render.CertificateGVK.GroupVersion())}
		}
		return fmt.Errorf("failed to look up the kind %s: %w", render.CertificateGVK, err)
	}
	return nil
}

// Certificate reads the cert-manager Certificate key through api (past the cache:
// Certificates are never cached or watched); nil when it does not exist.
func Certificate(ctx context.Context, api client.Reader, key client.ObjectKey) (*unstr.Unstructured, error) {
	live := &unstr.Unstructured{}
	live.SetGroupVersionKind(render.CertificateGVK)
	err := api.Get(ctx, key, live)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get Certificate %s/%s: %w", key.Namespace, key.Name, err)
	}
	return live, nil
}

// ClusterCertificates lists, through api (past the cache), the cert-manager Certificates
// labelled as the cluster's.
func ClusterCertificates(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster) (*unstr.UnstructuredList, error) {
	list := &unstr.UnstructuredList{}
	list.SetGroupVersionKind(render.CertificateGVK.GroupVersion().WithKind("CertificateList"))
	if err := api.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: render.InventorySelector(c.Name)}); err != nil {
		return nil, fmt.Errorf("failed to list the Certificates of EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	return list, nil
}

// ReadClientSecrets reads the Secrets of the application client certificates the operator
// keeps for c (spec.tls.client.certificates, labelled with the entry's name), each with every
// certificate issued into it that has not expired at now: the current one and those its
// renewals replaced.
func ReadClientSecrets(ctx context.Context, rd client.Reader, c *v1alpha1.EtcdCluster, now time.Time) ([]certificates.ClientSecret, error) {
	list := &corev1.SecretList{}
	if err := rd.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
		client.HasLabels{v1alpha1.LabelClientCertificate}); err != nil {
		return nil, fmt.Errorf("failed to list the client certificates' Secrets: %w", err)
	}
	var out []certificates.ClientSecret
	for i := range list.Items {
		s := &list.Items[i]
		cs := certificates.ClientSecret{Secret: s.Name, Name: s.Labels[v1alpha1.LabelClientCertificate], Issued: certificates.ParseIssued(s.Annotations[v1alpha1.AnnotationIssuedSerials])}
		if leaf, err := certs.Parse(s.Data[certs.CertKey]); err == nil {
			cs.Issued = append(cs.Issued, certificates.Revoked{Serial: certs.Serial(leaf), NotAfter: leaf.NotAfter})
		}
		var live []certificates.Revoked
		for _, r := range cs.Issued {
			if r.NotAfter.After(now) {
				live = append(live, r)
			}
		}
		cs.Issued = live
		out = append(out, cs)
	}
	return out, nil
}

// CRLExists reports whether c's revocation list exists (its Secret, labelled as c's): the
// members then read it. A Secret of that name that is not c's is none; a read that fails is
// an error, never "none" (the members would stop reading the list).
func CRLExists(ctx context.Context, rd client.Reader, c *v1alpha1.EtcdCluster) (bool, error) {
	s := &corev1.Secret{}
	err := rd.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: v1alpha1.ClientCRLSecretName(c.Name)}, s)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, v1alpha1.ClientCRLSecretName(c.Name), err)
	}
	return s.Labels[v1alpha1.LabelCluster] == c.Name && s.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByValue, nil
}

// CRL is the revocation list's Secret as read: its entries, the list's number and the
// Secret's resourceVersion ("" when it does not exist).
type CRL struct {
	// DER is the list as the members read it.
	DER             []byte
	Entries         []certificates.Revoked
	Number          int64
	ResourceVersion string
}

// Exists reports whether the list's Secret exists.
func (l CRL) Exists() bool { return l.ResourceVersion != "" }

// CRLRefreshBefore is how long before its next update the revocation list is signed again
// (it is valid for a week, certs.RevocationList).
const CRLRefreshBefore = 2 * 24 * time.Hour

// Stale reports whether the list that exists must be signed again though its entries stand:
// its DER cannot be read, its next update is within CRLRefreshBefore, or signer (the CA that
// signs now, PEM) did not sign it.
func (l CRL) Stale(signer []byte, now time.Time) bool {
	if !l.Exists() {
		return false
	}
	rl, err := x509.ParseRevocationList(l.DER)
	if err != nil || now.After(rl.NextUpdate.Add(-CRLRefreshBefore)) {
		return true
	}
	ca, err := certs.Parse(signer)
	return err == nil && rl.CheckSignatureFrom(ca) != nil
}

// ReadCRL reads c's revocation list's Secret (v1alpha1.ClientCRLSecretName): the entries it
// keeps (data key revoked, JSON), from which crl.der is written. A Secret of that name that
// is not c's (another cluster's, or the user's) is refused, never taken or replaced.
func ReadCRL(ctx context.Context, rd client.Reader, c *v1alpha1.EtcdCluster) (CRL, error) {
	namespace, name := c.Namespace, v1alpha1.ClientCRLSecretName(c.Name)
	s := &corev1.Secret{}
	err := rd.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return CRL{}, nil
	}
	if err != nil {
		return CRL{}, fmt.Errorf("failed to get Secret %s/%s: %w", namespace, name, err)
	}
	if s.Labels[v1alpha1.LabelCluster] != c.Name || s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByValue {
		return CRL{}, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s exists and is not this cluster's revocation list (labels %s=%s and %s=%s): the operator keeps this name for it and does not overwrite it; rename or delete that Secret", namespace, name, v1alpha1.LabelCluster, c.Name, v1alpha1.LabelManagedBy, v1alpha1.ManagedByValue)}
	}
	l := CRL{ResourceVersion: s.ResourceVersion, DER: s.Data[certs.CRLKey]}
	l.Number, _ = strconv.ParseInt(s.Annotations[v1alpha1.AnnotationCRLNumber], 10, 64)
	if b := s.Data[certs.RevokedKey]; len(b) > 0 {
		if err := json.Unmarshal(b, &l.Entries); err != nil {
			return CRL{}, &render.TLSError{Msg: fmt.Sprintf("Secret %s/%s holds a revocation list the operator cannot read (%v): it does not replace it, since it would forget revoked certificates; restore it or delete it (its certificates are then valid again until the next removal)", namespace, name, err)}
		}
	}
	return l, nil
}

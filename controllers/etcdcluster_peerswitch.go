package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// peerSwitch is the peer side's phase of this pass (see internal/plan/peerswitch), derived
// from what runs: the live StatefulSet's pod template, the member pods' peer listeners and,
// whenever they serve anything but the target, etcd's member list.
type peerSwitch struct {
	obs      peerswitch.Observation
	decision peerswitch.Decision
	// liveSecret is the peer Secret the live pod template mounts ("" when none).
	liveSecret string
}

// peerTarget is the scheme the spec asks the peer side for.
func peerTarget(c *v1alpha1.EtcdCluster) string {
	if c.Spec.TLS != nil && c.Spec.TLS.Peer != nil {
		return peerswitch.HTTPS
	}
	return peerswitch.HTTP
}

// phase is the values phase of the peer side, nil when the pass renders the spec's target.
func (s peerSwitch) phase() *values.PeerPhase {
	d := s.decision
	if d.Render == (peerswitch.Listeners{Main: s.obs.Target}) && !d.Advertise.Transition {
		return nil
	}
	return &values.PeerPhase{Main: d.Render.Main, Transition: d.Render.Transition,
		AdvertiseTransition: d.Advertise.Transition, LiveSecret: s.liveSecret}
}

// joinURLTemplate is the peer URL, with $(POD_NAME) in it, a member that joins now is added
// with: the planner's Join kind on the member's DNS name.
func (s peerSwitch) joinURLTemplate(t render.Topology) string {
	k := s.decision.Join
	port := t.PeerPort
	if k.Transition {
		port = t.PeerTransitionPort
	}
	return fmt.Sprintf("%s://$(POD_NAME).%s:%d", k.Scheme, t.DomainSuffix, port)
}

// status is status.tlsTransition's peer side, nil when no switch runs.
func (s peerSwitch) status() *v1alpha1.PeerTLSTransition {
	d := s.decision
	if !d.Switching {
		return nil
	}
	st := &v1alpha1.PeerTLSTransition{PeerPort: d.Render.Main, TransitionPort: d.Render.Transition, Target: s.obs.Target,
		Members: int32(len(s.obs.Members)), Message: d.Message}
	goal := peerswitch.Kind{Scheme: s.obs.Target}
	for _, m := range s.obs.Members {
		if len(m.PeerURLs) == 1 {
			if k, ok := peerswitch.KindOf(m.PeerURLs[0], s.obs.PeerPort); ok && k == goal {
				st.MembersOnTarget++
			}
		}
	}
	return st
}

// decidePeerSwitch reads what decides the peer side's phase and asks the planner. t must
// carry the client scheme and TLS configuration of this pass (the member list is read with
// them).
func decidePeerSwitch(ctx context.Context, kc client.Client, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology) (peerSwitch, error) {
	s := peerSwitch{obs: peerswitch.Observation{Target: peerTarget(c), PeerPort: t.PeerPort}}
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return s, fmt.Errorf("failed to list member pods: %w", err)
	}
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	var tmpl peerswitch.Listeners
	switch {
	case apierrors.IsNotFound(err):
		// Nothing runs: the target. A StatefulSet deleted with its pods left running (an
		// orphaning delete) is not nothing: the pod of the lowest ordinal stands for the
		// template until one is applied again, and the member list decides.
		sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
		for i := range pods.Items {
			if l, ok := peerListeners(&pods.Items[i].Spec, t.PeerPort); ok {
				tmpl, s.liveSecret = l, secretVolume(&pods.Items[i].Spec, "peer-tls")
				break
			}
		}
		if tmpl == (peerswitch.Listeners{}) {
			s.decision = peerswitch.Decide(s.obs)
			return s, nil
		}
	case err != nil:
		return s, fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	default:
		var ok bool
		if tmpl, ok = peerListeners(&sts.Spec.Template.Spec, t.PeerPort); !ok {
			// A template the chart did not render (no etcd container): render the target.
			tmpl = peerswitch.Listeners{Main: s.obs.Target}
		}
		s.liveSecret = secretVolume(&sts.Spec.Template.Spec, "peer-tls")
	}
	s.obs.Template = &tmpl
	var started []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, ok := plan.Ordinal(t.StatefulSet, p.Name); !ok {
			continue
		}
		// A pod whose etcd container names no peer URLs was not made from the chart's
		// template: it tells nothing about the phase.
		if l, ok := peerListeners(&p.Spec, t.PeerPort); ok {
			s.obs.Pods = append(s.obs.Pods, peerswitch.Pod{Name: p.Name, Serves: l})
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if st.Started {
			started = append(started, p.Name)
		}
	}
	s.decision = peerswitch.Decide(s.obs)
	if !s.decision.NeedMembers || len(started) == 0 {
		return s, nil
	}
	var cfg *tls.Config
	if t.ClientScheme == "https" {
		cfg = t.TLS
	}
	list, err := memberListOf(ctx, dial, timeout, t, started, cfg)
	if err != nil {
		s.decision.Message += fmt.Sprintf(" (etcd: %v)", err)
		return s, nil
	}
	s.obs.Members = []peerswitch.Member{}
	for _, m := range list.Members {
		s.obs.Members = append(s.obs.Members, peerswitch.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs})
	}
	s.decision = peerswitch.Decide(s.obs)
	return s, nil
}

// peerListeners reads what the etcd container of a pod spec serves on its peer side, from
// --listen-peer-urls; ok is false when the spec has no etcd container with peer URLs.
func peerListeners(ps *corev1.PodSpec, peerPort int32) (peerswitch.Listeners, bool) {
	flags, _ := chartcontract.EtcdContainerArgs(ps)
	if urls := flags.URLs("listen-peer-urls"); urls != nil {
		return peerswitch.FromURLs(urls, peerPort), true
	}
	return peerswitch.Listeners{}, false
}

// secretVolume is the Secret of the pod spec's volume name, "" when there is none.
func secretVolume(ps *corev1.PodSpec, name string) string {
	for _, v := range ps.Volumes {
		if v.Name == name && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// peerStep proposes the peer switch's next URL move when no other step is under way (a is
// None): the member's URL moves to the destination the planner named, on the member's own
// host.
func peerStep(t render.Topology, ps *peerSwitch, a plan.Step) plan.Step {
	if a.Kind != plan.None || ps == nil || ps.decision.Update == nil {
		return a
	}
	u := ps.decision.Update
	if len(u.From) == 0 {
		return a
	}
	to, err := peerswitch.MovedURL(u.From[0], u.To, t.PeerPort, t.PeerTransitionPort)
	if err != nil {
		return plan.Step{Kind: plan.Wait, Member: u.Member, Reason: v1alpha1.ReasonSwitchingPeerTLS, Message: err.Error()}
	}
	return plan.Step{Kind: plan.UpdatePeerURL, Member: u.Member, ID: u.ID, PeerURL: to, Reason: v1alpha1.ReasonSwitchingPeerTLS,
		Message: fmt.Sprintf("moving the peer URL of %s from %s to %s: %s", u.Member, strings.Join(u.From, ","), to, ps.decision.Message)}
}

// askPeer asks the member at peer URL u whether it serves that URL, and returns "" when it
// does, else what went wrong. Over plain HTTP, and over TLS when the operator keeps the CA
// (source Operator), it asks etcd's peer handler for /members and checks that the answer
// carries this cluster's ID. etcd refuses a TLS client whose certificate names hosts that
// its address does not resolve to, so the operator presents a certificate it issues for the
// question, without names. With the user's or cert-manager's certificates (no CA key) the
// evidence is the TLS handshake: the listener serves a certificate of the peer CA for the
// member's name and accepts the members' peer certificate.
func (r *EtcdClusterReconciler) askPeer(ctx context.Context, c *v1alpha1.EtcdCluster, u string, clusterID uint64, secret string) string {
	tr := &http.Transport{DisableKeepAlives: true}
	if strings.HasPrefix(u, "https://") {
		if secret == "" {
			return "no peer certificate to present"
		}
		s := &corev1.Secret{}
		if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: secret}, s); err != nil {
			return fmt.Sprintf("failed to read the peer Secret %s: %v", secret, err)
		}
		if why := r.peerCertRefused(ctx, c, s); why != "" {
			return why
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.Data[certs.CAKey])
		pair, named := r.peerQuestionCert(ctx, c, s)
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			return fmt.Sprintf("the peer Secret %s holds no usable key pair: %v", secret, err)
		}
		tr.TLSClientConfig = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
		if named {
			return handshake(ctx, u, tr.TLSClientConfig)
		}
	}
	hc := &http.Client{Transport: tr, Timeout: r.EtcdTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(u, "/")+"/members", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "GET /members: " + resp.Status
	}
	id, err := strconv.ParseUint(resp.Header.Get("X-Etcd-Cluster-ID"), 16, 64)
	switch {
	case err != nil:
		return fmt.Sprintf("the answer names no cluster ID (%q)", resp.Header.Get("X-Etcd-Cluster-ID"))
	case id != clusterID:
		return fmt.Sprintf("the answer is from cluster %s, not %s", etcd.FormatID(id), etcd.FormatID(clusterID))
	}
	return ""
}

// peerQuestionCert is the client certificate askPeer presents on a TLS peer port: one without
// names, issued now by the cluster's CA when the operator keeps it and the peer bundle
// trusts it (named false), else the members' own peer certificate (named true).
func (r *EtcdClusterReconciler) peerQuestionCert(ctx context.Context, c *v1alpha1.EtcdCluster, peer *corev1.Secret) (certs.KeyPair, bool) {
	own := certs.KeyPair{Cert: peer.Data[certs.CertKey], Key: peer.Data[certs.KeyKey]}
	ca := &corev1.Secret{}
	if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: v1alpha1.CASecretName(c.Name)}, ca); err != nil {
		return own, true
	}
	caCert, err := certs.Parse(ca.Data[certs.CertKey])
	if err != nil {
		return own, true
	}
	trusted := false
	if all, err := certs.ParseAll(peer.Data[certs.CAKey]); err == nil {
		for _, b := range all {
			trusted = trusted || b.Equal(caCert)
		}
	}
	if !trusted {
		return own, true
	}
	pair, err := certs.Issue(certs.KeyPair{Cert: ca.Data[certs.CertKey], Key: ca.Data[certs.KeyKey]},
		certs.Request{CommonName: OperatorCommonName, Client: true, Validity: 10 * time.Minute}, time.Now())
	if err != nil {
		return own, true
	}
	return pair, false
}

// handshake completes a TLS handshake with the peer listener at u, verifying its certificate
// against cfg's roots for u's host.
func handshake(ctx context.Context, u string, cfg *tls.Config) string {
	pu, err := url.Parse(u)
	if err != nil {
		return err.Error()
	}
	cfg = cfg.Clone()
	cfg.ServerName = pu.Hostname()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(hctx, "tcp", pu.Host)
	if err != nil {
		return err.Error()
	}
	_ = conn.Close()
	return ""
}

// secret is the peer Secret the operator presents when it asks a member at a TLS peer URL:
// the spec's, or the live template's once tls.peer is gone.
func (s *peerSwitch) secret(c *v1alpha1.EtcdCluster) string {
	if t := c.Spec.TLS; t != nil && t.Peer != nil {
		if t.Peer.Source == v1alpha1.TLSSourceSecret {
			return t.Peer.SecretName
		}
		return v1alpha1.PeerTLSSecretName(c.Name)
	}
	return s.liveSecret
}

// skipPeerSANCheck reports whether the members run with etcd's
// --peer-skip-client-san-verification (spec.etcd.extraArgs).
func skipPeerSANCheck(c *v1alpha1.EtcdCluster) bool {
	for _, k := range []string{"peer-skip-client-san-verification", "experimental-peer-skip-client-san-verification"} {
		if v, ok := c.Spec.Etcd.ExtraArgs[k]; ok && v != "false" {
			return true
		}
	}
	return false
}

// peerCertRefused says why etcd would refuse the members' peer certificate in Secret s when
// one member dials another over TLS, "" when it would not. A TLS peer listener checks, after
// the handshake, that the dialing member's certificate names the address it connects from:
// an IP address of the certificate, or a DNS name that the address resolves back to (a
// wildcard matches by suffix) or that resolves to it. In a cluster members connect from
// their pod IPs, so this runs etcd's check against every member pod's IP with this process's
// resolver (the cluster's DNS). A URL moved to TLS while the check fails would cut the
// member off from the others as soon as their connections are made anew.
func (r *EtcdClusterReconciler) peerCertRefused(ctx context.Context, c *v1alpha1.EtcdCluster, s *corev1.Secret) string {
	if skipPeerSANCheck(c) {
		return ""
	}
	leaf, err := certs.Parse(s.Data[certs.CertKey])
	if err != nil {
		return fmt.Sprintf("the peer Secret %s holds no certificate: %v", s.Name, err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
		return fmt.Sprintf("failed to list member pods: %v", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" || secretVolume(&p.Spec, "peer-tls") == "" {
			continue
		}
		if why := sanCovers(ctx, net.DefaultResolver, leaf, p.Status.PodIP); why != "" {
			return fmt.Sprintf("etcd would refuse the peer certificate of Secret %s from %s (%s): %s; add the name or address the pod IP resolves to in tls.extraSANs (or your certificate), or set peer-skip-client-san-verification in spec.etcd.extraArgs",
				s.Name, p.Name, p.Status.PodIP, why)
		}
	}
	return ""
}

// resolver is the part of net.Resolver that sanCovers uses.
type resolver interface {
	LookupAddr(ctx context.Context, addr string) ([]string, error)
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// sanCovers is etcd's check of a TLS peer's certificate against the address ip it connects
// from (client/pkg/transport, checkCertSAN): "" when the certificate passes.
func sanCovers(ctx context.Context, res resolver, cert *x509.Certificate, ip string) string {
	if len(cert.IPAddresses) == 0 && len(cert.DNSNames) == 0 {
		return ""
	}
	if len(cert.IPAddresses) > 0 && cert.VerifyHostname(ip) == nil {
		return ""
	}
	if len(cert.DNSNames) == 0 {
		return fmt.Sprintf("%s is none of its IP addresses %v", ip, cert.IPAddresses)
	}
	var wildcards, names []string
	for _, d := range cert.DNSNames {
		if strings.HasPrefix(d, "*.") {
			wildcards = append(wildcards, d[1:])
		} else {
			names = append(names, d)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	back, _ := res.LookupAddr(lctx, ip)
	for _, n := range back {
		n = strings.TrimSuffix(n, ".")
		for _, wc := range wildcards {
			if strings.HasSuffix(n, wc) {
				return ""
			}
		}
		for _, d := range names {
			if d == n {
				return ""
			}
		}
	}
	for _, d := range names {
		addrs, _ := res.LookupHost(lctx, d)
		for _, a := range addrs {
			if a == ip {
				return ""
			}
		}
	}
	return fmt.Sprintf("%s resolves back to %v, which none of its names %v covers", ip, back, cert.DNSNames)
}

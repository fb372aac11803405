package observe

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
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/tlsswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// ClientSwitch is the client port's phase of this pass (see internal/plan/tlsswitch), derived
// from what runs: the live StatefulSet's pod template, the member pods' listeners and, before
// the template stops serving a scheme, etcd's member list (read with the scheme every member
// accepts and cfg, the operator's client TLS when the spec has it).
type ClientSwitch struct {
	// Obs is what this pass read; Decision is the planner's over it.
	Obs      tlsswitch.Observation
	Decision tlsswitch.Decision
	// Live is the client side's Secret and clientCertAuth in the live pod template.
	Live *charts.TLSSideValues
}

// Phase is the values phase the pass renders.
func (s ClientSwitch) Phase() values.Phase {
	return values.Phase{Client: s.Decision.Render, LiveClient: s.Live}
}

// ReadClientSwitch reads what decides the client port's phase and returns it with the
// planner's decision over it. etcd's member list and authentication state are read only when
// the planner asks for them (NeedMembers, NeedAuth) over what was read before.
func ReadClientSwitch(ctx context.Context, kc client.Reader, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, cfg *tls.Config) (ClientSwitch, error) {
	s := ClientSwitch{Obs: tlsswitch.Observation{Target: values.ClientTarget(c)}}
	if err := readClientSwitch(ctx, kc, dial, timeout, c, t, cfg, &s); err != nil {
		return s, err
	}
	s.Decision = tlsswitch.Decide(s.Obs)
	return s, nil
}

// readClientSwitch fills s.Obs and s.Live (see ReadClientSwitch).
func readClientSwitch(ctx context.Context, kc client.Reader, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, cfg *tls.Config, s *ClientSwitch) error {
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	s.Obs.Template, s.Live = clientListeners(&sts.Spec.Template.Spec)
	if s.Obs.Template == "" {
		// A template the chart did not render (no etcd container): render the target.
		s.Obs.Template = s.Obs.Target
	}
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
	}
	var started []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, ok := plan.Ordinal(t.StatefulSet, p.Name); !ok {
			continue
		}
		// A pod whose etcd container names no client URLs was not made from the chart's
		// template: it tells nothing about the phase.
		if mode, _ := clientListeners(&p.Spec); mode != "" {
			s.Obs.Pods = append(s.Obs.Pods, tlsswitch.Pod{Name: p.Name, Serves: tlsswitch.Of(mode)})
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if st.Started {
			started = append(started, p.Name)
		}
	}
	d := tlsswitch.Decide(s.Obs)
	if !d.NeedMembers {
		return nil
	}
	// Before the template stops serving a scheme: what every member published in etcd.
	t.ClientScheme = d.Dial
	dcfg := cfg
	if t.ClientScheme == "http" {
		dcfg = nil
	} else if dcfg == nil {
		if dcfg, err = fallbackClientTLS(ctx, kc, c); err != nil {
			s.Obs.MembersErr = err.Error()
			return nil
		}
	}
	if len(started) == 0 {
		return nil
	}
	list, err := memberListOf(ctx, dial, timeout, t, started, dcfg)
	if err != nil {
		s.Obs.MembersErr = "etcd: " + err.Error()
		return nil
	}
	s.Obs.Members = []tlsswitch.Member{}
	for _, m := range list.Members {
		s.Obs.Members = append(s.Obs.Members, tlsswitch.Member{Name: m.Name, Advertises: tlsswitch.FromURLs(m.ClientURLs)})
	}
	if !tlsswitch.Decide(s.Obs).NeedAuth {
		return nil
	}
	// Before the operator stops presenting its client certificate: etcd's authentication,
	// read over TLS with that certificate (spec.auth may be gone while etcd keeps it on).
	s.Obs.Auth, s.Obs.AuthErr = tlsswitch.AuthUnknown, ""
	acfg := cfg
	if acfg == nil {
		if acfg, err = fallbackClientTLS(ctx, kc, c); err != nil {
			s.Obs.AuthErr = err.Error()
		}
	}
	if acfg != nil {
		t.ClientScheme = "https"
		st, err := authStateOf(ctx, dial, timeout, t, started, acfg)
		switch {
		case err == nil && st.Enabled:
			s.Obs.Auth = tlsswitch.AuthOn
		case err == nil:
			s.Obs.Auth = tlsswitch.AuthOff
		case etcd.AuthRefused(err):
			// etcd refuses the certificate's user: authentication is on.
			s.Obs.Auth = tlsswitch.AuthOn
		default:
			s.Obs.AuthErr = err.Error()
		}
	}
	return nil
}

// dialStarted dials the client URLs (t's scheme) of the started member pods with cfg.
func dialStarted(ctx context.Context, dial etcd.Dialer, t render.Topology, started []string, cfg *tls.Config) (etcd.Client, error) {
	var endpoints []string
	for _, p := range started {
		endpoints = append(endpoints, t.Endpoint(p))
	}
	return dial(ctx, endpoints, cfg)
}

// authStateOf reads etcd's authentication state (no users) from the started member pods,
// dialing them with cfg, within timeout.
func authStateOf(ctx context.Context, dial etcd.Dialer, timeout time.Duration, t render.Topology, started []string, cfg *tls.Config) (etcd.AuthState, error) {
	cl, err := dialStarted(ctx, dial, t, started, cfg)
	if err != nil {
		return etcd.AuthState{}, err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cl.Auth(actx, nil)
}

// memberListOf reads etcd's member list from the started member pods, dialing them with cfg,
// within timeout.
func memberListOf(ctx context.Context, dial etcd.Dialer, timeout time.Duration, t render.Topology, started []string, cfg *tls.Config) (etcd.Cluster, error) {
	cl, err := dialStarted(ctx, dial, t, started, cfg)
	if err != nil {
		return etcd.Cluster{}, err
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cl.MemberList(lctx)
}

// clientListeners reads, from the etcd container of a pod spec, what its client port serves
// (from --listen-client-urls) and the client side's TLS settings (the client-tls volume's
// Secret, --client-cert-auth); "" when the spec has no etcd container with client URLs.
func clientListeners(ps *corev1.PodSpec) (v1alpha1.ClientTLSMode, *charts.TLSSideValues) {
	var mode v1alpha1.ClientTLSMode
	var live *charts.TLSSideValues
	flags, _ := chartcontract.EtcdContainerArgs(ps)
	if urls := flags.URLs("listen-client-urls"); urls != nil {
		mode = tlsswitch.FromURLs(urls).Mode()
	}
	if v, ok := flags.Get("client-cert-auth"); ok {
		live = &charts.TLSSideValues{}
		b, _ := strconv.ParseBool(v)
		live.ClientCertAuth = &b
	}
	for _, v := range ps.Volumes {
		if v.Name == "client-tls" && v.Secret != nil {
			if live == nil {
				live = &charts.TLSSideValues{}
			}
			live.SecretName = v.Secret.SecretName
		}
	}
	return mode, live
}

// fallbackClientTLS is the operator's own client certificate (Operator source) when the spec
// no longer has tls.client but members still serve TLS only: tls.client was removed before
// every member served both.
func fallbackClientTLS(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster) (*tls.Config, error) {
	name := v1alpha1.OperatorTLSSecretName(c.Name)
	s := &corev1.Secret{}
	if err := kc.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s); err != nil {
		return nil, fmt.Errorf("members still serve TLS only and the operator's client certificate %s cannot be read (%v): put tls.client back with acceptPlain: true until every member serves both", name, err)
	}
	cfg, _, err := tlsConfigFrom(c.Namespace, name, s.Data[certs.CertKey], s.Data[certs.KeyKey], s.Data[certs.CAKey], time.Now())
	return cfg, err
}

// DialTLS is the TLS configuration the operator dials the members with in this pass: none for
// plain HTTP, else cfg (the spec's), or its own certificate when the spec no longer has one.
func DialTLS(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, scheme string, cfg *tls.Config) *tls.Config {
	if scheme == "http" {
		return nil
	}
	if cfg == nil {
		cfg, _ = fallbackClientTLS(ctx, kc, c)
	}
	return cfg
}

// PeerSwitch is the peer side's phase of this pass (see internal/plan/peerswitch), derived
// from what runs: the live StatefulSet's pod template, the member pods' peer listeners and,
// whenever they serve anything but the target, etcd's member list.
type PeerSwitch struct {
	// Obs is what this pass read; Decision is the planner's over it.
	Obs      peerswitch.Observation
	Decision peerswitch.Decision
	// LiveSecret is the peer Secret the live pod template mounts ("" when none).
	LiveSecret string
}

// peerTarget is the scheme the spec asks the peer side for.
func peerTarget(c *v1alpha1.EtcdCluster) string {
	if c.Spec.TLS != nil && c.Spec.TLS.Peer != nil {
		return peerswitch.HTTPS
	}
	return peerswitch.HTTP
}

// Phase is the values phase of the peer side, nil when the pass renders the spec's target.
func (s PeerSwitch) Phase() *values.PeerPhase {
	d := s.Decision
	if d.Render == (peerswitch.Listeners{Main: s.Obs.Target}) && !d.Advertise.Transition {
		return nil
	}
	return &values.PeerPhase{Main: d.Render.Main, Transition: d.Render.Transition,
		AdvertiseTransition: d.Advertise.Transition, LiveSecret: s.LiveSecret}
}

// JoinURLTemplate is the peer URL, with $(POD_NAME) in it, a member that joins now is added
// with: the planner's Join kind on the member's DNS name.
func (s PeerSwitch) JoinURLTemplate(t render.Topology) string {
	k := s.Decision.Join
	port := t.PeerPort
	if k.Transition {
		port = t.PeerTransitionPort
	}
	return fmt.Sprintf("%s://$(POD_NAME).%s:%d", k.Scheme, t.DomainSuffix, port)
}

// ReadPeerSwitch reads what decides the peer side's phase and returns it with the planner's
// decision over it. t must carry the client scheme and TLS configuration of this pass (the
// member list is read with them, only when the planner asks for it: NeedMembers).
func ReadPeerSwitch(ctx context.Context, kc client.Reader, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology) (PeerSwitch, error) {
	s := PeerSwitch{Obs: peerswitch.Observation{Target: peerTarget(c), PeerPort: t.PeerPort}}
	if err := readPeerSwitch(ctx, kc, dial, timeout, c, t, &s); err != nil {
		return s, err
	}
	s.Decision = peerswitch.Decide(s.Obs)
	return s, nil
}

// readPeerSwitch fills s.Obs and s.LiveSecret (see ReadPeerSwitch).
func readPeerSwitch(ctx context.Context, kc client.Reader, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, s *PeerSwitch) error {
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
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
				tmpl, s.LiveSecret = l, secretVolume(&pods.Items[i].Spec, "peer-tls")
				break
			}
		}
		if tmpl == (peerswitch.Listeners{}) {
			return nil
		}
	case err != nil:
		return fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	default:
		var ok bool
		if tmpl, ok = peerListeners(&sts.Spec.Template.Spec, t.PeerPort); !ok {
			// A template the chart did not render (no etcd container): render the target.
			tmpl = peerswitch.Listeners{Main: s.Obs.Target}
		}
		s.LiveSecret = secretVolume(&sts.Spec.Template.Spec, "peer-tls")
	}
	s.Obs.Template = &tmpl
	var started []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, ok := plan.Ordinal(t.StatefulSet, p.Name); !ok {
			continue
		}
		// A pod whose etcd container names no peer URLs was not made from the chart's
		// template: it tells nothing about the phase.
		if l, ok := peerListeners(&p.Spec, t.PeerPort); ok {
			s.Obs.Pods = append(s.Obs.Pods, peerswitch.Pod{Name: p.Name, Serves: l})
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if st.Started {
			started = append(started, p.Name)
		}
	}
	if !peerswitch.Decide(s.Obs).NeedMembers || len(started) == 0 {
		return nil
	}
	var cfg *tls.Config
	if t.ClientScheme == "https" {
		cfg = t.TLS
	}
	list, err := memberListOf(ctx, dial, timeout, t, started, cfg)
	if err != nil {
		s.Obs.MembersErr = "etcd: " + err.Error()
		return nil
	}
	s.Obs.Members = []peerswitch.Member{}
	for _, m := range list.Members {
		s.Obs.Members = append(s.Obs.Members, peerswitch.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs})
	}
	return nil
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

// AskPeer asks the member at peer URL u whether it serves that URL, and returns "" when it
// does, else what went wrong. Over plain HTTP, and over TLS when the operator keeps the CA
// (source Operator), it asks etcd's peer handler for /members and checks that the answer
// carries this cluster's ID. etcd refuses a TLS client whose certificate names hosts that
// its address does not resolve to, so the operator presents a certificate it issues for the
// question, without names. With the user's or cert-manager's certificates (no CA key) the
// evidence is the TLS handshake: the listener serves a certificate of the peer CA for the
// member's name and accepts the members' peer certificate. kc reads the member pods, api the
// Secrets (past the cache); timeout bounds the question over HTTP. The URL's host and port
// come from values a tenant may set (the cluster domain, the peer port), and the answer ends
// up in conditions: it names a failure's class (egress.Describe) and the HTTP status, never
// what the host sent. So the URL's host is never resolved: the connection goes to the IP of
// the member pod the host names (its first label, in the cluster's namespace, with the
// cluster's label), and the host is only what TLS verifies; a cluster domain a tenant points
// elsewhere cannot make the operator connect there.
func AskPeer(ctx context.Context, kc, api client.Reader, timeout time.Duration, c *v1alpha1.EtcdCluster, u string, clusterID uint64, secret string) string {
	addr, pinned, why := memberAddress(ctx, kc, c, u)
	if why != "" {
		return why
	}
	tr := &http.Transport{DisableKeepAlives: true}
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
	}
	if strings.HasPrefix(u, "https://") {
		if secret == "" {
			return "no peer certificate to present"
		}
		s := &corev1.Secret{}
		if err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: secret}, s); err != nil {
			return fmt.Sprintf("failed to read the peer Secret %s: %v", secret, err)
		}
		if why := peerCertRefused(ctx, kc, c, s); why != "" {
			return why
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.Data[certs.CAKey])
		pair, named := peerQuestionCert(ctx, api, c, s, pinned)
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			return fmt.Sprintf("the peer Secret %s holds no usable key pair: %v", secret, err)
		}
		tr.TLSClientConfig = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
		if named {
			return handshake(ctx, u, addr, tr.TLSClientConfig)
		}
	}
	hc := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(u, "/")+"/members", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return egress.Describe(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("GET /members: HTTP %d", resp.StatusCode)
	}
	id, err := strconv.ParseUint(resp.Header.Get("X-Etcd-Cluster-ID"), 16, 64)
	switch {
	case err != nil:
		return "the answer names no cluster ID"
	case id != clusterID:
		return fmt.Sprintf("the answer is from cluster %s, not %s", etcd.FormatID(id), etcd.FormatID(clusterID))
	}
	return ""
}

// peerQuestionCert is the client certificate AskPeer presents on a TLS peer port: one without
// names (etcd checks the names of a certificate that has some against the address it
// connects from), issued now by the cluster's CA when the operator keeps it and the peer bundle
// trusts it (named false), else the members' own peer certificate (named true). pinned is
// whether the member runs with --peer-cert-allowed-hostname.
func peerQuestionCert(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster, peer *corev1.Secret, pinned bool) (certs.KeyPair, bool) {
	own := certs.KeyPair{Cert: peer.Data[certs.CertKey], Key: peer.Data[certs.KeyKey]}
	if pinned {
		// The peer port takes only certificates that name the members
		// (--peer-cert-allowed-hostname), and etcd checks that a certificate with names
		// names the address it connects from, which the operator's is not: a handshake.
		return own, true
	}
	// The peer side's own CA, or the one CA of a cluster that has no separate one.
	ca := &corev1.Secret{}
	err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: v1alpha1.PeerCASecretName(c.Name)}, ca)
	if apierrors.IsNotFound(err) {
		err = api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: v1alpha1.CASecretName(c.Name)}, ca)
	}
	if err != nil {
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
		certs.Request{CommonName: render.OperatorCommonName(c), Client: true, Validity: 10 * time.Minute}, time.Now())
	if err != nil {
		return own, true
	}
	return pair, false
}

// handshake completes a TLS handshake with the peer listener of u at addr, verifying its
// certificate against cfg's roots for u's host.
func handshake(ctx context.Context, u, addr string, cfg *tls.Config) string {
	pu, err := url.Parse(u)
	if err != nil {
		return err.Error()
	}
	cfg = cfg.Clone()
	cfg.ServerName = pu.Hostname()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		return egress.Describe(err)
	}
	_ = conn.Close()
	return ""
}

// Secret is the peer Secret the operator presents when it asks a member at a TLS peer URL:
// the spec's, or the live template's once tls.peer is gone.
func (s *PeerSwitch) Secret(c *v1alpha1.EtcdCluster) string {
	if t := c.Spec.TLS; t != nil && t.Peer != nil {
		if t.Peer.Source == v1alpha1.TLSSourceSecret {
			return t.Peer.SecretName
		}
		return v1alpha1.PeerTLSSecretName(c.Name)
	}
	return s.LiveSecret
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
func peerCertRefused(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, s *corev1.Secret) string {
	if skipPeerSANCheck(c) {
		return ""
	}
	leaf, err := certs.Parse(s.Data[certs.CertKey])
	if err != nil {
		return fmt.Sprintf("the peer Secret %s holds no certificate: %v", s.Name, err)
	}
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
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

// memberAddress is where AskPeer connects for the peer URL u: the IP of the member pod u's
// host names (its first DNS label), in c's namespace and with c's cluster label, and u's
// port; pinned is whether that pod's etcd runs with --peer-cert-allowed-hostname (what runs,
// not what the spec asks). why says what is missing instead.
func memberAddress(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, u string) (addr string, pinned bool, why string) {
	pu, err := url.Parse(u)
	if err != nil || pu.Hostname() == "" {
		return "", false, "the peer URL is no URL with a host"
	}
	port := pu.Port()
	if port == "" {
		return "", false, "the peer URL names no port"
	}
	name, _, _ := strings.Cut(pu.Hostname(), ".")
	pod := &corev1.Pod{}
	if err := kc.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, fmt.Sprintf("no member pod %s for the peer URL's host", name)
		}
		return "", false, fmt.Sprintf("failed to get pod %s: %v", name, err)
	}
	if pod.Labels[v1alpha1.LabelCluster] != c.Name {
		return "", false, fmt.Sprintf("pod %s is no member of this cluster", name)
	}
	if pod.Status.PodIP == "" {
		return "", false, fmt.Sprintf("member pod %s has no IP yet", name)
	}
	flags, _ := chartcontract.EtcdContainerArgs(&pod.Spec)
	return net.JoinHostPort(pod.Status.PodIP, port), flags.Has("peer-cert-allowed-hostname"), ""
}

package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
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
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/tlsswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// clientSwitch is the client port's phase of this pass (see internal/plan/tlsswitch), derived
// from what runs: the live StatefulSet's pod template, the member pods' listeners and, before
// the template stops serving a scheme, etcd's member list (read with the scheme every member
// accepts and cfg, the operator's client TLS when the spec has it).
type clientSwitch struct {
	obs      tlsswitch.Observation
	decision tlsswitch.Decision
	// live is the client side's Secret and clientCertAuth in the live pod template.
	live *charts.TLSSideValues
}

// phase is the values phase the pass renders.
func (s clientSwitch) phase() values.Phase {
	return values.Phase{Client: s.decision.Render, LiveClient: s.live}
}

// decideClientSwitch reads what decides the client port's phase and asks the planner.
func decideClientSwitch(ctx context.Context, kc client.Client, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, cfg *tls.Config) (clientSwitch, error) {
	s := clientSwitch{obs: tlsswitch.Observation{Target: values.ClientTarget(c)}}
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case apierrors.IsNotFound(err):
		s.decision = tlsswitch.Decide(s.obs)
		return s, nil
	case err != nil:
		return s, fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	s.obs.Template, s.live = clientListeners(&sts.Spec.Template.Spec)
	if s.obs.Template == "" {
		// A template the chart did not render (no etcd container): render the target.
		s.obs.Template = s.obs.Target
	}
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return s, fmt.Errorf("failed to list member pods: %w", err)
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
			s.obs.Pods = append(s.obs.Pods, tlsswitch.Pod{Name: p.Name, Serves: tlsswitch.Of(mode)})
		}
		var st plan.Pod
		plan.PodState(&st, p)
		if st.Started {
			started = append(started, p.Name)
		}
	}
	s.decision = tlsswitch.Decide(s.obs)
	if !s.decision.NeedMembers {
		return s, nil
	}
	// Before the template stops serving a scheme: what every member published in etcd.
	t.ClientScheme = s.decision.Dial
	dcfg := cfg
	if t.ClientScheme == "http" {
		dcfg = nil
	} else if dcfg == nil {
		if dcfg, err = fallbackClientTLS(ctx, kc, c); err != nil {
			s.decision.Message += fmt.Sprintf(" (%v)", err)
			return s, nil
		}
	}
	if len(started) == 0 {
		return s, nil
	}
	list, err := memberListOf(ctx, dial, timeout, t, started, dcfg)
	if err != nil {
		s.decision.Message += fmt.Sprintf(" (etcd: %v)", err)
		return s, nil
	}
	s.obs.Members = []tlsswitch.Member{}
	for _, m := range list.Members {
		s.obs.Members = append(s.obs.Members, tlsswitch.Member{Name: m.Name, Advertises: tlsswitch.FromURLs(m.ClientURLs)})
	}
	s.decision = tlsswitch.Decide(s.obs)
	if !s.decision.NeedAuth {
		return s, nil
	}
	// Before the operator stops presenting its client certificate: etcd's authentication,
	// read over TLS with that certificate (spec.auth may be gone while etcd keeps it on).
	s.obs.Auth, s.obs.AuthErr = tlsswitch.AuthUnknown, ""
	acfg := cfg
	if acfg == nil {
		if acfg, err = fallbackClientTLS(ctx, kc, c); err != nil {
			s.obs.AuthErr = err.Error()
		}
	}
	if acfg != nil {
		t.ClientScheme = "https"
		st, err := authStateOf(ctx, dial, timeout, t, started, acfg)
		switch {
		case err == nil && st.Enabled:
			s.obs.Auth = tlsswitch.AuthOn
		case err == nil:
			s.obs.Auth = tlsswitch.AuthOff
		case etcd.AuthRefused(err):
			// etcd refuses the certificate's user: authentication is on.
			s.obs.Auth = tlsswitch.AuthOn
		default:
			s.obs.AuthErr = err.Error()
		}
	}
	s.decision = tlsswitch.Decide(s.obs)
	return s, nil
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
func fallbackClientTLS(ctx context.Context, kc client.Client, c *v1alpha1.EtcdCluster) (*tls.Config, error) {
	name := v1alpha1.OperatorTLSSecretName(c.Name)
	s := &corev1.Secret{}
	if err := kc.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s); err != nil {
		return nil, fmt.Errorf("members still serve TLS only and the operator's client certificate %s cannot be read (%v): put tls.client back with acceptPlain: true until every member serves both", name, err)
	}
	cfg, _, err := tlsConfigFrom(c.Namespace, name, s.Data[certs.CertKey], s.Data[certs.KeyKey], s.Data[certs.CAKey], time.Now())
	return cfg, err
}

// dialTLS is the TLS configuration the operator dials the members with in this pass: none for
// plain HTTP, else cfg (the spec's), or its own certificate when the spec no longer has one.
func dialTLS(ctx context.Context, kc client.Client, c *v1alpha1.EtcdCluster, scheme string, cfg *tls.Config) *tls.Config {
	if scheme == "http" {
		return nil
	}
	if cfg == nil {
		cfg, _ = fallbackClientTLS(ctx, kc, c)
	}
	return cfg
}

// Package tlsswitch is the planner of a switch of the client port between plain HTTP and TLS
// on a live cluster. It is pure: an Observation in, a Decision out.
//
// etcd serves plain HTTP and TLS on the same port when --listen-client-urls names both
// schemes for one address (one listener, each connection told apart by its first bytes). So
// a switch never jumps: plain -> Both -> TLS, and TLS -> Both -> plain, each arrow a rolling
// restart that the rollout planner carries out one member at a time. At every moment there is
// one scheme that every member accepts (the members on the previous template and those on the
// current one), and the operator dials with it.
//
// The phase is derived on every pass from what runs, never from a record of ours: each member
// pod's --listen-client-urls (what its etcd was started with), the live StatefulSet's pod
// template (what a pod re-created now starts with), and, before a scheme is dropped, etcd's
// member list (the client URLs each member published when it started). A crash between any
// two steps is harmless: the next pass derives the same phase again.
package tlsswitch

import (
	"fmt"
	"sort"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Schemes is a set of client URL schemes.
type Schemes struct{ HTTP, HTTPS bool }

// Of is the set of schemes a mode serves.
func Of(m v1alpha1.ClientTLSMode) Schemes {
	switch m {
	case v1alpha1.ClientTLSPlain:
		return Schemes{HTTP: true}
	case v1alpha1.ClientTLSOnly:
		return Schemes{HTTPS: true}
	case v1alpha1.ClientTLSBoth:
		return Schemes{HTTP: true, HTTPS: true}
	}
	return Schemes{}
}

// Mode is the mode that serves s ("" for none).
func (s Schemes) Mode() v1alpha1.ClientTLSMode {
	switch {
	case s.HTTP && s.HTTPS:
		return v1alpha1.ClientTLSBoth
	case s.HTTP:
		return v1alpha1.ClientTLSPlain
	case s.HTTPS:
		return v1alpha1.ClientTLSOnly
	}
	return ""
}

func (s Schemes) and(o Schemes) Schemes { return Schemes{s.HTTP && o.HTTP, s.HTTPS && o.HTTPS} }

// covers reports whether s holds every scheme of o.
func (s Schemes) covers(o Schemes) bool { return (s.HTTP || !o.HTTP) && (s.HTTPS || !o.HTTPS) }

// FromURLs is the set of schemes of a list of URLs (http and https).
func FromURLs(urls []string) Schemes {
	var s Schemes
	for _, u := range urls {
		switch {
		case strings.HasPrefix(u, "https://"):
			s.HTTPS = true
		case strings.HasPrefix(u, "http://"):
			s.HTTP = true
		}
	}
	return s
}

// Pod is one existing member pod: its name and the schemes its etcd listens on, from its
// --listen-client-urls.
type Pod struct {
	Name   string
	Serves Schemes
}

// Member is one member of etcd's member list: its name ("" before it started) and the
// schemes of the client URLs it published.
type Member struct {
	Name       string
	Advertises Schemes
}

// Observation is what Decide needs. The caller must guarantee that Pods lists every existing
// member pod (deleting or not) and that Template is read from the live StatefulSet of this
// pass.
type Observation struct {
	// Target is what the spec asks for (values.ClientTarget).
	Target v1alpha1.ClientTLSMode
	// Template is what the live StatefulSet's pod template serves; "" when there is no
	// StatefulSet yet (nothing runs: the target is rendered at once).
	Template v1alpha1.ClientTLSMode
	Pods     []Pod
	// Members is etcd's member list read in this pass, nil when it was not read or etcd did
	// not answer. Decide asks for it (NeedMembers) before it drops a scheme.
	Members []Member
	// MembersErr says why Members is nil although Decide asked for it (etcd did not answer,
	// or there is no client certificate to ask with): Decide adds it to the message that asks
	// for the member list.
	MembersErr string
	// Auth is etcd's authentication as read in this pass over TLS with the operator's client
	// certificate. Decide asks for it (NeedAuth) before the operator stops dialing TLS.
	Auth Auth
	// AuthErr is why Auth is AuthUnknown: what the read failed with.
	AuthErr string
}

// Auth is what etcd said about its authentication in this pass.
type Auth int

const (
	// AuthNotRead : not asked in this pass.
	AuthNotRead Auth = iota
	// AuthUnknown : asked, and etcd did not answer.
	AuthUnknown
	// AuthOn : etcd reports its authentication on.
	AuthOn
	// AuthOff : etcd reports its authentication off.
	AuthOff
)

// Decision is the phase to render and how to dial.
type Decision struct {
	// Render is what the pod template serves after this pass.
	Render v1alpha1.ClientTLSMode
	// Dial is the scheme the operator reaches the members with in this pass: one that every
	// member pod and the template accept ("http" or "https").
	Dial string
	// NeedMembers is true when Render would drop a scheme and Members was nil: read etcd's
	// member list (dialing with Dial) and decide again.
	NeedMembers bool
	// NeedAuth is true when the operator would stop dialing TLS (its client certificate is its
	// identity in etcd) and Auth was not read: read etcd's authentication state over TLS with
	// the operator's certificate and decide again.
	NeedAuth bool
	// HeldForAuth is true when the switch holds because etcd's authentication is on, or its
	// state could not be read: the template keeps serving TLS and the operator dials it.
	HeldForAuth bool
	// Switching is true while the members do not all serve Target yet.
	Switching bool
	// Message says where the switch stands, for status ("" when none runs).
	Message string
}

// Decide returns the phase to render:
//
//   - with no StatefulSet, the target;
//   - the target when a scheme of it is accepted by every member pod and by the template, and
//     it drops no scheme that a member still needs: before the template stops serving a
//     scheme, every member pod must serve the target's schemes (their listeners, read from the
//     pods) and every member in etcd's member list must have published client URLs of them
//     (read from etcd). Else the template holds;
//   - Both otherwise: the intermediate phase every member can move to from either side.
func Decide(o Observation) Decision {
	target := Of(o.Target)
	if o.Template == "" {
		return Decision{Render: o.Target, Dial: dial(target, target, o.Target)}
	}
	tmpl := Of(o.Template)
	common := tmpl
	for _, p := range o.Pods {
		common = common.and(p.Serves)
	}
	d := Decision{Render: o.Target}
	if common.and(target) == (Schemes{}) {
		d.Render = v1alpha1.ClientTLSBoth
	}
	if want := d.Render; !Of(want).covers(tmpl) {
		// The template stops serving a scheme: only once every member serves the new phase.
		if why := notYet(Of(want), o); why != "" {
			d.Render = o.Template
			if why == needMembers {
				d.NeedMembers = true
				why = "reading etcd's member list"
			}
			d.Message = fmt.Sprintf("the pod template serves %s; %s before it moves to %s", o.Template, why, want)
		}
	}
	render := Of(d.Render)
	if d.NeedMembers {
		d.Dial = dial(common, tmpl, o.Target)
		if !target.HTTPS && common.HTTPS {
			// Leaving TLS: until etcd's member list, and then its authentication state, are
			// read, the operator keeps presenting its client certificate, its identity in etcd.
			d.Dial = "https"
		}
	} else {
		d.Dial = dial(common.and(render), common, o.Target)
	}
	if !d.NeedMembers && !target.HTTPS && common.HTTPS && (d.Dial != "https" || !render.HTTPS) && o.Auth != AuthOff {
		// The operator would stop dialing TLS, and with it stop presenting its client
		// certificate, its only identity in etcd: with etcd's authentication on it would be
		// locked out (and every client without a user with it). Only etcd tells whether it
		// is on (spec.auth may be gone while etcd keeps it): hold TLS until etcd says off.
		d.Render, d.Dial, render = o.Template, "https", tmpl
		switch o.Auth {
		case AuthNotRead:
			d.NeedAuth = true
			d.Message = fmt.Sprintf("the pod template serves %s; reading etcd's authentication state before the operator stops presenting its client certificate", o.Template)
		case AuthUnknown:
			d.HeldForAuth = true
			d.Message = fmt.Sprintf("the pod template keeps serving %s: etcd's authentication state could not be read (%s), and if it is on, dropping TLS takes the operator's client certificate, its identity in etcd, away and locks it out; waiting for etcd to answer", o.Template, o.AuthErr)
		case AuthOn:
			d.HeldForAuth = true
			d.Message = fmt.Sprintf("the pod template keeps serving %s: etcd's authentication is on, and serving plain HTTP only takes the operator's client certificate, its identity in etcd, away, which would lock it out of membership changes, maintenance and backups. Set spec.auth.enabled: false (the operator turns authentication off with its certificate); once etcd reports it off the switch to plain goes on", o.Template)
		}
	}
	on := 0
	for _, p := range o.Pods {
		if p.Serves == target {
			on++
		}
	}
	d.Switching = d.Render != o.Target || tmpl != target || on != len(o.Pods)
	switch {
	case !d.Switching:
		d.Message = ""
	case d.Message == "":
		d.Message = fmt.Sprintf("moving the client port from %s to %s: the pod template serves %s, %d of %d member pods serve %s; the operator dials %s",
			o.Template, o.Target, d.Render, countServing(o.Pods, render), len(o.Pods), d.Render, d.Dial)
	}
	if d.NeedMembers && o.MembersErr != "" {
		d.Message += fmt.Sprintf(" (%s)", o.MembersErr)
	}
	return d
}

// needMembers is notYet's answer when etcd's member list is needed and was not read.
const needMembers = "-"

// notYet says why the members cannot be restarted onto a template that serves want yet.
func notYet(want Schemes, o Observation) string {
	var slow []string
	for _, p := range o.Pods {
		if !p.Serves.covers(want) {
			slow = append(slow, p.Name)
		}
	}
	if len(slow) > 0 {
		sort.Strings(slow)
		return fmt.Sprintf("member pods %s do not listen on %s yet", strings.Join(slow, ", "), want.Mode())
	}
	if o.Members == nil {
		return needMembers
	}
	for _, m := range o.Members {
		switch {
		case m.Name == "":
			return "a member has not started yet (etcd's member list)"
		case !m.Advertises.covers(want):
			slow = append(slow, m.Name)
		}
	}
	if len(slow) > 0 {
		sort.Strings(slow)
		return fmt.Sprintf("members %s have not published %s client URLs in etcd's member list yet", strings.Join(slow, ", "), want.Mode())
	}
	return ""
}

// dial picks the scheme to dial from ok (accepted by every member), falling back to any of
// also, and preferring TLS unless the target is plain.
func dial(ok, also Schemes, target v1alpha1.ClientTLSMode) string {
	for _, s := range []Schemes{ok, also} {
		switch {
		case s.HTTPS && (!s.HTTP || target != v1alpha1.ClientTLSPlain):
			return "https"
		case s.HTTP:
			return "http"
		}
	}
	if target == v1alpha1.ClientTLSPlain {
		return "http"
	}
	return "https"
}

func countServing(pods []Pod, s Schemes) int {
	n := 0
	for _, p := range pods {
		if p.Serves == s {
			n++
		}
	}
	return n
}

// Status is status.tlsTransition's client side for decision d, nil when no switch runs.
func Status(o Observation, d Decision) *v1alpha1.ClientTLSTransition {
	if !d.Switching {
		return nil
	}
	return &v1alpha1.ClientTLSTransition{Phase: d.Render, Target: o.Target, Dial: d.Dial,
		MembersOnPhase: int32(countServing(o.Pods, Of(d.Render))), Members: int32(len(o.Pods)), Message: d.Message}
}

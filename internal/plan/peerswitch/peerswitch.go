// Package peerswitch is the planner of a switch of the peer side between plain HTTP and TLS
// on a live cluster. It is pure: an Observation in, a Decision out.
//
// Members reach each other at the peer URLs in etcd's member list, not at what their flags
// say, and a peer listener serves one scheme (unlike the client port, etcd cannot multiplex
// plain and TLS peers on one port). So the switch moves every member's peer URL through a
// second listener, the transition port, with etcd's MemberUpdate, one member at a time:
//
//	plain -> TLS: {http main}  -> {http main, https transition}   (restart round 1)
//	              URLs http main  -> https transition               (one MemberUpdate each)
//	              -> {https main, https transition}                 (restart round 2)
//	              URLs https transition -> https main               (one MemberUpdate each)
//	              -> {https main}                                   (restart round 3)
//
// and TLS -> plain the same way with the schemes swapped. At every moment every member's URL
// in the member list is served by every member pod and by the pod template: a pod restarted
// in any round serves the URL the others reach it at, and a URL moves only to a listener that
// every member pod already serves. Members have the peer certificate whenever any listener
// or URL is https, so they can dial each other's TLS listeners.
//
// The phase is derived on every pass from what runs, never from a record of ours: the live
// StatefulSet's pod template, the member pods' --listen-peer-urls and etcd's member list. A
// crash between any two steps is harmless: the next pass derives the same phase again, and
// a MemberUpdate to the URL a member already has changes nothing.
package peerswitch

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Schemes of the peer listeners.
const (
	HTTP  = "http"
	HTTPS = "https"
)

// Listeners is what a member's peer side serves: the scheme on the peer port and on the
// transition port ("" where nothing listens).
type Listeners struct {
	Main, Transition string
}

// TLS reports whether a listener of l is https: the members then need the peer certificate.
func (l Listeners) TLS() bool { return l.Main == HTTPS || l.Transition == HTTPS }

// Serves reports whether l serves the URL kind k.
func (l Listeners) Serves(k Kind) bool {
	if k.Transition {
		return l.Transition == k.Scheme
	}
	return l.Main == k.Scheme
}

func (l Listeners) String() string {
	if l.Transition == "" {
		return l.Main + " on the peer port"
	}
	return fmt.Sprintf("%s on the peer port and %s on the transition port", l.Main, l.Transition)
}

// Kind is where a peer URL points: its scheme, and whether its port is the transition port.
type Kind struct {
	Scheme     string
	Transition bool
}

func (k Kind) String() string {
	if k.Transition {
		return k.Scheme + " on the transition port"
	}
	return k.Scheme + " on the peer port"
}

// KindOf is the kind of a peer URL given the peer port; ok is false for a URL that cannot be
// parsed or has a scheme other than http and https.
func KindOf(raw string, peerPort int32) (k Kind, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != HTTP && u.Scheme != HTTPS) {
		return Kind{}, false
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return Kind{}, false
	}
	return Kind{Scheme: u.Scheme, Transition: int32(port) != peerPort}, true
}

// FromURLs is what a --listen-peer-urls value serves, given the peer port: a URL on another
// port is the transition listener.
func FromURLs(urls []string, peerPort int32) Listeners {
	var l Listeners
	for _, u := range urls {
		k, ok := KindOf(u, peerPort)
		switch {
		case !ok:
		case k.Transition:
			l.Transition = k.Scheme
		default:
			l.Main = k.Scheme
		}
	}
	return l
}

// Pod is one existing member pod: its name and what its etcd listens on, from its
// --listen-peer-urls.
type Pod struct {
	Name   string
	Serves Listeners
}

// Member is one member of etcd's member list.
type Member struct {
	ID uint64
	// Name is the member's name ("" before it started).
	Name string
	// PeerURLs are the URLs the others reach it at.
	PeerURLs []string
}

// Observation is what Decide needs. The caller must guarantee that Pods lists every existing
// member pod (deleting or not) and that Template is read from the live StatefulSet of this
// pass.
type Observation struct {
	// Target is the scheme the spec asks for: https with spec.tls.peer, else http.
	Target string
	// PeerPort is the peer port; URLs on any other port are on the transition port.
	PeerPort int32
	// Template is what the live StatefulSet's pod template serves; nil when there is no
	// StatefulSet (nothing runs: the target is rendered at once).
	Template *Listeners
	Pods     []Pod
	// Members is etcd's member list read in this pass; nil when it was not read or etcd did
	// not answer. Decide asks for it (NeedMembers) whenever the template or a pod serves
	// anything but the target.
	Members []Member
	// MembersErr says why Members is nil although Decide asked for it (etcd did not answer):
	// Decide adds it to the message that asks for the member list.
	MembersErr string
}

// Update is a member whose peer URL moves, with etcd's MemberUpdate.
type Update struct {
	ID     uint64
	Member string
	// From is its peer URLs now; To is the one URL it gets.
	From []string
	To   Kind
}

// Decision is the phase to render and the next URL to move.
type Decision struct {
	// Render is what the pod template serves after this pass.
	Render Listeners
	// Advertise is the URL kind the pod template advertises: the destination of the URLs that
	// are moving. etcd reads --initial-advertise-peer-urls only when a new cluster first
	// forms, so it changes nothing for running members; it stays put for a whole stage so
	// that the template changes once per stage.
	Advertise Kind
	// Join is the URL kind a member that joins now is added with (a scale-out, a
	// replacement): the destination once every member pod serves it, the source of the
	// moving URLs until then, so that every member pod can reach the joiner (pods on the
	// previous template may have no peer certificate to dial a TLS destination). A joiner
	// takes its own URL from --initial-cluster, which lists the member list's URLs.
	Join Kind
	// Update is the member whose URL moves in this pass, nil when none.
	Update *Update
	// NeedMembers is true when the decision needs etcd's member list and Members was nil:
	// read it and decide again. Render then holds the template.
	NeedMembers bool
	// Switching is true while the members do not all serve and advertise the target only.
	Switching bool
	// Message says where the switch stands, for status ("" when none runs).
	Message string
}

// Decide returns the phase to render and, when every member pod serves the destination of a
// URL that has not moved yet, the member to move:
//
//   - no StatefulSet: the target;
//   - the template and every pod serve the target only: nothing to do (the member list then
//     cannot point elsewhere, since the planner never moves a URL to a listener some pod lacks);
//   - else, from the member list: URLs on the peer port with the old scheme move to the
//     transition port first (which serves the target's scheme, or the scheme URLs on it
//     already have); once none is left, the peer port serves the target and URLs on the
//     transition port move back to it; once none is left, the transition listener goes.
func Decide(o Observation) Decision {
	goal := Kind{Scheme: o.Target}
	only := Listeners{Main: o.Target}
	if o.Template == nil {
		return Decision{Render: only, Advertise: goal, Join: goal}
	}
	settled := *o.Template == only
	for _, p := range o.Pods {
		settled = settled && p.Serves == only
	}
	if settled {
		return Decision{Render: only, Advertise: goal, Join: goal}
	}
	hold := Decision{Render: *o.Template, Advertise: advertised(*o.Template, o.Target), Switching: true}
	hold.Join = hold.Advertise
	if o.Members == nil {
		hold.NeedMembers = true
		hold.Message = fmt.Sprintf("the pod template serves %s; reading etcd's member list before it moves to %s", o.Template, only)
		if o.MembersErr != "" {
			hold.Message += fmt.Sprintf(" (%s)", o.MembersErr)
		}
		return hold
	}
	var wrong, right, onTransition []Member
	transitionSchemes := map[string]bool{}
	for _, m := range o.Members {
		for _, u := range m.PeerURLs {
			k, ok := KindOf(u, o.PeerPort)
			switch {
			case !ok:
				hold.Message = fmt.Sprintf("member %s has the peer URL %q, which is neither http nor https on a port: fix it with etcdctl member update", nameOr(m), u)
				return hold
			case k.Transition:
				transitionSchemes[k.Scheme] = true
				onTransition = appendOnce(onTransition, m)
			case k.Scheme == o.Target:
				right = appendOnce(right, m)
			default:
				wrong = appendOnce(wrong, m)
			}
		}
	}
	if len(transitionSchemes) > 1 || (len(wrong) > 0 && len(right) > 0) {
		hold.Message = fmt.Sprintf("etcd's member list has peer URLs of more schemes than one port can serve (%s): set them with etcdctl member update so that each port has one scheme", describe(o.Members))
		return hold
	}
	if len(wrong) == 0 && len(onTransition) == 0 {
		// Every URL is the target: the transition listener goes (a last restart round).
		d := Decision{Render: only, Advertise: goal, Join: goal, Switching: true}
		d.Message = fmt.Sprintf("every member's peer URL is %s; %d of %d member pods serve only that", goal, countServing(o.Pods, only), len(o.Pods))
		return d
	}
	d := Decision{Render: Listeners{Main: o.Target, Transition: o.Target}, Switching: true}
	for s := range transitionSchemes {
		d.Render.Transition = s
	}
	movers, dest, source := onTransition, goal, Kind{Scheme: d.Render.Transition, Transition: true}
	if len(wrong) > 0 {
		d.Render.Main = other(o.Target)
		movers, dest, source = wrong, Kind{Scheme: d.Render.Transition, Transition: true}, Kind{Scheme: d.Render.Main}
	}
	d.Advertise, d.Join = dest, dest
	var slow []string
	for _, p := range o.Pods {
		if !p.Serves.Serves(dest) {
			slow = append(slow, p.Name)
		}
	}
	if !o.Template.Serves(dest) && len(slow) == 0 {
		slow = append(slow, "the pod template")
	}
	sort.Strings(slow)
	sort.Slice(movers, func(i, j int) bool { return nameOr(movers[i]) < nameOr(movers[j]) })
	switch {
	case len(slow) > 0:
		d.Join = source
		d.Message = fmt.Sprintf("%d peer URLs move to %s once every member pod serves it; not yet: %s (the template serves %s)",
			len(movers), dest, strings.Join(slow, ", "), d.Render)
	case movers[0].Name == "":
		d.Message = fmt.Sprintf("member %s has not started yet; its peer URL moves to %s once it has", nameOr(movers[0]), dest)
	default:
		m := movers[0]
		d.Update = &Update{ID: m.ID, Member: m.Name, From: m.PeerURLs, To: dest}
		d.Message = fmt.Sprintf("moving the peer URL of %s to %s (%d left)", m.Name, dest, len(movers))
	}
	return d
}

// advertised is what a template advertises while it is held: the transition listener when
// there is one (the URLs move towards it or, with the target on the peer port, from it),
// else the peer port.
func advertised(l Listeners, target string) Kind {
	if l.Transition != "" && l.Main != target {
		return Kind{Scheme: l.Transition, Transition: true}
	}
	if l.Main == "" {
		return Kind{Scheme: target}
	}
	return Kind{Scheme: l.Main}
}

func other(s string) string {
	if s == HTTPS {
		return HTTP
	}
	return HTTPS
}

func appendOnce(ms []Member, m Member) []Member {
	for _, x := range ms {
		if x.ID == m.ID {
			return ms
		}
	}
	return append(ms, m)
}

func nameOr(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%x", m.ID)
}

func describe(ms []Member) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, nameOr(m)+"="+strings.Join(m.PeerURLs, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func countServing(pods []Pod, l Listeners) int {
	n := 0
	for _, p := range pods {
		if p.Serves == l {
			n++
		}
	}
	return n
}

// MovedURL is the peer URL from, moved to kind k: the same host, k's scheme, and the peer
// port or the transition port.
func MovedURL(from string, k Kind, peerPort, transitionPort int32) (string, error) {
	u, err := url.Parse(from)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("peer URL %q has no host", from)
	}
	port := peerPort
	if k.Transition {
		port = transitionPort
	}
	return (&url.URL{Scheme: k.Scheme, Host: net.JoinHostPort(u.Hostname(), strconv.Itoa(int(port)))}).String(), nil
}

// Status is status.tlsTransition's peer side for decision d, nil when no switch runs.
func Status(o Observation, d Decision) *v1alpha1.PeerTLSTransition {
	if !d.Switching {
		return nil
	}
	st := &v1alpha1.PeerTLSTransition{PeerPort: d.Render.Main, TransitionPort: d.Render.Transition, Target: o.Target,
		Members: int32(len(o.Members)), Message: d.Message}
	goal := Kind{Scheme: o.Target}
	for _, m := range o.Members {
		if len(m.PeerURLs) == 1 {
			if k, ok := KindOf(m.PeerURLs[0], o.PeerPort); ok && k == goal {
				st.MembersOnTarget++
			}
		}
	}
	return st
}

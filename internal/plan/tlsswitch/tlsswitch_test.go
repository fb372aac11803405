package tlsswitch

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

const (
	plain = v1alpha1.ClientTLSPlain
	both  = v1alpha1.ClientTLSBoth
	tlsOn = v1alpha1.ClientTLSOnly
)

// world builds an observation: the template and, per member, the mode its pod listens on and
// the mode it published in etcd (members nil: not read).
func world(target, tmpl v1alpha1.ClientTLSMode, pods []v1alpha1.ClientTLSMode, published []v1alpha1.ClientTLSMode) Observation {
	o := Observation{Target: target, Template: tmpl}
	for i, m := range pods {
		o.Pods = append(o.Pods, Pod{Name: fmt.Sprintf("e-%d", i), Serves: Of(m)})
	}
	if published != nil {
		o.Members = []Member{}
		for i, m := range published {
			o.Members = append(o.Members, Member{Name: fmt.Sprintf("e-%d", i), Advertises: Of(m)})
		}
	}
	return o
}

// withAuth is o with etcd's authentication read as a.
func withAuth(o Observation, a Auth) Observation {
	o.Auth = a
	if a == AuthUnknown {
		o.AuthErr = "context deadline exceeded"
	}
	return o
}

func authOff(o Observation) Observation { return withAuth(o, AuthOff) }

func three(m v1alpha1.ClientTLSMode) []v1alpha1.ClientTLSMode {
	return []v1alpha1.ClientTLSMode{m, m, m}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name        string
		o           Observation
		render      v1alpha1.ClientTLSMode
		dial        string
		needMembers bool
		needAuth    bool
		held        bool
		switching   bool
		msg         string
	}{
		{name: "new cluster renders the target at once", o: world(tlsOn, "", nil, nil), render: tlsOn, dial: "https"},
		{name: "new plain cluster", o: world(plain, "", nil, nil), render: plain, dial: "http"},
		{name: "settled plain", o: world(plain, plain, three(plain), nil), render: plain, dial: "http"},
		{name: "settled TLS", o: world(tlsOn, tlsOn, three(tlsOn), nil), render: tlsOn, dial: "https"},
		{name: "settled both (acceptPlain) dials TLS", o: world(both, both, three(both), nil), render: both, dial: "https"},

		{name: "plain to TLS starts with both", o: world(tlsOn, plain, three(plain), nil), render: both, dial: "http", switching: true},
		{name: "plain to both (acceptPlain)", o: world(both, plain, three(plain), nil), render: both, dial: "http", switching: true},
		{name: "rolling to both: keeps both, dials plain",
			o: world(tlsOn, both, []v1alpha1.ClientTLSMode{plain, both, plain}, nil), render: both, dial: "http", switching: true},
		{name: "every pod on both: etcd's member list is read first",
			o: world(tlsOn, both, three(both), nil), render: both, dial: "https", needMembers: true, switching: true, msg: "reading etcd's member list"},
		{name: "every pod on both, etcd's member list unread: says why",
			o: func() Observation {
				o := world(tlsOn, both, three(both), nil)
				o.MembersErr = "etcd: context deadline exceeded"
				return o
			}(), render: both, dial: "https", needMembers: true, switching: true, msg: "reading etcd's member list before it moves to TLS (etcd: context deadline exceeded)"},
		{name: "a reason unread with the member list read says nothing",
			o: func() Observation {
				o := world(tlsOn, both, three(both), three(both))
				o.MembersErr = "stale"
				return o
			}(), render: tlsOn, dial: "https", switching: true},
		{name: "a member has not published https yet: holds both",
			o: world(tlsOn, both, three(both), []v1alpha1.ClientTLSMode{both, plain, both}), render: both, dial: "https", switching: true,
			msg: "members e-1 have not published TLS client URLs"},
		{name: "a member has not started: holds both",
			o: func() Observation {
				o := world(tlsOn, both, three(both), three(both))
				o.Members = append(o.Members, Member{})
				return o
			}(), render: both, dial: "https", switching: true, msg: "a member has not started"},
		{name: "every member serves and published both: TLS only",
			o: world(tlsOn, both, three(both), three(both)), render: tlsOn, dial: "https", switching: true},
		{name: "acceptPlain holds both once there",
			o: world(both, both, three(both), nil), render: both, dial: "https"},
		{name: "rolling to TLS: dials TLS",
			o: world(tlsOn, tlsOn, []v1alpha1.ClientTLSMode{both, tlsOn, both}, nil), render: tlsOn, dial: "https", switching: true},

		{name: "TLS to plain starts with both, dials TLS", o: world(plain, tlsOn, three(tlsOn), nil), render: both, dial: "https", switching: true},
		{name: "rolling to both from TLS",
			o: world(plain, both, []v1alpha1.ClientTLSMode{tlsOn, both, both}, nil), render: both, dial: "https", switching: true},
		{name: "every pod on both towards plain: etcd's member list is read over TLS",
			o: world(plain, both, three(both), nil), render: both, dial: "https", needMembers: true, switching: true, msg: "reading etcd's member list"},
		{name: "every member on both: plain only, dials plain, once etcd reports auth off",
			o: authOff(world(plain, both, three(both), three(both))), render: plain, dial: "http", switching: true},
		{name: "every member on both: etcd's auth is read before the operator drops its certificate",
			o: world(plain, both, three(both), three(both)), render: both, dial: "https", needAuth: true, switching: true,
			msg: "reading etcd's authentication state"},
		{name: "every member on both, etcd's auth on: holds both, dials TLS, says how to go on",
			o: withAuth(world(plain, both, three(both), three(both)), AuthOn), render: both, dial: "https", held: true, switching: true,
			msg: "Set spec.auth.enabled: false"},
		{name: "every member on both, etcd's auth unknown: holds both, dials TLS",
			o: withAuth(world(plain, both, three(both), three(both)), AuthUnknown), render: both, dial: "https", held: true, switching: true,
			msg: "could not be read"},
		{name: "TLS to plain under auth still moves to both (TLS stays served)",
			o: withAuth(world(plain, tlsOn, three(tlsOn), nil), AuthOn), render: both, dial: "https", switching: true},
		{name: "rolling to plain",
			o: authOff(world(plain, plain, []v1alpha1.ClientTLSMode{both, plain, plain}, nil)), render: plain, dial: "http", switching: true},

		{name: "target flips back to plain mid-rollout to both: plain once etcd's member list agrees",
			o: world(plain, both, []v1alpha1.ClientTLSMode{plain, both, plain}, nil), render: both, dial: "http", needMembers: true, switching: true},
		{name: "target flips back to plain mid-rollout to both, member list read",
			o: world(plain, both, []v1alpha1.ClientTLSMode{plain, both, plain}, []v1alpha1.ClientTLSMode{plain, both, plain}), render: plain, dial: "http", switching: true},
		{name: "target flips back mid-rollout to TLS from a plain-bound template: both again",
			o: world(tlsOn, plain, []v1alpha1.ClientTLSMode{both, plain, both}, nil), render: both, dial: "http", switching: true},
		{name: "TLS target while some pods still plain never jumps",
			o: world(tlsOn, both, []v1alpha1.ClientTLSMode{both, both, plain}, three(both)), render: both, dial: "http", switching: true,
			msg: "2 of 3 member pods serve Both"},
		{name: "leaving both waits for every pod",
			o: world(plain, both, []v1alpha1.ClientTLSMode{both, tlsOn, both}, three(both)), render: both, dial: "https", switching: true,
			msg: "2 of 3 member pods serve Both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.o)
			if d.Render != c.render || d.Dial != c.dial || d.NeedMembers != c.needMembers || d.Switching != c.switching ||
				d.NeedAuth != c.needAuth || d.HeldForAuth != c.held {
				t.Fatalf("got render %s dial %s needMembers %v needAuth %v held %v switching %v (%q), want %s %s %v %v %v %v",
					d.Render, d.Dial, d.NeedMembers, d.NeedAuth, d.HeldForAuth, d.Switching, d.Message, c.render, c.dial, c.needMembers, c.needAuth, c.held, c.switching)
			}
			if !strings.Contains(d.Message, c.msg) {
				t.Fatalf("message %q does not say %q", d.Message, c.msg)
			}
			if c.switching != (Status(c.o, d) != nil) {
				t.Fatalf("status %+v for switching %v", Status(c.o, d), c.switching)
			}
		})
	}
}

// cluster is a simulated cluster: a template, each member's pod (mode it listens on, or ""
// while its pod is re-created) and what it published in etcd.
type cluster struct {
	tmpl      v1alpha1.ClientTLSMode
	pods      []v1alpha1.ClientTLSMode
	published []v1alpha1.ClientTLSMode
}

func (c *cluster) observe(target v1alpha1.ClientTLSMode, withMembers bool) Observation {
	o := Observation{Target: target, Template: c.tmpl}
	for i, m := range c.pods {
		if m != "" {
			o.Pods = append(o.Pods, Pod{Name: fmt.Sprintf("e-%d", i), Serves: Of(m)})
		}
	}
	if withMembers {
		o.Members = []Member{}
		for i, m := range c.published {
			name := fmt.Sprintf("e-%d", i)
			if c.pods[i] == "" {
				name = "e-x" // restarting: its old attributes stay in the list
			}
			o.Members = append(o.Members, Member{Name: name, Advertises: Of(m)})
		}
	}
	return o
}

// accepts reports whether every running member and the template accept scheme.
func (c *cluster) accepts(scheme string) bool {
	ok := func(m v1alpha1.ClientTLSMode) bool {
		s := Of(m)
		return (scheme == "http" && s.HTTP) || (scheme == "https" && s.HTTPS)
	}
	if !ok(c.tmpl) {
		return false
	}
	for _, m := range c.pods {
		if m != "" && !ok(m) {
			return false
		}
	}
	return true
}

// TestSwitchSimulated runs plain -> TLS -> plain (and through acceptPlain) on a simulated
// cluster whose rollout restarts one member at a time in any order, with the operator
// crashing (forgetting everything) between any two steps: each pass derives the phase from
// the world alone. At every moment every member accepts the scheme the operator dials, and
// the template never stops serving a scheme a member still needs.
func TestSwitchSimulated(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		c := &cluster{tmpl: plain, pods: three(plain), published: three(plain)}
		for _, target := range []v1alpha1.ClientTLSMode{tlsOn, plain, both, tlsOn, both, plain} {
			for pass := 0; ; pass++ {
				if pass > 200 {
					t.Fatalf("seed %d: no convergence to %s: %+v", seed, target, c)
				}
				d := Decide(c.observe(target, false))
				if d.NeedMembers {
					d = Decide(c.observe(target, true))
				}
				if d.NeedAuth {
					o := c.observe(target, true)
					o.Auth = AuthOff
					d = Decide(o)
				}
				// Before the template moves: some scheme is accepted by every member and by both
				// templates (pods re-created now may start from either).
				if !c.accepts(d.Dial) {
					t.Fatalf("seed %d: the operator dials %s, which not every member accepts: %+v", seed, d.Dial, c)
				}
				old := c.tmpl
				c.tmpl = d.Render
				if Of(old).and(Of(c.tmpl)) == (Schemes{}) {
					t.Fatalf("seed %d: template jumped from %s to %s", seed, old, c.tmpl)
				}
				if !c.accepts(d.Dial) {
					t.Fatalf("seed %d: after rendering %s the operator dials %s, which not every member accepts: %+v", seed, c.tmpl, d.Dial, c)
				}
				// The world moves: a restarting pod comes back on the template, or an outdated
				// one is deleted (one at a time), or nothing happens.
				done := true
				for i := range c.pods {
					if c.pods[i] == "" || c.pods[i] != c.tmpl || c.published[i] != c.tmpl {
						done = false
					}
				}
				if done && !d.Switching && c.tmpl == target {
					break
				}
				restarting := -1
				for i, m := range c.pods {
					if m == "" {
						restarting = i
					}
				}
				switch {
				case restarting >= 0 && rng.Intn(2) == 0:
					c.pods[restarting] = c.tmpl
				case restarting >= 0:
					c.pods[restarting] = c.tmpl
					c.published[restarting] = c.tmpl
				default:
					var outdated []int
					for i, m := range c.pods {
						if m != c.tmpl {
							outdated = append(outdated, i)
						} else if c.published[i] != m && rng.Intn(2) == 0 {
							c.published[i] = m
						}
					}
					if len(outdated) > 0 && rng.Intn(3) > 0 {
						c.pods[outdated[rng.Intn(len(outdated))]] = ""
					}
				}
			}
		}
	}
}

// TestSwitchToPlainKeepsTheCertificateUnderAuth: leaving TLS (tls.client removed) while
// etcd's authentication is on, the operator never dials plain HTTP (it would present no
// client certificate, so be no user) and the template never stops serving TLS, whatever the
// members do, until etcd reports authentication off; then the switch completes.
func TestSwitchToPlainKeepsTheCertificateUnderAuth(t *testing.T) {
	for seed := int64(0); seed < 100; seed++ {
		rng := rand.New(rand.NewSource(seed))
		c := &cluster{tmpl: both, pods: three(both), published: three(both)}
		authOnFor := 5 + rng.Intn(30)
		for pass := 0; ; pass++ {
			if pass > 300 {
				t.Fatalf("seed %d: no convergence to plain: %+v", seed, c)
			}
			on := pass < authOnFor
			d := Decide(c.observe(plain, false))
			if d.NeedMembers {
				d = Decide(c.observe(plain, true))
			}
			if d.NeedAuth {
				o := c.observe(plain, true)
				o.Auth = AuthOff
				if on {
					o.Auth = AuthOn
					if rng.Intn(4) == 0 {
						o.Auth = AuthUnknown
					}
				}
				d = Decide(o)
			}
			c.tmpl = d.Render
			if on && (d.Dial != "https" || !Of(c.tmpl).HTTPS) {
				t.Fatalf("seed %d pass %d: with etcd's auth on the operator dials %s, template %s", seed, pass, d.Dial, c.tmpl)
			}
			if !c.accepts(d.Dial) {
				t.Fatalf("seed %d: the operator dials %s, which not every member accepts: %+v", seed, d.Dial, c)
			}
			if !on && !d.Switching && c.tmpl == plain {
				break
			}
			// The rollout restarts an outdated pod onto the template, or a restarted one
			// publishes its URLs.
			for i := range c.pods {
				if c.pods[i] != c.tmpl && rng.Intn(2) == 0 {
					c.pods[i], c.published[i] = c.tmpl, c.tmpl
					break
				}
			}
		}
	}
}

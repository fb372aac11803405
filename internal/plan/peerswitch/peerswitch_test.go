package peerswitch

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

const (
	peerPort       = 2380
	transitionPort = 2382
)

func peerURL(pod string, k Kind) string {
	port := peerPort
	if k.Transition {
		port = transitionPort
	}
	return fmt.Sprintf("%s://%s.etcd.ns.svc.cluster.local:%d", k.Scheme, pod, port)
}

var (
	httpMain  = Kind{Scheme: HTTP}
	httpsMain = Kind{Scheme: HTTPS}
	httpTr    = Kind{Scheme: HTTP, Transition: true}
	httpsTr   = Kind{Scheme: HTTPS, Transition: true}
)

func members(kinds ...Kind) []Member {
	var out []Member
	for i, k := range kinds {
		name := fmt.Sprintf("etcd-%d", i)
		out = append(out, Member{ID: uint64(i + 1), Name: name, PeerURLs: []string{peerURL(name, k)}})
	}
	return out
}

func pods(ls ...Listeners) []Pod {
	var out []Pod
	for i, l := range ls {
		out = append(out, Pod{Name: fmt.Sprintf("etcd-%d", i), Serves: l})
	}
	return out
}

func TestDecide(t *testing.T) {
	plain, tlsOnly := Listeners{Main: HTTP}, Listeners{Main: HTTPS}
	a := Listeners{Main: HTTP, Transition: HTTPS}  // plain -> TLS, round 1
	b := Listeners{Main: HTTPS, Transition: HTTPS} // plain -> TLS, round 2
	ra := Listeners{Main: HTTPS, Transition: HTTP} // TLS -> plain, round 1
	rb := Listeners{Main: HTTP, Transition: HTTP}  // TLS -> plain, round 2
	for _, tc := range []struct {
		name       string
		o          Observation
		render     Listeners
		advertise  Kind
		join       Kind   // zero: the same as advertise
		update     string // "member->kind"
		need       bool
		switching  bool
		msgContain string
	}{
		{name: "new cluster renders the target", o: Observation{Target: HTTPS}, render: tlsOnly, advertise: httpsMain},
		{name: "settled plain needs no member list", o: Observation{Target: HTTP, Template: &plain, Pods: pods(plain, plain, plain)}, render: plain, advertise: httpMain},
		{name: "settled TLS", o: Observation{Target: HTTPS, Template: &tlsOnly, Pods: pods(tlsOnly, tlsOnly)}, render: tlsOnly, advertise: httpsMain},
		{name: "TLS asked: the member list is read first", o: Observation{Target: HTTPS, Template: &plain, Pods: pods(plain, plain, plain)},
			render: plain, advertise: httpMain, need: true, switching: true},
		{name: "TLS asked: the member list unread says why", o: Observation{Target: HTTPS, Template: &plain, Pods: pods(plain, plain, plain), MembersErr: "etcd: context deadline exceeded"},
			render: plain, advertise: httpMain, need: true, switching: true, msgContain: "reading etcd's member list before it moves to https on the peer port (etcd: context deadline exceeded)"},
		{name: "TLS asked: round 1 adds the TLS transition listener", o: Observation{Target: HTTPS, Template: &plain, Pods: pods(plain, plain, plain), Members: members(httpMain, httpMain, httpMain)},
			render: a, advertise: httpsTr, join: httpMain, switching: true, msgContain: "not yet"},
		{name: "round 1 half done: no URL moves", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, plain, a), Members: members(httpMain, httpMain, httpMain)},
			render: a, advertise: httpsTr, join: httpMain, switching: true, msgContain: "not yet: etcd-1 "},
		{name: "round 1 done: the first URL moves", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a, a), Members: members(httpMain, httpMain, httpMain)},
			render: a, advertise: httpsTr, update: "etcd-0->https on the transition port", switching: true},
		{name: "a pod being re-created holds the URLs", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a), Members: members(httpMain, httpsTr, httpMain)},
			render: a, advertise: httpsTr, update: "etcd-0->https on the transition port", switching: true},
		{name: "the next URL moves", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a, a), Members: members(httpsTr, httpMain, httpMain)},
			render: a, advertise: httpsTr, update: "etcd-1->https on the transition port", switching: true},
		{name: "all on the transition port: round 2 serves TLS on the peer port", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a, a), Members: members(httpsTr, httpsTr, httpsTr)},
			render: b, advertise: httpsMain, join: httpsTr, switching: true, msgContain: "not yet"},
		{name: "round 2 done: URLs move back to the peer port", o: Observation{Target: HTTPS, Template: &b, Pods: pods(b, b, b), Members: members(httpsMain, httpsTr, httpsTr)},
			render: b, advertise: httpsMain, update: "etcd-1->https on the peer port", switching: true},
		{name: "all URLs TLS on the peer port: round 3 drops the transition listener", o: Observation{Target: HTTPS, Template: &b, Pods: pods(b, b, b), Members: members(httpsMain, httpsMain, httpsMain)},
			render: tlsOnly, advertise: httpsMain, switching: true},
		{name: "round 3 half done", o: Observation{Target: HTTPS, Template: &tlsOnly, Pods: pods(tlsOnly, b, tlsOnly), Members: members(httpsMain, httpsMain, httpsMain)},
			render: tlsOnly, advertise: httpsMain, switching: true},
		{name: "TLS removed: round 1 adds a plain transition listener", o: Observation{Target: HTTP, Template: &tlsOnly, Pods: pods(tlsOnly, tlsOnly, tlsOnly), Members: members(httpsMain, httpsMain, httpsMain)},
			render: ra, advertise: httpTr, join: httpsMain, switching: true},
		{name: "TLS removed: URLs move to plain on the transition port", o: Observation{Target: HTTP, Template: &ra, Pods: pods(ra, ra, ra), Members: members(httpsMain, httpsMain, httpsMain)},
			render: ra, advertise: httpTr, update: "etcd-0->http on the transition port", switching: true},
		{name: "TLS removed: round 2", o: Observation{Target: HTTP, Template: &ra, Pods: pods(ra, ra, ra), Members: members(httpTr, httpTr, httpTr)},
			render: rb, advertise: httpMain, join: httpTr, switching: true},
		{name: "TLS removed: back to the peer port", o: Observation{Target: HTTP, Template: &rb, Pods: pods(rb, rb, rb), Members: members(httpTr, httpMain, httpTr)},
			render: rb, advertise: httpMain, update: "etcd-0->http on the peer port", switching: true},
		{name: "target flipped back in round 1's URL moves: URLs go straight back", o: Observation{Target: HTTP, Template: &a, Pods: pods(a, a, a), Members: members(httpsTr, httpMain, httpMain)},
			render: a, advertise: httpMain, update: "etcd-0->http on the peer port", switching: true},
		{name: "target flipped back in round 2's URL moves: peer-port URLs return to the transition port", o: Observation{Target: HTTP, Template: &b, Pods: pods(b, b, b), Members: members(httpsMain, httpsTr, httpsTr)},
			render: b, advertise: httpsTr, update: "etcd-0->https on the transition port", switching: true},
		{name: "an unstarted member waits", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a, a),
			Members: []Member{{ID: 9, PeerURLs: []string{peerURL("etcd-0", httpMain)}}, {ID: 2, Name: "etcd-1", PeerURLs: []string{peerURL("etcd-1", httpsTr)}}}},
			render: a, advertise: httpsTr, switching: true, msgContain: "has not started"},
		{name: "two schemes on the peer port hold the template", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a, a), Members: members(httpMain, httpsMain)},
			render: a, advertise: httpsTr, switching: true, msgContain: "more schemes than one port"},
		{name: "two schemes on the transition port hold the template", o: Observation{Target: HTTPS, Template: &b, Pods: pods(b, b), Members: members(httpTr, httpsTr)},
			render: b, advertise: httpsMain, switching: true, msgContain: "more schemes than one port"},
		{name: "a URL that is not http(s) holds the template", o: Observation{Target: HTTPS, Template: &a, Pods: pods(a), Members: []Member{{ID: 1, Name: "etcd-0", PeerURLs: []string{"unix://x"}}}},
			render: a, advertise: httpsTr, switching: true, msgContain: "member update"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.PeerPort = peerPort
			d := Decide(tc.o)
			if d.Render != tc.render || d.Advertise != tc.advertise || d.NeedMembers != tc.need || d.Switching != tc.switching {
				t.Fatalf("Decide = render %v advertise %v need %v switching %v (%s); want %v %v %v %v", d.Render, d.Advertise, d.NeedMembers, d.Switching, d.Message, tc.render, tc.advertise, tc.need, tc.switching)
			}
			got := ""
			if d.Update != nil {
				got = d.Update.Member + "->" + d.Update.To.String()
			}
			if got != tc.update {
				t.Fatalf("update = %q, want %q (%s)", got, tc.update, d.Message)
			}
			if !strings.Contains(d.Message, tc.msgContain) {
				t.Fatalf("message %q does not contain %q", d.Message, tc.msgContain)
			}
			if join := tc.join; join != d.Join && (join != (Kind{}) || d.Join != d.Advertise) {
				t.Fatalf("join = %v, want %v (advertise %v)", d.Join, tc.join, d.Advertise)
			}
			if tc.switching && d.Message == "" {
				t.Fatal("a switch without a message")
			}
		})
	}
}

// world is a model of a cluster under the switch: a template, pods that restart onto it one
// at a time (when the rollout restarts them), and etcd's member list.
type world struct {
	template Listeners
	pods     []Listeners
	urls     []Kind
}

// check is the invariant the switch keeps: every member's URL is served by every pod (so a
// member is reachable by the others at any moment) and by the template (so a pod re-created
// now serves its own URL), and pods have the peer certificate whenever a URL is https.
func (w *world) check() string {
	for i, u := range w.urls {
		if !w.template.Serves(u) {
			return fmt.Sprintf("member %d's URL %v is not served by the template %v", i, u, w.template)
		}
		for j, p := range w.pods {
			if !p.Serves(u) {
				return fmt.Sprintf("member %d's URL %v is not served by pod %d (%v)", i, u, j, p)
			}
			if u.Scheme == HTTPS && !p.TLS() {
				return fmt.Sprintf("pod %d has no peer certificate but member %d's URL is https", j, i)
			}
		}
	}
	return ""
}

func (w *world) observe(target string, withMembers bool) Observation {
	o := Observation{Target: target, PeerPort: peerPort, Template: &w.template}
	tmpl := w.template
	o.Template = &tmpl
	for i, p := range w.pods {
		o.Pods = append(o.Pods, Pod{Name: fmt.Sprintf("etcd-%d", i), Serves: p})
	}
	if withMembers {
		o.Members = members(w.urls...)
	}
	return o
}

// TestSimulatedSwitches runs switches back and forth in a model world, with the target
// flipped at random moments and pods restarted in random order, a decision at a time (each
// pass starts from what runs, as after an operator crash), and checks the invariant after
// every action, and that each switch ends with every URL and pod on the target.
func TestSimulatedSwitches(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		n := 1 + rng.Intn(5)
		w := &world{template: Listeners{Main: HTTP}}
		for i := 0; i < n; i++ {
			w.pods = append(w.pods, Listeners{Main: HTTP})
			w.urls = append(w.urls, httpMain)
		}
		target := HTTPS
		var trace []string
		// Template changes (listeners or advertised URL) of the switch under way: each is a
		// restart round, and a switch that is not turned around midway takes three.
		type tmpl struct {
			l Listeners
			a Kind
		}
		last, changes, clean := tmpl{l: w.template, a: httpMain}, 0, true
		for step := 0; ; step++ {
			if step > 400 {
				t.Fatalf("seed %d: no convergence: %s", seed, strings.Join(trace, "; "))
			}
			if rng.Intn(25) == 0 {
				target = other(target)
				trace = append(trace, "target "+target)
				clean = false
			}
			d := Decide(w.observe(target, false))
			if d.NeedMembers {
				d = Decide(w.observe(target, true))
			}
			w.template = d.Render
			if now := (tmpl{d.Render, d.Advertise}); now != last {
				last, changes = now, changes+1
			}
			if why := w.check(); why != "" {
				t.Fatalf("seed %d: after rendering %v: %s; trace %s", seed, d.Render, why, strings.Join(trace, "; "))
			}
			if len(w.urls) < 7 && rng.Intn(15) == 0 {
				// A member joins (a scale-out or a replacement): added with the advertised URL,
				// its pod started from the template.
				w.urls = append(w.urls, d.Join)
				w.pods = append(w.pods, w.template)
				trace = append(trace, fmt.Sprintf("join %d at %v", len(w.urls)-1, d.Join))
			} else if d.Update != nil {
				var k int
				fmt.Sscanf(d.Update.Member, "etcd-%d", &k)
				w.urls[k] = d.Update.To
				trace = append(trace, fmt.Sprintf("url %d->%v", k, d.Update.To))
			} else {
				// The rollout restarts one pod whose listeners differ from the template.
				var stale []int
				for i, p := range w.pods {
					if p != w.template {
						stale = append(stale, i)
					}
				}
				if len(stale) == 0 {
					if !d.Switching {
						if clean && changes > 3 {
							t.Fatalf("seed %d: %d template changes (restart rounds) in one switch, want 3; trace %s", seed, changes, strings.Join(trace, "; "))
						}
						changes, clean = 0, true
						if target == HTTPS && rng.Intn(2) == 0 {
							target = HTTP
							trace = append(trace, "target http")
							continue
						}
						break
					}
					t.Fatalf("seed %d: switching with nothing to do: %s; trace %s", seed, d.Message, strings.Join(trace, "; "))
				}
				k := stale[rng.Intn(len(stale))]
				w.pods[k] = w.template
				trace = append(trace, fmt.Sprintf("restart %d onto %v", k, w.template))
			}
			if why := w.check(); why != "" {
				t.Fatalf("seed %d: %s; trace %s", seed, why, strings.Join(trace, "; "))
			}
		}
		for i, u := range w.urls {
			if u != (Kind{Scheme: target}) || w.pods[i] != (Listeners{Main: target}) {
				t.Fatalf("seed %d: ended with member %d on %v, pod %v; target %s", seed, i, u, w.pods[i], target)
			}
		}
	}
}

func TestMovedURL(t *testing.T) {
	got, err := MovedURL("http://etcd-0.etcd.ns.svc.cluster.local:2380", httpsTr, 2380, 2382)
	if err != nil || got != "https://etcd-0.etcd.ns.svc.cluster.local:2382" {
		t.Fatalf("MovedURL = %q, %v", got, err)
	}
	got, err = MovedURL("https://[fd00::1]:2382", httpsMain, 2380, 2382)
	if err != nil || got != "https://[fd00::1]:2380" {
		t.Fatalf("MovedURL = %q, %v", got, err)
	}
	if _, err := MovedURL("etcd-0", httpsMain, 2380, 2382); err == nil {
		t.Fatal("a URL without a host moved")
	}
}

package certificates

import (
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func want() Want {
	return Want{
		CASecret: "e-ca", CACommonName: "ca", CAValidity: 10 * 365 * 24 * time.Hour,
		Leaves: []Leaf{
			{Secret: "e-peer-tls", Request: certs.Request{CommonName: "e-peer", DNSNames: []string{"*.e.ns.svc"}, Server: true, Client: true, Validity: 90 * 24 * time.Hour}},
			{Secret: "e-operator-client-tls", Request: certs.Request{CommonName: "etcd-pilot", Client: true, Validity: 90 * 24 * time.Hour}},
		},
	}
}

// apply carries the steps out the way the controller does, into observed.
func apply(t *testing.T, w Want, steps []Step, observed map[string]Material, now time.Time) {
	t.Helper()
	for _, s := range steps {
		switch s.Kind {
		case CreateCA:
			ca, err := certs.NewCA(w.CACommonName, now, w.CAValidity)
			if err != nil {
				t.Fatal(err)
			}
			observed[s.Secret] = Material{Cert: ca.Cert, Key: ca.Key, CA: ca.Cert}
		case IssueLeaf:
			ca := observed[w.CASecret]
			p, err := certs.Issue(certs.KeyPair{Cert: ca.Cert, Key: ca.Key}, s.Leaf.Request, now)
			if err != nil {
				t.Fatal(err)
			}
			observed[s.Secret] = Material{Cert: p.Cert, Key: p.Key, CA: ca.CA}
		}
	}
}

func kinds(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, string(s.Kind)+" "+s.Secret+" "+s.Reason)
	}
	return out
}

func TestPlan(t *testing.T) {
	w := want()
	obs := map[string]Material{}
	steps, _, p := Plan(w, obs, t0)
	if p != nil || len(steps) != 3 || steps[0].Kind != CreateCA {
		t.Fatalf("from nothing: %v %v", kinds(steps), p)
	}
	apply(t, w, steps, obs, t0)

	// Everything in place: nothing to do, every expiry reported.
	steps, exp, p := Plan(w, obs, t0.Add(time.Hour))
	if p != nil || len(steps) != 0 || len(exp) != 3 {
		t.Fatalf("settled: %v %v %v", kinds(steps), exp, p)
	}
	for _, e := range exp {
		if e.Secret != w.CASecret && !e.RenewAt.Equal(t0.Add(-5*time.Minute).Add((90*24*time.Hour+5*time.Minute)*2/3)) {
			t.Fatalf("renewAt of %s: %v", e.Secret, e.RenewAt)
		}
	}

	cases := []struct {
		name   string
		edit   func(w *Want, obs map[string]Material)
		at     time.Time
		expect []string
	}{
		{"a leaf deleted", func(_ *Want, o map[string]Material) { delete(o, "e-peer-tls") }, t0, []string{"IssueLeaf e-peer-tls Missing"}},
		{"a leaf garbled", func(_ *Want, o map[string]Material) { m := o["e-peer-tls"]; m.Cert = []byte("x"); o["e-peer-tls"] = m }, t0, []string{"IssueLeaf e-peer-tls Unreadable"}},
		{"a leaf's key swapped", func(_ *Want, o map[string]Material) {
			m := o["e-peer-tls"]
			m.Key = o["e-operator-client-tls"].Key
			o["e-peer-tls"] = m
		}, t0, []string{"IssueLeaf e-peer-tls NotSignedByCA"}},
		{"names changed (extraSANs)", func(w *Want, _ map[string]Material) {
			w.Leaves[0].Request.DNSNames = append(w.Leaves[0].Request.DNSNames, "etcd.example")
		}, t0, []string{"IssueLeaf e-peer-tls NamesChanged"}},
		{"two thirds of the lifetime passed", func(*Want, map[string]Material) {}, t0.Add(61 * 24 * time.Hour),
			[]string{"IssueLeaf e-peer-tls DueForRenewal", "IssueLeaf e-operator-client-tls DueForRenewal"}},
		{"renewBefore", func(w *Want, _ map[string]Material) { w.RenewBefore = 10 * 24 * time.Hour }, t0.Add(81 * 24 * time.Hour),
			[]string{"IssueLeaf e-peer-tls DueForRenewal", "IssueLeaf e-operator-client-tls DueForRenewal"}},
		{"trust bundle differs", func(_ *Want, o map[string]Material) {
			m := o["e-operator-client-tls"]
			m.CA = append(append([]byte{}, m.CA...), m.CA...)
			o["e-operator-client-tls"] = m
		}, t0, []string{"IssueLeaf e-operator-client-tls TrustBundleChanged"}},
		{"an application's certificate in the revocation list (listed again before its Secret was emptied)", func(w *Want, o map[string]Material) {
			w.Leaves[1].Application = "app"
			leaf, _ := certs.Parse(o["e-operator-client-tls"].Cert)
			w.Revoked = map[string]bool{certs.Serial(leaf): true}
		}, t0, []string{"IssueLeaf e-operator-client-tls Revoked"}},
		{"a member's certificate is never the list's", func(w *Want, o map[string]Material) {
			leaf, _ := certs.Parse(o["e-peer-tls"].Cert)
			w.Revoked = map[string]bool{certs.Serial(leaf): true}
		}, t0, nil},
		{"signed by another CA", func(_ *Want, o map[string]Material) {
			other, _ := certs.NewCA("other", t0, time.Hour*24*365)
			p, _ := certs.Issue(other, want().Leaves[0].Request, t0)
			o["e-peer-tls"] = Material{Cert: p.Cert, Key: p.Key, CA: other.Cert}
		}, t0, []string{"IssueLeaf e-peer-tls NotSignedByCA"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w2 := want()
			o2 := map[string]Material{}
			for k, v := range obs {
				o2[k] = v
			}
			tc.edit(&w2, o2)
			steps, _, p := Plan(w2, o2, tc.at)
			if p != nil {
				t.Fatal(p)
			}
			got := kinds(steps)
			if len(got) != len(tc.expect) {
				t.Fatalf("got %v, want %v", got, tc.expect)
			}
			for i := range got {
				if got[i] != tc.expect[i] {
					t.Fatalf("got %v, want %v", got, tc.expect)
				}
			}
			// Carrying the steps out settles it.
			apply(t, w2, steps, o2, tc.at)
			if again, _, _ := Plan(w2, o2, tc.at); len(again) != 0 {
				t.Fatalf("not settled after the steps: %v", kinds(again))
			}
		})
	}

	// A formed cluster's CA is never created anew, whether or not the leaves are there.
	w.Formed = true
	o4 := map[string]Material{}
	for k, v := range obs {
		if k != "e-ca" {
			o4[k] = v
		}
	}
	for _, o := range []map[string]Material{o4, {}} {
		if steps, _, p := Plan(w, o, t0); p == nil || len(steps) != 0 {
			t.Fatalf("missing CA of a formed cluster: %v %v", kinds(steps), p)
		}
	}
	w.Formed = false

	// A CA Secret that cannot be read is never replaced.
	o3 := map[string]Material{"e-ca": {Cert: []byte("garbage")}}
	if steps, _, p := Plan(w, o3, t0); p == nil || len(steps) != 0 {
		t.Fatalf("unreadable CA: %v %v", kinds(steps), p)
	}
}

// TestCARotation walks a rotation the way the controller carries it out, with members that
// restart onto a new trust generation only when the test says so: the planner never moves on
// before the members trust the next CA, and never drops the old CA before every member
// serves certificates of the new one.
func TestCARotation(t *testing.T) {
	w := want()
	obs := map[string]Material{}
	steps, _, _ := Plan(w, obs, t0)
	apply(t, w, steps, obs, t0)
	oldCA := obs["e-ca"].Cert
	members := int64(0) // the generation every member runs with
	served := false     // every member serves certificates of the current CA

	run := func(now time.Time) []string {
		t.Helper()
		w.MembersOnGeneration = members
		w.ServedByCurrentCA = served
		steps, _, p := Plan(w, obs, now)
		if p != nil {
			t.Fatal(p)
		}
		for _, s := range steps {
			switch s.Kind {
			case StartCARotation:
				cur := obs["e-ca"]
				next, _ := certs.NewCA("next", now, w.CAValidity)
				cur.NextCert, cur.NextKey = next.Cert, next.Key
				cur.CA = append(append([]byte{}, cur.CA...), next.Cert...)
				cur.Generation++
				cur.RotationRequest = w.RotationRequest
				obs["e-ca"] = cur
			case SwitchCA:
				cur := obs["e-ca"]
				cur.Cert, cur.Key, cur.NextCert, cur.NextKey = cur.NextCert, cur.NextKey, nil, nil
				obs["e-ca"] = cur
			case DropOldCA:
				cur := obs["e-ca"]
				cur.CA = cur.Cert
				cur.Generation++
				obs["e-ca"] = cur
			default:
				apply(t, w, []Step{s}, obs, now)
			}
		}
		return kinds(steps)
	}
	if got := run(t0); len(got) != 0 {
		t.Fatalf("rotation without a request: %v", got)
	}
	w.RotationRequest = "2026-03-01"
	if got := run(t0); len(got) != 1 || got[0] != "StartCARotation e-ca RotationRequested" {
		t.Fatalf("start: %v", got)
	}
	// The leaves take the new bundle, still signed by the old CA.
	if got := run(t0); len(got) != 2 || got[0] != "IssueLeaf e-peer-tls TrustBundleChanged" {
		t.Fatalf("bundle to the leaves: %v", got)
	}
	if Rotation(obs, "e-ca") == "" {
		t.Fatal("no rotation reported while one runs")
	}
	// Members still on generation 0: nothing moves.
	if got := run(t0); len(got) != 0 {
		t.Fatalf("moved on before the members trust the next CA: %v", got)
	}
	members = 1
	if got := run(t0); len(got) != 1 || got[0] != "SwitchCA e-ca MembersTrustTheNextCA" {
		t.Fatalf("switch: %v", got)
	}
	if got := run(t0); len(got) != 2 || got[0] != "IssueLeaf e-peer-tls NotSignedByCA" {
		t.Fatalf("leaves from the new CA: %v", got)
	}
	if got := run(t0); len(got) != 0 {
		t.Fatalf("dropped the old CA before every member served the new one: %v", got)
	}
	served = true
	if got := run(t0); len(got) != 1 || got[0] != "DropOldCA e-ca EveryMemberServesTheNewCA" {
		t.Fatalf("drop: %v", got)
	}
	if got := run(t0); len(got) != 2 || got[0] != "IssueLeaf e-peer-tls TrustBundleChanged" {
		t.Fatalf("single bundle to the leaves: %v", got)
	}
	members = 2
	if got := run(t0); len(got) != 0 || Rotation(obs, "e-ca") != "" {
		t.Fatalf("not settled after the rotation: %v %q", got, Rotation(obs, "e-ca"))
	}
	if certs.SameBundle(obs["e-ca"].CA, oldCA) || obs["e-ca"].Generation != 2 {
		t.Fatal("the old CA is still the one trusted")
	}
	// The same request does not rotate again; a CA two thirds through its life does.
	if got := run(t0); len(got) != 0 {
		t.Fatalf("the same request rotated twice: %v", got)
	}
	late := t0.Add(7 * 365 * 24 * time.Hour)
	run(late) // the leaves, long expired, are renewed first
	if got := run(late); len(got) != 1 || got[0] != "StartCARotation e-ca CADueForRenewal" {
		t.Fatalf("a CA two thirds through its life: %v", got)
	}
}

// BenchmarkPlanSettled is the certificate planner's cost on every pass of a TLS cluster that
// needs nothing: parse and verify the CA and three leaves.
func BenchmarkPlanSettled(b *testing.B) {
	w := want()
	w.Leaves = append(w.Leaves, Leaf{Secret: "e-server-tls", Request: w.Leaves[0].Request})
	obs := map[string]Material{}
	ca, _ := certs.NewCA("ca", t0, w.CAValidity)
	obs["e-ca"] = Material{Cert: ca.Cert, Key: ca.Key, CA: ca.Cert}
	for _, l := range w.Leaves {
		p, _ := certs.Issue(ca, l.Request, t0)
		obs[l.Secret] = Material{Cert: p.Cert, Key: p.Key, CA: ca.Cert}
	}
	b.ReportAllocs()
	for b.Loop() {
		if steps, _, _ := Plan(w, obs, t0); len(steps) != 0 {
			b.Fatal(steps)
		}
	}
}

// BenchmarkIssueLeaf is the cost of one leaf certificate (key generation and signature).
func BenchmarkIssueLeaf(b *testing.B) {
	ca, _ := certs.NewCA("ca", t0, time.Hour*24*365)
	r := want().Leaves[0].Request
	b.ReportAllocs()
	for b.Loop() {
		if _, err := certs.Issue(ca, r, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHoldDrops: two CAs of one cluster (the peer side's and the client side's) rotate in
// step: a CA that could drop its old certificate waits while the other still rotates and
// drops nothing now, so that the members restart for both drops in one round; starting and
// switching are never held.
func TestHoldDrops(t *testing.T) {
	a, err := certs.NewCA("a", t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, err := certs.NewCA("b", t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	idle := Material{Cert: a.Cert, Key: a.Key, CA: a.Cert}
	trustsNext := Material{Cert: a.Cert, Key: a.Key, CA: append(append([]byte{}, a.Cert...), b.Cert...), NextCert: b.Cert, NextKey: b.Key}
	switched := Material{Cert: b.Cert, Key: b.Key, CA: append(append([]byte{}, a.Cert...), b.Cert...)}
	drop := []Step{{Kind: DropOldCA, Secret: "x"}}
	start := []Step{{Kind: StartCARotation, Secret: "x"}}
	sw := []Step{{Kind: SwitchCA, Secret: "x"}}
	issue := []Step{{Kind: IssueLeaf, Secret: "y"}}
	for _, tc := range []struct {
		name  string
		steps [][]Step
		cas   []Material
		want  []int // the number of steps kept, per CA
	}{
		{"one CA drops", [][]Step{drop}, []Material{switched}, []int{1}},
		{"the other does not rotate", [][]Step{drop, nil}, []Material{switched, idle}, []int{1, 0}},
		{"the other trusts its next CA", [][]Step{drop, nil}, []Material{switched, trustsNext}, []int{0, 0}},
		{"the other switches now", [][]Step{drop, sw}, []Material{switched, trustsNext}, []int{0, 1}},
		{"the other waits for its members' certificates", [][]Step{nil, drop}, []Material{switched, switched}, []int{0, 0}},
		{"the other issues leaves first", [][]Step{drop, issue}, []Material{switched, switched}, []int{0, 1}},
		{"both drop", [][]Step{drop, drop}, []Material{switched, switched}, []int{1, 1}},
		{"a start is never held", [][]Step{start, nil}, []Material{idle, switched}, []int{1, 0}},
	} {
		got := HoldDrops(tc.steps, tc.cas)
		for i, n := range tc.want {
			if len(got[i]) != n {
				t.Errorf("%s: CA %d keeps %v, want %d steps", tc.name, i, kinds(got[i]), n)
			}
		}
	}
}

// TestMarksACAThatDoesNotSayWhatItSigns: a CA created before CAs recorded which side they
// sign for is marked once its layout gives it one side; a CA of both sides is left alone.
func TestMarksACAThatDoesNotSayWhatItSigns(t *testing.T) {
	w := want()
	obs := map[string]Material{}
	steps, _, _ := Plan(w, obs, t0)
	apply(t, w, steps, obs, t0)
	if steps, _, _ := Plan(w, obs, t0); len(steps) != 0 {
		t.Fatalf("a CA of both sides: %v", kinds(steps))
	}
	w.CASigns = "client"
	steps, _, _ = Plan(w, obs, t0)
	if len(steps) != 1 || steps[0].Kind != MarkCA || steps[0].Secret != "e-ca" {
		t.Fatalf("an unmarked CA of one side: %v, want MarkCA e-ca", kinds(steps))
	}
	m := obs["e-ca"]
	m.Signs = "client"
	obs["e-ca"] = m
	if steps, _, _ := Plan(w, obs, t0); len(steps) != 0 {
		t.Fatalf("a marked CA: %v", kinds(steps))
	}
}

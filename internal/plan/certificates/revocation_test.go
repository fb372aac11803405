package certificates

import (
	"reflect"
	"testing"
	"time"
)

func TestPlanRevocations(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	later, past := now.Add(24*time.Hour), now.Add(-time.Hour)
	app := ClientSecret{Secret: "e-client-app", Name: "app", Issued: []Revoked{{Serial: "0a", NotAfter: later}, {Serial: "09", NotAfter: later}, {Serial: "08", NotAfter: past}}}
	other := ClientSecret{Secret: "e-client-other", Name: "other", Issued: []Revoked{{Serial: "0b", NotAfter: later}}}
	operator := func(wanted ...string) RevocationWant {
		w := RevocationWant{CRLSecret: "e-crl", Asked: len(wanted) > 0, Wanted: map[string]bool{}}
		for _, s := range wanted {
			w.Wanted[s] = true
		}
		return w
	}
	cases := []struct {
		name       string
		w          RevocationWant
		list       []Revoked
		listExists bool
		secrets    []ClientSecret
		want       []RevocationStep
	}{
		{name: "nothing asked, nothing kept", w: operator()},
		{name: "the first certificate creates the empty list", w: operator("e-client-app"), secrets: []ClientSecret{app},
			want: []RevocationStep{{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{}, Reason: "created"}}},
		{name: "settled", w: operator("e-client-app"), listExists: true, secrets: []ClientSecret{app}},
		{name: "a stale list is signed again with its entries", w: func() RevocationWant { w := operator("e-client-app"); w.Stale = true; return w }(), listExists: true,
			list: []Revoked{{Serial: "0b", NotAfter: later, Name: "other"}}, secrets: []ClientSecret{app},
			want: []RevocationStep{{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "0b", NotAfter: later, Name: "other"}}, Reason: "signed again (its next update is near, or another CA signs now)"}}},
		{name: "a removed certificate: every unexpired serial first, then its Secret", w: operator("e-client-other"), listExists: true, secrets: []ClientSecret{app, other},
			want: []RevocationStep{
				{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "09", NotAfter: later, Name: "app"}, {Serial: "0a", NotAfter: later, Name: "app"}}, Reason: "certificate app revoked"},
				{Kind: RetireClientSecret, Secret: "e-client-app", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"},
			}},
		{name: "the list carries them (a crash after the write): only the Secret goes", w: operator("e-client-other"), listExists: true,
			list: []Revoked{{Serial: "09", NotAfter: later, Name: "app"}, {Serial: "0a", NotAfter: later, Name: "app"}}, secrets: []ClientSecret{app, other},
			want: []RevocationStep{{Kind: RetireClientSecret, Secret: "e-client-app", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"}}},
		{name: "the last certificate removed: the list stays", w: operator(), listExists: true, secrets: []ClientSecret{other},
			want: []RevocationStep{
				{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "0b", NotAfter: later, Name: "other"}}, Reason: "certificate other revoked"},
				{Kind: RetireClientSecret, Secret: "e-client-other", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"},
			}},
		{name: "a list lost with a certificate to revoke is written again with it", w: operator(), secrets: []ClientSecret{other},
			want: []RevocationStep{
				{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "0b", NotAfter: later, Name: "other"}}, Reason: "certificate other revoked"},
				{Kind: RetireClientSecret, Secret: "e-client-other", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"},
			}},
		{name: "a certificate the members or the operator use is never revoked, whatever Secret holds it",
			w: func() RevocationWant { w := operator("e-client-other"); w.Kept = map[string]bool{"0a": true}; return w }(), listExists: true, secrets: []ClientSecret{app, other},
			want: []RevocationStep{
				{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "09", NotAfter: later, Name: "app"}}, Reason: "certificate app revoked"},
				{Kind: RetireClientSecret, Secret: "e-client-app", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"},
			}},
		{name: "expired entries are dropped", w: operator("e-client-app"), listExists: true, secrets: []ClientSecret{app},
			list: []Revoked{{Serial: "01", NotAfter: past, Name: "gone"}, {Serial: "02", NotAfter: later, Name: "kept"}},
			want: []RevocationStep{{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "02", NotAfter: later, Name: "kept"}}, Reason: "expired certificates dropped"}}},
		{name: "the client side left source Operator: its certificates are still revoked", w: RevocationWant{CRLSecret: "e-crl", Wanted: map[string]bool{}}, listExists: true, secrets: []ClientSecret{other},
			want: []RevocationStep{
				{Kind: WriteCRL, Secret: "e-crl", Entries: []Revoked{{Serial: "0b", NotAfter: later, Name: "other"}}, Reason: "certificate other revoked"},
				{Kind: RetireClientSecret, Secret: "e-client-other", Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanRevocations(tc.w, tc.list, tc.listExists, tc.secrets, now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

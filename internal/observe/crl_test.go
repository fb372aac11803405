package observe_test

import (
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
)

// TestStaleCRL: the revocation list is signed again before its next update and after the
// CA that signs changed; a fresh list of the current CA is left alone.
func TestStaleCRL(t *testing.T) {
	now := time.Now()
	ca, err := certs.NewCA("ca", now, time.Hour*24*365)
	if err != nil {
		t.Fatal(err)
	}
	next, err := certs.NewCA("next", now, time.Hour*24*365)
	if err != nil {
		t.Fatal(err)
	}
	der, err := certs.RevocationList(ca, []string{"0a"}, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	l := observe.CRL{DER: der, ResourceVersion: "1"}
	for _, tc := range []struct {
		name   string
		l      observe.CRL
		signer []byte
		at     time.Time
		want   bool
	}{
		{"fresh, the current CA's", l, ca.Cert, now, false},
		{"its next update in a day", l, ca.Cert, now.Add(6 * 24 * time.Hour), true},
		{"another CA signs now", l, next.Cert, now, true},
		{"unreadable", observe.CRL{DER: []byte("x"), ResourceVersion: "1"}, ca.Cert, now, true},
		{"no list", observe.CRL{}, ca.Cert, now, false},
	} {
		if got := tc.l.Stale(tc.signer, tc.at); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
}

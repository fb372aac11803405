package observe

import (
	"context"
	"crypto/x509"
	"net"
	"strings"
	"testing"
)

type fakeResolver struct {
	back  map[string][]string
	hosts map[string][]string
}

func (f fakeResolver) LookupAddr(_ context.Context, addr string) ([]string, error) {
	return f.back[addr], nil
}
func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	return f.hosts[host], nil
}

// TestSANCovers follows etcd's own check of a dialing peer's certificate: an IP address of
// the certificate, a name the address resolves back to (wildcards by suffix, PTR names with
// their trailing dot), or a name that resolves to the address; a certificate without names
// passes.
func TestSANCovers(t *testing.T) {
	res := fakeResolver{
		back:  map[string][]string{"10.0.0.5": {"etcd-0.etcd.ns.svc.cluster.local."}, "10.0.0.6": {"10-0-0-6.ns.pod.cluster.local."}},
		hosts: map[string][]string{"member.example": {"10.0.0.7"}},
	}
	wild := &x509.Certificate{DNSNames: []string{"*.etcd.ns.svc", "*.etcd.ns.svc.cluster.local", "member.example"}}
	for _, c := range []struct {
		cert *x509.Certificate
		ip   string
		ok   bool
	}{
		{wild, "10.0.0.5", true},
		{wild, "10.0.0.6", false},
		{wild, "10.0.0.7", true},
		{&x509.Certificate{IPAddresses: []net.IP{net.ParseIP("10.0.0.6")}}, "10.0.0.6", true},
		{&x509.Certificate{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"*.etcd.ns.svc.cluster.local"}}, "10.0.0.5", true},
		{&x509.Certificate{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, "10.0.0.5", false},
		{&x509.Certificate{}, "10.0.0.9", true},
	} {
		why := sanCovers(context.Background(), res, c.cert, c.ip)
		if (why == "") != c.ok {
			t.Errorf("sanCovers(%v %v, %s) = %q, want ok %v", c.cert.DNSNames, c.cert.IPAddresses, c.ip, why, c.ok)
		}
		if why != "" && !strings.Contains(why, c.ip) {
			t.Errorf("the refusal %q does not name the address", why)
		}
	}
}

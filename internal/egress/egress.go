// Package egress is the operator's rule for outbound connections to addresses a tenant
// writes: S3 endpoints (backup destinations, restore sources), OCI chart registries and the
// URLs a custom chart's values schema refers to. Whoever writes an EtcdCluster or an
// EtcdBackup chooses those hosts, and the operator connects from its own network position
// (admitted by every cluster's NetworkPolicy, reaching the node's link-local metadata
// service), so the administrator decides where it may connect, not the tenant.
//
// A Policy checks a URL before any request (scheme, host name, an address literal) and every
// address at dial time, after DNS resolution, so a name that resolves to a refused address,
// a DNS answer that changes between check and dial, and a redirect are all held to it. By
// default it refuses plain HTTP, loopback, link-local (where cloud metadata services answer),
// unspecified, multicast and broadcast addresses and the known metadata names and addresses,
// and allows the rest, private ranges included (an in-cluster MinIO or registry is the common
// case). --allowed-endpoints narrows that to a list, and can open a refused range explicitly.
//
// Errors of a connection to an allowed endpoint are reduced to a class (Describe): the
// operator reports them in conditions, which must not turn it into a port scanner that
// echoes what a host on its network answered.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Resolver resolves host names to addresses; *net.Resolver is one. Tests inject their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is what the administrator decides (the manager's flags).
type Config struct {
	// Allowed lists what tenant-written endpoints may reach: address ranges ("10.0.0.0/8"),
	// addresses ("10.1.2.3", "fd00::5"), host names ("minio.storage.svc.cluster.local") and
	// name suffixes ("*.s3.example.com": any name under it, not the name itself). Empty allows
	// every host whose addresses the defaults do not refuse. A listed range or address also
	// opens what the defaults refuse (127.0.0.0/8 for a registry on loopback); a listed name
	// does not: its addresses are still held to the defaults.
	Allowed []string
	// AllowInsecure allows plain HTTP (http:// endpoints, an OCI source's plainHTTP).
	AllowInsecure bool
	// Resolver resolves names; net.DefaultResolver when nil.
	Resolver Resolver
}

// Policy decides which outbound connections the operator makes for a tenant. The zero value
// is not usable; a nil *Policy is the default policy (Default). It is safe for concurrent use.
type Policy struct {
	allowed       []string // as given, for Args
	names         []string // exact names, lower case, no trailing dot
	suffixes      []string // ".example.com" for "*.example.com"
	prefixes      []netip.Prefix
	allowInsecure bool
	resolver      Resolver
}

// New returns the policy of cfg, or an error naming an entry of cfg.Allowed it cannot read.
func New(cfg Config) (*Policy, error) {
	p := &Policy{allowInsecure: cfg.AllowInsecure, resolver: cfg.Resolver}
	for _, raw := range cfg.Allowed {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		p.allowed = append(p.allowed, e)
		if pre, err := netip.ParsePrefix(e); err == nil {
			p.prefixes = append(p.prefixes, pre.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			a = a.Unmap()
			p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		name, wildcard := strings.CutPrefix(canonicalName(e), "*.")
		if !validName(name) {
			return nil, fmt.Errorf("invalid allowed endpoint %q: want an address range (10.0.0.0/8), an address, a host name or *.domain", raw)
		}
		if wildcard {
			p.suffixes = append(p.suffixes, "."+name)
		} else {
			p.names = append(p.names, name)
		}
	}
	return p, nil
}

var defaultPolicy = &Policy{}

// Default is the policy without flags: https only; loopback, link-local, metadata,
// unspecified, multicast and broadcast addresses refused; everything else allowed.
func Default() *Policy { return defaultPolicy }

func (p *Policy) orDefault() *Policy {
	if p == nil {
		return defaultPolicy
	}
	return p
}

// restricted says whether an allow list was given.
func (p *Policy) restricted() bool {
	return len(p.names)+len(p.suffixes)+len(p.prefixes) > 0
}

// AllowsInsecure says whether plain HTTP is allowed.
func (p *Policy) AllowsInsecure() bool { return p.orDefault().allowInsecure }

// String describes the policy for logs.
func (p *Policy) String() string {
	p = p.orDefault()
	allowed := "any host not refused by default"
	if p.restricted() {
		allowed = strings.Join(p.allowed, ",")
	}
	return fmt.Sprintf("allowed endpoints: %s; plain HTTP: %t", allowed, p.allowInsecure)
}

// RefusedError is a connection the policy refused: none was attempted.
type RefusedError struct {
	// Host is the host as the tenant wrote it (or as a redirect named it).
	Host string
	// Reason says which rule refused it, without any resolved address.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("connection to %s refused by the operator's outbound policy: %s", e.Host, e.Reason)
}

// IsRefused says whether err is, or wraps, a RefusedError.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// metadataNames are the host names of cloud metadata services; they are refused before any
// DNS lookup (their addresses are refused too, as link-local or below).
var metadataNames = []string{"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}

// metadataAddrs are metadata service addresses outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS instance metadata over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
}

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4 address, checked as one.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// CheckEndpoint checks an endpoint URL a tenant wrote (an S3 endpoint) before anything is
// sent: scheme http or https (http only with AllowInsecure), no user information, no control
// characters, and the host by name (metadata names, the allow list) or, for an address
// literal, by address. Names are resolved only at dial time.
func (p *Policy) CheckEndpoint(raw string) error {
	if i := strings.IndexFunc(raw, isControlOrSpace); i >= 0 {
		return fmt.Errorf("invalid endpoint %q: control characters and spaces are not allowed", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid endpoint %q: %w", raw, err)
	}
	if u.User != nil {
		return fmt.Errorf("invalid endpoint %q: no user name or password in the URL (credentials come from the credentials Secret)", raw)
	}
	return p.CheckURL(u)
}

// CheckURL checks one request's URL: scheme, host name, and an address literal. The Transport
// calls it for every request, redirects and authentication realms included.
func (p *Policy) CheckURL(u *url.URL) error {
	p = p.orDefault()
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("invalid endpoint %q: no host", u.Redacted())
	}
	// The host first: where a request would go matters more than how.
	if err := p.checkHost(u.Host, host); err != nil {
		return err
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.allowInsecure {
			return &RefusedError{Host: u.Host, Reason: "plain HTTP is not allowed (the operator's administrator allows it with --allow-insecure-endpoints); use https"}
		}
	default:
		return &RefusedError{Host: u.Host, Reason: fmt.Sprintf("scheme %q is not http or https", u.Scheme)}
	}
	return nil
}

// CheckHost checks a host (a name or an address literal, without a port) as CheckURL does,
// for a connection whose scheme is checked elsewhere.
func (p *Policy) CheckHost(host string) error {
	return p.orDefault().checkHost(host, strings.Trim(host, "[]"))
}

// checkHost checks host (display) by its name, or its address when it is a literal.
func (p *Policy) checkHost(display, host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if why := p.refusesAddr(a, false); why != "" {
			return &RefusedError{Host: display, Reason: why}
		}
		return nil
	}
	name := canonicalName(host)
	if !validName(name) {
		return &RefusedError{Host: display, Reason: "the host is not a valid DNS name or address"}
	}
	if why := p.refusesName(name); why != "" {
		return &RefusedError{Host: display, Reason: why}
	}
	return nil
}

// refusesName says why a name is refused before resolution, or "".
func (p *Policy) refusesName(name string) string {
	if slices.Contains(metadataNames, name) {
		return "it is a cloud metadata service"
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return "it is loopback"
	}
	// With only names listed, a name not among them is refused without a lookup. With ranges
	// listed, it may resolve into one: the dial decides.
	if p.restricted() && !p.nameListed(name) && len(p.prefixes) == 0 {
		return notListed
	}
	return ""
}

const notListed = "the host is not among the endpoints the operator's administrator allows (--allowed-endpoints)"

func (p *Policy) nameListed(name string) bool {
	if slices.Contains(p.names, name) {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// refusesAddr says why the policy refuses a connection to a, or "". nameListed says whether
// the name a was resolved from is listed (a literal address has no name).
func (p *Policy) refusesAddr(a netip.Addr, nameListed bool) string {
	a = a.Unmap()
	for _, pre := range p.prefixes {
		if pre.Contains(a) {
			return "" // the administrator listed it, whatever the defaults say
		}
	}
	if why := refusedByDefault(a); why != "" {
		return why + "; the operator's administrator can allow its range with --allowed-endpoints"
	}
	if p.restricted() && !nameListed {
		return notListed
	}
	return ""
}

// refusedByDefault names the class of an address the defaults refuse, or "".
func refusedByDefault(a netip.Addr) string {
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		return refusedByDefault(netip.AddrFrom4([4]byte(b[12:16])))
	}
	switch {
	case slices.Contains(metadataAddrs, a):
		return "it is a cloud metadata address"
	case a.IsLoopback():
		return "it is a loopback address"
	case a.IsLinkLocalUnicast():
		return "it is a link-local address, where cloud metadata services answer"
	case a.IsUnspecified(), a.Is4() && a.As4()[0] == 0:
		return "it is an unspecified address"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "it is a multicast address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "it is the broadcast address"
	}
	return ""
}

// DialContext dials addr (host:port) for network (tcp, tcp4, tcp6) if the policy allows it:
// the host is checked by name, resolved once, and only addresses the policy allows are
// dialed, by address (no second lookup for a rebinding answer to slip into). The dialer's
// Control checks the address once more just before the connection is made. A refusal ends
// a FailFast ctx.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.orDefault().dial(ctx, network, addr)
	if IsRefused(err) {
		return nil, refused(ctx, err)
	}
	return c, err
}

func (p *Policy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: %w", addr, err)
	}
	var addrs []netip.Addr
	listed := false
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		name := canonicalName(host)
		if err := p.checkHost(addr, host); err != nil {
			return nil, err
		}
		listed = p.nameListed(name)
		ipNet := "ip"
		switch network {
		case "tcp4":
			ipNet = "ip4"
		case "tcp6":
			ipNet = "ip6"
		}
		r := p.resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if addrs, err = r.LookupNetIP(ctx, ipNet, name); err != nil {
			return nil, err
		}
	}
	var ok []netip.Addr
	var refused error
	for _, a := range addrs {
		if why := p.refusesAddr(a, listed); why != "" {
			if refused == nil {
				refused = &RefusedError{Host: host, Reason: resolvedReason(host, why)}
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		if refused == nil {
			refused = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
		return nil, refused
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.control(host, listed)}
	var first error
	for _, a := range ok {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// resolvedReason says that a name resolved to an address the policy refuses, without the
// address.
func resolvedReason(host, why string) string {
	if _, err := netip.ParseAddr(host); err == nil {
		return why
	}
	return "it resolves to an address the policy refuses: " + strings.TrimPrefix(why, "it is ")
}

// control is the dialer's last check, on the address the socket is about to connect to.
func (p *Policy) control(host string, listed bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &RefusedError{Host: host, Reason: "the address to connect to cannot be read"}
		}
		if why := p.refusesAddr(ap.Addr(), listed); why != "" {
			return &RefusedError{Host: host, Reason: resolvedReason(host, why)}
		}
		return nil
	}
}

// Transport returns an http.RoundTripper over a clone of base (http.DefaultTransport's when
// nil) that checks every request's URL (CheckURL: each redirect and authentication realm is
// a request of its own) and dials through DialContext. A proxy from the environment is dialed
// through it too: list the proxy's address when the defaults refuse it; the proxy resolves
// the names it is asked for, so restrict it there as well.
func (p *Policy) Transport(base *http.Transport) http.RoundTripper {
	p = p.orDefault()
	var t *http.Transport
	if base != nil {
		t = base.Clone()
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.DialContext = p.DialContext
	t.DialTLSContext = nil // TLS is layered over DialContext
	return &checked{p: p, rt: t}
}

// HTTPClient is an http.Client over Transport(nil) with the timeout given.
func (p *Policy) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: p.Transport(nil)}
}

type checked struct {
	p  *Policy
	rt http.RoundTripper
}

func (c *checked) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := c.p.CheckURL(req.URL); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTrip closes the body, also on errors
		}
		return nil, refused(req.Context(), err)
	}
	return c.rt.RoundTrip(req)
}

// Args are the flags that give a process of the operator's binary (a restore pod's
// restore-prepare) this policy.
func (p *Policy) Args() []string {
	p = p.orDefault()
	var out []string
	if len(p.allowed) > 0 {
		out = append(out, "--"+FlagAllowedEndpoints+"="+strings.Join(p.allowed, ","))
	}
	if p.allowInsecure {
		out = append(out, "--"+FlagAllowInsecure)
	}
	return out
}

// canonicalName is a host name in lower case without a trailing dot.
func canonicalName(s string) string {
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// validName says whether s is a DNS name (labels of letters, digits, hyphens and
// underscores, some services use those, each 1 to 63 long, 253 in all).
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func isControlOrSpace(r rune) bool {
	return r <= ' ' || r == 0x7f
}

type failFastKey struct{}

// FailFast returns a context that a refusal of this package's Transport or DialContext, for a
// request made with the context, cancels with the RefusedError as its cause: a client that
// retries failed requests (minio-go tries up to ten times, backing off) stops at the first
// refusal instead of asking again for what the policy will refuse again. Refusal reads the
// cause. Call stop once the context's requests are done.
func FailFast(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, failFastKey{}, cancel), func() { cancel(context.Canceled) }
}

// Refusal returns the RefusedError that ended a FailFast context, or nil.
func Refusal(ctx context.Context) error {
	var re *RefusedError
	if errors.As(context.Cause(ctx), &re) {
		return re
	}
	return nil
}

// refused ends ctx if it is a FailFast context, and returns err.
func refused(ctx context.Context, err error) error {
	if cancel, ok := ctx.Value(failFastKey{}).(context.CancelCauseFunc); ok {
		cancel(err)
	}
	return err
}

package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeResolver answers from a table; every other name does not resolve. It counts lookups.
type fakeResolver struct {
	answers map[string][]string
	lookups atomic.Int32
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	var out []netip.Addr
	for _, s := range r.answers[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// counter is a loopback listener that counts the connections it accepts.
type counter struct {
	net.Listener
	n atomic.Int32
}

func listen(t *testing.T) *counter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{Listener: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	}()
	return c
}

func (c *counter) port() string {
	_, p, _ := net.SplitHostPort(c.Addr().String())
	return p
}

func mustNew(t *testing.T, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckEndpoint(t *testing.T) {
	restricted := Config{Allowed: []string{"s3.example.com", "*.storage.example", "10.0.0.0/8"}}
	for _, tc := range []struct {
		cfg      Config
		endpoint string
		want     string // "" allowed, else a part of the error
	}{
		{Config{}, "https://s3.example.com", ""},
		{Config{}, "https://10.1.2.3:9000", ""},                   // private ranges are allowed by default
		{Config{}, "https://minio.storage.svc.cluster.local", ""}, // in-cluster names too
		{Config{}, "http://s3.example.com", "plain HTTP is not allowed"},
		{Config{AllowInsecure: true}, "http://s3.example.com", ""},
		{Config{}, "https://169.254.169.254", "link-local"},
		{Config{}, "https://[fe80::1]", "link-local"},
		{Config{}, "https://[fd00:ec2::254]", "cloud metadata address"},
		{Config{}, "https://100.100.100.200", "cloud metadata address"},
		{Config{}, "https://[::ffff:169.254.169.254]", "link-local"},
		{Config{}, "https://[64:ff9b::a9fe:a9fe]", "link-local"}, // 169.254.169.254 through NAT64
		{Config{}, "https://127.0.0.1:9000", "loopback"},
		{Config{}, "https://[::1]", "loopback"},
		{Config{}, "https://0.0.0.0", "unspecified"},
		{Config{}, "https://0.1.2.3", "unspecified"},
		{Config{}, "https://[::]", "unspecified"},
		{Config{}, "https://224.0.0.1", "multicast"},
		{Config{}, "https://255.255.255.255", "broadcast"},
		{Config{}, "https://metadata.google.internal", "cloud metadata service"},
		{Config{}, "https://METADATA.google.internal.", "cloud metadata service"},
		{Config{}, "https://localhost:9000", "loopback"},
		{Config{}, "https://user:pw@s3.example.com", "no user name or password"},
		{Config{}, "https://s3.example.com\n", "control characters"},
		{Config{}, "https://s3.exa mple.com", "control characters and spaces"},
		{Config{}, "ftp://s3.example.com", "is not http or https"},
		{Config{}, "https://bad_host!.example", "not a valid DNS name"},
		{Config{Allowed: []string{"127.0.0.0/8"}}, "https://127.0.0.1:9000", ""}, // an explicit range opens loopback
		{Config{Allowed: []string{"169.254.169.254"}}, "https://169.254.169.254", ""},
		{restricted, "https://s3.example.com", ""},
		{restricted, "https://a.b.storage.example", ""},
		{restricted, "https://storage.example", ""}, // may resolve into 10.0.0.0/8: the dial decides
		{restricted, "https://10.9.8.7", ""},
		{restricted, "https://192.168.1.1", "not among the endpoints"},
		{restricted, "https://169.254.169.254", "link-local"},
		{Config{Allowed: []string{"s3.example.com"}}, "https://other.example.com", "not among the endpoints"},
	} {
		p := mustNew(t, tc.cfg)
		err := p.CheckEndpoint(tc.endpoint)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %q: %v, want allowed", tc.cfg.Allowed, tc.endpoint, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v %q: %v, want an error containing %q", tc.cfg.Allowed, tc.endpoint, err, tc.want)
		case tc.want != "" && strings.Contains(tc.want, "refused") && !IsRefused(err):
			t.Errorf("%q: %v is not a RefusedError", tc.endpoint, err)
		}
	}
	var nilPolicy *Policy // the default
	if err := nilPolicy.CheckEndpoint("https://169.254.169.254"); !IsRefused(err) || !strings.Contains(err.Error(), "refused by the operator's outbound policy") {
		t.Errorf("a nil policy: %v, want the default's refusal", err)
	}
}

func TestNewRefusesUnreadableEntries(t *testing.T) {
	for _, e := range []string{"http://s3.example.com", "10.0.0.0/33", "*.", "a..b", "-x.example", "s3.example.com:9000"} {
		if _, err := New(Config{Allowed: []string{e}}); err == nil {
			t.Errorf("New accepts the allowed endpoint %q", e)
		}
	}
}

// TestDialRefusesWhatANameResolvesTo: a name is checked after DNS, at dial time: one that
// resolves to the metadata address or to loopback is refused without a connection, and the
// refusal does not say which address it resolved to.
func TestDialRefusesWhatANameResolvesTo(t *testing.T) {
	l := listen(t)
	r := &fakeResolver{answers: map[string][]string{
		"metadata-alias.example": {"169.254.169.254"},
		"loop.example":           {"127.0.0.1"},
		"mixed.example":          {"169.254.169.254", "127.0.0.1"},
		"v6.example":             {"::ffff:127.0.0.1"},
	}}
	for _, tc := range []struct {
		cfg      Config
		host     string
		want     string // "" connects
		connects bool
	}{
		{Config{}, "metadata-alias.example", "resolves to an address the policy refuses: a link-local address", false},
		{Config{}, "loop.example", "resolves to an address the policy refuses: a loopback address", false},
		{Config{}, "v6.example", "loopback", false},
		{Config{}, "127.0.0.1", "loopback", false},
		{Config{Allowed: []string{"loop.example"}}, "loop.example", "loopback", false}, // a listed name does not open loopback
		{Config{Allowed: []string{"127.0.0.0/8"}}, "loop.example", "", true},
		{Config{Allowed: []string{"127.0.0.0/8"}}, "127.0.0.1", "", true},
		{Config{Allowed: []string{"127.0.0.0/8"}}, "mixed.example", "", true}, // only the allowed address is dialed
		{Config{Allowed: []string{"127.0.0.0/8"}}, "metadata-alias.example", "link-local", false},
		{Config{Allowed: []string{"10.0.0.0/8"}}, "loop.example", "loopback", false},
		{Config{Allowed: []string{"127.0.0.0/8"}}, "nowhere.example", "no such host", false},
	} {
		cfg := tc.cfg
		cfg.Resolver = r
		p := mustNew(t, cfg)
		before := l.n.Load()
		c, err := p.DialContext(t.Context(), "tcp", net.JoinHostPort(tc.host, l.port()))
		if c != nil {
			c.Close()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %s: %v, want a connection", tc.cfg.Allowed, tc.host, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v %s: %v, want an error containing %q", tc.cfg.Allowed, tc.host, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "169.254") && tc.host != "169.254.169.254":
			t.Errorf("%s: the refusal names the address the name resolved to: %v", tc.host, err)
		}
		// The listener counts asynchronously; a connection made shows up within moments.
		deadline := time.Now().Add(time.Second)
		for tc.connects && l.n.Load() == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := l.n.Load() - before; (got > 0) != tc.connects {
			t.Errorf("%v %s: %d connections, want connected=%v", tc.cfg.Allowed, tc.host, got, tc.connects)
		}
	}
	// A name refused by name (metadata) or by a names-only allow list costs no lookup either.
	r.lookups.Store(0)
	for _, tc := range []struct {
		cfg  Config
		host string
	}{{Config{}, "metadata.google.internal"}, {Config{Allowed: []string{"s3.example.com"}}, "loop.example"}} {
		cfg := tc.cfg
		cfg.Resolver = r
		if _, err := mustNew(t, cfg).DialContext(t.Context(), "tcp", tc.host+":80"); !IsRefused(err) {
			t.Errorf("%s: %v, want refused", tc.host, err)
		}
	}
	if n := r.lookups.Load(); n != 0 {
		t.Errorf("%d DNS lookups for names refused by name", n)
	}
}

// TestControlChecksTheAddressConnectedTo: the dialer's last check refuses an address however
// the dial got there.
func TestControlChecksTheAddressConnectedTo(t *testing.T) {
	p := mustNew(t, Config{})
	for addr, want := range map[string]bool{"169.254.169.254:80": false, "[fe80::1%eth0]:80": false, "127.0.0.1:80": false, "93.184.216.34:443": true, "10.0.0.1:9000": true} {
		err := p.control("h", false)("tcp", addr, nil)
		if (err == nil) != want {
			t.Errorf("control(%s): %v, want allowed=%v", addr, err, want)
		}
	}
}

// TestTransportChecksEveryRequest: redirects are requests of their own, each checked: one to
// the metadata service, by name or address, and one from https down to http are refused
// before any connection.
func TestTransportChecksEveryRequest(t *testing.T) {
	var target atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.Load().(string), http.StatusFound)
	}))
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.Load().(string), http.StatusFound)
	}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer tlsSrv.Close()
	sink := listen(t)

	for _, tc := range []struct {
		cfg    Config
		start  string
		target string
		want   string
	}{
		{Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true}, srv.URL, "http://169.254.169.254/latest/meta-data/", "link-local"},
		{Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true}, srv.URL, "http://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"},
		{Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true}, srv.URL, "http://[::ffff:a9fe:a9fe]/", "link-local"},
		{Config{Allowed: []string{"127.0.0.0/8"}}, tlsSrv.URL, "http://127.0.0.1:" + sink.port() + "/", "plain HTTP is not allowed"},
		{Config{Allowed: []string{"127.0.0.1/32"}, AllowInsecure: true}, srv.URL, "http://127.0.0.2:" + sink.port() + "/", "loopback"},
	} {
		target.Store(tc.target)
		p := mustNew(t, tc.cfg)
		tr := p.Transport(&http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}) // the test server's own certificate
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := hc.Get(tc.start)
		if resp != nil {
			resp.Body.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !IsRefused(err) {
			t.Errorf("%s redirected to %s: %v, want refused with %q", tc.start, tc.target, err, tc.want)
		}
	}
	if n := sink.n.Load(); n != 0 {
		t.Errorf("%d connections reached the redirect targets", n)
	}
	// The start itself is checked: loopback is refused by default.
	resp, err := Default().HTTPClient(time.Second).Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	if !IsRefused(err) {
		t.Errorf("the default policy reached %s: %v", srv.URL, err)
	}
}

// TestDescribeEchoesNoRemoteBytes: what a host answered never reaches the message; each kind
// of failure keeps its class.
func TestDescribeEchoesNoRemoteBytes(t *testing.T) {
	const secret = "SSH-2.0-OpenSSH_9.6 internal-banner-4711"
	banner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer banner.Close()
	go func() {
		for {
			c, err := banner.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\r\n", secret)
			time.Sleep(50 * time.Millisecond)
			c.Close()
		}
	}()
	closed := listen(t) // accepts and closes
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedAddr := refused.Addr().String()
	refused.Close()
	p := mustNew(t, Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true})
	hc := &http.Client{Transport: p.Transport(nil), Timeout: 5 * time.Second}
	for _, tc := range []struct {
		url, want string
	}{
		{"https://" + banner.Addr().String() + "/", "TLS: the server does not speak TLS"},
		{"http://" + banner.Addr().String() + "/", "the connection failed"},
		{"http://" + closed.Addr().String() + "/", "the server"}, // closed, or reset when it closes unread
		{"http://" + refusedAddr + "/", "the connection was refused"},
		{"http://169.254.169.254/", "refused by the operator's outbound policy"},
	} {
		resp, err := hc.Get(tc.url)
		if resp != nil {
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("%s: no error", tc.url)
			continue
		}
		got := Describe(err)
		if !strings.Contains(got, tc.want) || strings.Contains(got, "OpenSSH") || strings.Contains(got, "banner") || strings.Contains(got, "127.0.0.1") {
			t.Errorf("%s: %q (from %v), want the class %q and nothing the host sent", tc.url, got, err, tc.want)
		}
		if s := Sanitize(err); s.Error() != got || !errors.Is(s, err) {
			t.Errorf("Sanitize(%v) = %v", err, s)
		}
	}
	// A certificate for other names: the class, not the names in it.
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer tlsSrv.Close()
	resp, err := hc.Get(tlsSrv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	if got := Describe(err); !strings.HasPrefix(got, "TLS: the server's certificate is not signed by a trusted authority") {
		t.Errorf("self-signed: %q (from %v)", got, err)
	}
	for err, want := range map[error]string{
		context.DeadlineExceeded: "timed out",
		&net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}: "DNS lookup failed",
		&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}:        "does not resolve",
		errors.New("remote said: 500 <html>secret</html>"):                     "the connection failed",
	} {
		if got := Describe(fmt.Errorf("failed to get x: %w", err)); !strings.Contains(got, want) || strings.Contains(got, "secret") {
			t.Errorf("Describe(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestFlagsAndArgsRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--allowed-endpoints=10.0.0.0/8,*.s3.example.com", "--allowed-endpoints=127.0.0.1", "--allow-insecure-endpoints"},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var f Flags
		f.Bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		p, err := f.Policy()
		if err != nil {
			t.Fatal(err)
		}
		fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
		var f2 Flags
		f2.Bind(fs2)
		if err := fs2.Parse(p.Args()); err != nil {
			t.Fatal(err)
		}
		p2, _ := f2.Policy()
		if !slices.Equal(p.Args(), p2.Args()) || p.String() != p2.String() {
			t.Errorf("args %q: policy %s, through Args %s", args, p, p2)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var f Flags
	f.Bind(fs)
	_ = fs.Parse([]string{"--allowed-endpoints=https://s3.example.com"})
	if _, err := f.Policy(); err == nil {
		t.Error("a URL in --allowed-endpoints is accepted")
	}
}

package objstore

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// resolver answers names from a table (the tests' DNS); other names do not resolve.
type resolver map[string]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// countingListener accepts connections on loopback and counts them.
func countingListener(t *testing.T) (addr string, n *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	n = &atomic.Int32{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), n
}

// TestS3EndpointRefusedByThePolicy: with the default policy an endpoint on the metadata
// address, on loopback, over plain HTTP or named as a metadata service is refused by NewS3,
// before any connection; one whose name resolves to the metadata address or to loopback is
// refused at the dial, and none reaches the listener.
func TestS3EndpointRefusedByThePolicy(t *testing.T) {
	addr, conns := countingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	for _, ep := range []string{"http://169.254.169.254", "https://169.254.169.254", "https://[fd00:ec2::254]", "https://[fe80::1]:9000",
		"https://" + addr, "http://s3.example.com", "https://metadata.google.internal", "169.254.169.254:443"} {
		_, err := NewS3(S3Config{Endpoint: ep, Bucket: "bkt", Region: "us-east-1"})
		if !egress.IsRefused(err) || !strings.Contains(err.Error(), "refused by the operator's outbound policy") {
			t.Errorf("%s: %v, want refused by the operator's outbound policy", ep, err)
		}
	}

	dns := resolver{"backups.example": "169.254.169.254", "minio.example": "127.0.0.1"}
	p, err := egress.New(egress.Config{Resolver: dns})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"https://backups.example", "https://minio.example:" + port} {
		s, err := NewS3(S3Config{Endpoint: ep, Bucket: "bkt", Region: "us-east-1", Egress: p})
		if err != nil {
			t.Fatalf("%s: NewS3 refuses a name before resolving it: %v", ep, err)
		}
		start := time.Now()
		for verb, err := range every(t, s) {
			msg := fmt.Sprint(err)
			if !egress.IsRefused(err) || !strings.HasPrefix(msg, "failed to "+verb+" s3://bkt/") || !strings.Contains(msg, "refused by the operator's outbound policy") {
				t.Errorf("%s %s: %v, want refused by the operator's outbound policy", verb, ep, err)
			}
			if strings.Contains(msg, "169.254") || strings.Contains(msg, "127.0.0.1") {
				t.Errorf("%s %s: the message names the address the name resolved to: %s", verb, ep, msg)
			}
		}
		t.Logf("%s: refused in %s: %v", ep, time.Since(start).Round(time.Millisecond), every(t, s)["list"])
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the loopback listener", n)
	}

	// The same name once the administrator allows loopback and plain HTTP: it connects, so the
	// refusals above were the policy's.
	p, _ = egress.New(egress.Config{Resolver: dns, Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true})
	s, err := NewS3(S3Config{Endpoint: "http://minio.example:" + port, Bucket: "bkt", Region: "us-east-1", Egress: p})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.List(t.Context(), "")
	if err == nil || egress.IsRefused(err) || conns.Load() == 0 {
		t.Fatalf("allowed: %v after %d connections, want a connection the listener closed", err, conns.Load())
	}
	t.Logf("allowed: %v", err)
}

// TestS3ErrorsEchoNothingTheServerSent: a server's error message and body, and an error code
// that is no S3 code, stay out of the error; the status and a well-formed code stay in.
func TestS3ErrorsEchoNothingTheServerSent(t *testing.T) {
	for _, tc := range []struct {
		status      int
		body        string
		want        string
		contentType string
	}{
		{http.StatusForbidden, `<Error><Code>AccessDenied</Code><Message>internal-secret-banner</Message></Error>`, "access denied by", "application/xml"},
		{http.StatusConflict, `<Error><Code>InvalidRequest</Code><Message>internal-secret-banner</Message></Error>`, "HTTP 409", "application/xml"}, // with the code where the answer has a body (a 5xx would be retried ten times)
		{http.StatusBadRequest, `<Error><Code>internal-secret-banner &lt;x&gt;</Code><Message>m</Message></Error>`, "HTTP 400", "application/xml"},
		{http.StatusOK, `SSH-2.0-internal-secret-banner`, "", "text/plain"},
		{http.StatusTeapot, `<html>internal-secret-banner</html>`, "HTTP 418", "text/html"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			w.WriteHeader(tc.status)
			fmt.Fprint(w, tc.body)
		}))
		s, err := NewS3(S3Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", AccessKeyID: "a", SecretAccessKey: "s", Egress: localEgress})
		if err != nil {
			t.Fatal(err)
		}
		for verb, err := range every(t, s) {
			if err == nil {
				continue // a 200 the client reads as success
			}
			if msg := err.Error(); strings.Contains(msg, "secret-banner") || !strings.Contains(msg, tc.want) {
				t.Errorf("HTTP %d %q: %s: %q, want %q and nothing the server sent", tc.status, tc.body, verb, msg, tc.want)
			}
		}
		srv.Close()
	}
}

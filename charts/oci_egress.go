package charts

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// The registry of spec.chart.source.oci is a host the tenant chooses: the pull is held to the
// operator's outbound policy (OCIOptions.Egress), and its errors say what went wrong in words
// of our own, never what the registry (or whatever answers there) sent.

// checkOCI checks repository (oci://HOST[:PORT]/PATH) against p before anything is sent, with
// the scheme the pull would use.
func checkOCI(p *egress.Policy, repository string, plainHTTP bool) error {
	if strings.IndexFunc(repository, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return errors.New("the repository contains control characters or spaces")
	}
	host, _, _ := strings.Cut(strings.TrimPrefix(repository, "oci://"), "/")
	if strings.Contains(host, "@") {
		return errors.New("the repository names a user: put the login in pullSecret")
	}
	scheme := "https"
	if plainHTTP {
		scheme = "http"
	}
	return p.CheckEndpoint(scheme + "://" + host)
}

// ociClient is the pull's HTTP client, over p's Transport, and the status of the last
// response the registry gave, while it was not a success (0 after a success).
func ociClient(p *egress.Policy) (*http.Client, *atomic.Int32) {
	status := &atomic.Int32{}
	return &http.Client{Timeout: pullTimeout, Transport: statusRecorder{rt: p.Transport(nil), status: status}}, status
}

type statusRecorder struct {
	rt     http.RoundTripper
	status *atomic.Int32
}

func (s statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(req)
	switch {
	case err != nil:
		s.status.Store(0)
	case resp.StatusCode >= 400:
		s.status.Store(int32(resp.StatusCode))
	default:
		s.status.Store(0)
	}
	return resp, err
}

// ociError describes a failed pull: the policy's refusal, else the registry's last answer by
// its HTTP status, else the connection's failure by class.
func ociError(err error, status int32) error {
	switch {
	case egress.IsRefused(err):
		return egress.Sanitize(err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("the registry answered HTTP %d: check the login of pullSecret", status)
	case status == http.StatusNotFound:
		return errors.New("the registry answered HTTP 404: no such repository or version")
	case status != 0:
		return fmt.Errorf("the registry answered HTTP %d", status)
	}
	return egress.Sanitize(err)
}

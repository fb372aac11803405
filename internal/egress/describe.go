package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// serverClosedIdle is net/http's own message (its error is not exported) when the server
// closes a connection before the request was written on it: a close, like io.EOF after it.
const serverClosedIdle = "server closed idle connection"

// Describe reduces the error of a connection to a tenant-written endpoint to what the tenant
// may read in a condition: the policy's refusal as it is, else a class (timed out, refused,
// reset, unreachable, name not found, a TLS failure by kind) that echoes no byte the remote
// host sent and no address a name resolved to. "" when err is nil.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var refused *RefusedError
	if errors.As(err, &refused) {
		return refused.Error()
	}
	var (
		dnsErr   *net.DNSError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
		netErr   net.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return "the request was canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "the connection timed out"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "the host name does not resolve"
		}
		return "the host name could not be resolved (DNS lookup failed)"
	case errors.As(err, &unknown):
		return "TLS: the server's certificate is not signed by a trusted authority (set caBundle for a private CA)"
	case errors.As(err, &hostname):
		return "TLS: the server's certificate is not valid for the endpoint's host"
	case errors.As(err, &invalid):
		return "TLS: the server's certificate is invalid (expired, not yet valid or not for serving)"
	case errors.As(err, &verify):
		return "TLS: the server's certificate could not be verified"
	case errors.As(err, &record):
		return "TLS: the server does not speak TLS (an http:// endpoint?)"
	case errors.As(err, &alert):
		return "TLS: the server ended the handshake"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the connection was refused (nothing listens on that port)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the connection was reset by the server"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "the host is unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), serverClosedIdle):
		return "the server closed the connection"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "the connection timed out"
	}
	return "the connection failed"
}

// Sanitized is an error whose message is Describe's class of the error it wraps; errors.Is
// and errors.As still see the wrapped error (a RefusedError, a context's error).
type Sanitized struct{ err error }

// Sanitize wraps err (nil stays nil) so that its message is Describe(err).
func Sanitize(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := err.(*Sanitized); ok {
		return s
	}
	return &Sanitized{err: err}
}

func (s *Sanitized) Error() string { return Describe(s.err) }
func (s *Sanitized) Unwrap() error { return s.err }

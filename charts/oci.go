package charts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/registry"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// pullTimeout bounds each request of a pull.
const pullTimeout = time.Minute

// OCIOptions say how to reach a registry.
type OCIOptions struct {
	// PlainHTTP speaks HTTP instead of HTTPS.
	PlainHTTP bool
	// Username and Password authenticate to the registry (basic auth); empty for anonymous.
	Username, Password string
	// Egress is the outbound policy the registry is held to (egress.Default when nil).
	Egress *egress.Policy
	// MaxBytes bounds the chart's layer (and every blob of the pull), in bytes;
	// DefaultArchiveBytes when 0. A larger one is refused from its Content-Length, before its
	// body is read, or once that many bytes came without one.
	MaxBytes int64
}

// maxManifestBytes bounds a manifest (and any answer of the registry other than a blob): a
// chart's manifest is under a KiB.
const maxManifestBytes = 256 << 10

// PullOCI pulls version of the chart at repository (oci://HOST/PATH/CHART) with Helm's
// registry client and returns the packaged chart (for FromArchive) and its digest. The
// registry is held to o.Egress; a failure says what went wrong in words of our own
// (oci_egress.go).
func PullOCI(repository, version string, o OCIOptions) ([]byte, string, error) {
	ref := strings.TrimPrefix(repository, "oci://") + ":" + version
	if err := checkOCI(o.Egress, repository, o.PlainHTTP); err != nil {
		return nil, "", fmt.Errorf("failed to pull chart %s: %w", ref, err)
	}
	// Helm reads and writes registry logins in a credentials file; the operator keeps none:
	// an empty one of its own, gone after the pull.
	dir, err := os.MkdirTemp("", "etcd-pilot-registry-")
	if err != nil {
		return nil, "", fmt.Errorf("failed to create a folder for the registry client: %w", err)
	}
	defer os.RemoveAll(dir)
	// A client of our own: a deadline, so a registry that stalls does not hold a worker,
	// no silent fall back from HTTPS to plain HTTP (Helm's default transport does that,
	// which would send a login in the clear), every request held to the policy, and every
	// answer's size capped.
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultArchiveBytes
	}
	hc, status := ociClient(o.Egress)
	hc.Transport = &cappedTransport{next: hc.Transport, blob: maxBytes, other: maxManifestBytes}
	opts := []registry.ClientOption{
		registry.ClientOptCredentialsFile(filepath.Join(dir, "config.json")), registry.ClientOptWriter(&bytes.Buffer{}),
		registry.ClientOptHTTPClient(hc),
	}
	if o.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	if o.Username != "" || o.Password != "" {
		opts = append(opts, registry.ClientOptBasicAuth(o.Username, o.Password))
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("failed to create a registry client: %w", err)
	}
	res, err := c.Pull(ref, registry.PullOptWithChart(true))
	if err != nil {
		var be *BudgetError
		if errors.As(err, &be) {
			return nil, "", be // the registry client's words around it add nothing
		}
		return nil, "", fmt.Errorf("failed to pull chart %s: %w", ref, ociError(err, status.Load()))
	}
	// Only the sizes here: Helm loads the chart where it renders (a sandbox for the operator).
	if err := CheckArchive(res.Chart.Data, Budget{Archive: maxBytes}); err != nil {
		return nil, "", err
	}
	return res.Chart.Data, res.Manifest.Digest, nil
}

// cappedTransport refuses an answer larger than its limit (blob for /blobs/, other for the
// rest) from its Content-Length (a HEAD's too, which announces the GET's), before reading its
// body, and fails the read of one without a Content-Length once it passes the limit: neither
// a layer nor a manifest is buffered beyond it.
type cappedTransport struct {
	next        http.RoundTripper
	blob, other int64
}

func (t *cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil {
		return res, err
	}
	limit, what := t.other, "manifest"
	if strings.Contains(firstRequest(req).URL.Path, "/blobs/") {
		limit, what = t.blob, "layer"
	}
	tooLarge := func(size int64) *BudgetError {
		e := archiveTooLarge(0, t.blob)
		if what == "manifest" {
			e = &BudgetError{Limit: LimitManifest, Value: bytesString(limit)}
		}
		if size > 0 {
			e.Detail = fmt.Sprintf("the registry's %s is %s", what, bytesString(size))
		} else {
			e.Detail = fmt.Sprintf("the registry's %s is larger", what)
		}
		return e
	}
	if res.ContentLength > limit {
		res.Body.Close()
		return nil, tooLarge(res.ContentLength)
	}
	res.Body = &cappedBody{ReadCloser: res.Body, left: limit, err: tooLarge(0)}
	return res, nil
}

// firstRequest is the request a redirect chain began with: a registry may redirect a blob's
// download to a storage URL without /blobs/ in it (ECR sends it to S3), which is still the
// blob. http.Client sets Response on a redirected request to the answer that redirected it.
func firstRequest(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil {
		req = req.Response.Request
	}
	return req
}

// cappedBody fails a read past left bytes.
type cappedBody struct {
	io.ReadCloser
	left int64
	err  error
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, b.err
	}
	return n, err
}

package charts

import (
	"bytes"
	"fmt"
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
}

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
	// which would send a login in the clear), and every request held to the policy.
	hc, status := ociClient(o.Egress)
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
		return nil, "", fmt.Errorf("failed to pull chart %s: %w", ref, ociError(err, status.Load()))
	}
	if _, err := FromArchive(res.Chart.Data); err != nil {
		return nil, "", err
	}
	return res.Chart.Data, res.Manifest.Digest, nil
}

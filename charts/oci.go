package charts

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/registry"
)

// OCIOptions say how to reach a registry.
type OCIOptions struct {
	// PlainHTTP speaks HTTP instead of HTTPS.
	PlainHTTP bool
	// Username and Password authenticate to the registry (basic auth); empty for anonymous.
	Username, Password string
}

// PullOCI pulls version of the chart at repository (oci://HOST/PATH/CHART) with Helm's
// registry client and returns a Renderer for it and the chart's digest.
func PullOCI(repository, version string, o OCIOptions) (*Renderer, string, error) {
	ref := strings.TrimPrefix(repository, "oci://") + ":" + version
	// Helm reads and writes registry logins in a credentials file; the operator keeps none.
	creds := filepath.Join(os.TempDir(), "etcd-pilot-no-registry-credentials.json")
	opts := []registry.ClientOption{registry.ClientOptCredentialsFile(creds), registry.ClientOptWriter(&bytes.Buffer{})}
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
		return nil, "", fmt.Errorf("failed to pull chart %s: %w", ref, err)
	}
	r, err := FromArchive(res.Chart.Data)
	if err != nil {
		return nil, "", err
	}
	return r, res.Manifest.Digest, nil
}

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/cli"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// TestRestorePrepareHoldsTheEndpointToThePolicy: a restore pod reads its snapshot under the
// operator's outbound policy, passed as flags (egress.Policy.Args through
// backup.PrepareArgs): the metadata address is refused by default, plain HTTP unless the
// operator's flags allow it, and the report says so without any connection.
func TestRestorePrepareHoldsTheEndpointToThePolicy(t *testing.T) {
	allowHTTP, err := egress.New(egress.Config{Allowed: []string{"*.s3.example.com"}, AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		endpoint string
		policy   *egress.Policy
		want     string
	}{
		{"https://169.254.169.254", nil, "link-local"},
		{"http://bucket.s3.example.com", nil, "plain HTTP is not allowed"},
		{"https://minio.storage.svc", allowHTTP, "not among the endpoints"},
		{"http://[fd00:ec2::254]", allowHTTP, "cloud metadata address"},
	} {
		report := filepath.Join(t.TempDir(), "report.json")
		args := backup.PrepareArgs{ID: "r1", Volume: t.TempDir(), S3Endpoint: tc.endpoint, S3Bucket: "backups", S3Key: "k", Egress: tc.policy.Args()}
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"restore-prepare", "--report=" + report}, args.Flags()...), nil, &stdout, &stderr)
		b, _ := os.ReadFile(report)
		var rep struct{ Error string }
		_ = json.Unmarshal(b, &rep)
		if code == 0 || !strings.Contains(rep.Error, "refused by the operator's outbound policy") || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s with %q: exit %d, report %s, stderr %s; want refused with %q", tc.endpoint, tc.policy.Args(), code, b, stderr.String(), tc.want)
		}
	}
}

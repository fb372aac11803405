package observe

import (
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// TestEndpointProblem: a restore source whose S3 endpoint the outbound policy refuses is a
// problem the restore reports (the restore pods would be refused it); a claim has none.
func TestEndpointProblem(t *testing.T) {
	restricted, err := egress.New(egress.Config{Allowed: []string{"*.s3.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p        *egress.Policy
		endpoint string // "" for a claim
		want     string // "" no problem
	}{
		{nil, "https://bucket.s3.example.com", ""},
		{nil, "https://169.254.169.254", "link-local"},
		{nil, "http://minio.storage.svc:9000", "plain HTTP is not allowed"},
		{nil, "https://[::1]:9000", "loopback"},
		{nil, "", ""},
		{restricted, "https://eu.s3.example.com", ""},
		{restricted, "https://minio.storage.svc", "not among the endpoints"},
	} {
		s := SnapshotSource{Claim: "backups", Key: "k"}
		if tc.endpoint != "" {
			s = SnapshotSource{S3: &v1alpha1.S3Destination{Endpoint: tc.endpoint}, Key: "k"}
		}
		got := endpointProblem(tc.p, s)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.endpoint, got, tc.want)
		}
	}
}

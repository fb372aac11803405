package render

import (
	"encoding/base64"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

func TestDockerConfigLogin(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("team:s3cret"))
	for _, tc := range []struct {
		name, config, host string
		user, pass         string
		ok                 bool
	}{
		{"username and password", `{"auths":{"reg.example.com:5000":{"username":"team","password":"s3cret"}}}`, "reg.example.com:5000", "team", "s3cret", true},
		{"auth field", `{"auths":{"reg.example.com":{"auth":"` + auth + `"}}}`, "reg.example.com", "team", "s3cret", true},
		{"https key with a slash", `{"auths":{"https://reg.example.com/":{"auth":"` + auth + `"}}}`, "reg.example.com", "team", "s3cret", true},
		{"another host", `{"auths":{"other.example.com":{"auth":"` + auth + `"}}}`, "reg.example.com", "", "", false},
		{"username only", `{"auths":{"reg.example.com":{"username":"team"}}}`, "reg.example.com", "", "", false},
		{"identity token only", `{"auths":{"reg.example.com":{"identitytoken":"t"}}}`, "reg.example.com", "", "", false},
		{"not JSON", `nope`, "reg.example.com", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, p, ok := dockerConfigLogin([]byte(tc.config), tc.host)
			if u != tc.user || p != tc.pass || ok != tc.ok {
				t.Fatalf("got %q %q %v, want %q %q %v", u, p, ok, tc.user, tc.pass, tc.ok)
			}
		})
	}
}

// TestChartSourcesDropWhatNoClusterUses: a chart source no pass asked for in chartSourceIdle
// is dropped with the archive pulled for it; one in use stays, and a dropped one is built
// again when a cluster asks for it.
func TestChartSourcesDropWhatNoClusterUses(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := &Sources{now: func() time.Time { return now }}
	caps := func() (*charts.Capabilities, error) { return nil, nil }
	builds := 0
	build := func(*charts.Capabilities) (*charts.Renderer, error) { builds++; return &charts.Renderer{}, nil }
	used := types.NamespacedName{Namespace: "a", Name: "chart"}
	gone := types.NamespacedName{Namespace: "b", Name: "oci:repo:1.0"}
	s.pulled = map[string][]byte{"repo:1.0": []byte("archive")}
	for _, n := range []types.NamespacedName{used, gone} {
		if _, err := s.get(n, "k", caps, build); err != nil {
			t.Fatal(err)
		}
	}
	// used is asked for every minute; gone never again.
	for i := 0; i < 12; i++ {
		now = now.Add(time.Minute)
		if _, err := s.get(used, "k", caps, build); err != nil {
			t.Fatal(err)
		}
		s.sweep()
	}
	if _, ok := s.entries[gone]; ok {
		t.Fatalf("an entry no pass asked for in %s is still cached", 12*time.Minute)
	}
	if _, ok := s.pulled["repo:1.0"]; ok {
		t.Fatal("the archive pulled for a dropped entry is still cached")
	}
	if _, ok := s.entries[used]; !ok || builds != 2 {
		t.Fatalf("the entry in use was dropped (builds %d, want 2)", builds)
	}
	if _, err := s.get(gone, "k", caps, build); err != nil || builds != 3 {
		t.Fatalf("a dropped entry is not built again: builds %d, %v", builds, err)
	}
}

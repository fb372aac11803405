package charts_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/charts"
)

// hugeRegistry serves one chart whose layer (or manifest) is size bytes of zeros, with or
// without a Content-Length, and counts the bytes of it that it wrote before the client
// hung up.
type hugeRegistry struct {
	*httptest.Server
	served atomic.Int64
}

func newHugeRegistry(t *testing.T, size int64, withLength, hugeManifest bool) *hugeRegistry {
	return newRegistry(t, size, withLength, hugeManifest, false)
}

// newRegistry is newHugeRegistry whose layer download, with redirect, is sent to a storage
// URL without /blobs/ in it, as ECR sends it to S3.
func newRegistry(t *testing.T, size int64, withLength, hugeManifest, redirect bool) *hugeRegistry {
	cfg := []byte(`{"name":"etcd-cluster","version":"0.1.0","apiVersion":"v2"}`)
	sum := sha256.Sum256(cfg)
	cfgDigest := "sha256:" + hex.EncodeToString(sum[:])
	layerDigest := "sha256:" + strings.Repeat("ab", 32)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": cfgDigest, "size": len(cfg)},
		"layers": []map[string]any{{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": layerDigest, "size": size}},
	})
	r := &hugeRegistry{}
	zeros := func(w http.ResponseWriter) {
		if withLength {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		buf := make([]byte, 32<<10)
		for left := size; left > 0; {
			n := min(left, int64(len(buf)))
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			r.served.Add(n)
			left -= n
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
		case strings.Contains(req.URL.Path, "/manifests/"):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			if hugeManifest {
				zeros(w)
				return
			}
			sum := sha256.Sum256(manifest)
			w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if req.Method == http.MethodGet {
				_, _ = w.Write(manifest)
			}
		case strings.HasSuffix(req.URL.Path, "/blobs/"+cfgDigest):
			_, _ = w.Write(cfg)
		case strings.HasSuffix(req.URL.Path, "/blobs/"+layerDigest) && redirect:
			http.Redirect(w, req, "/storage/"+layerDigest, http.StatusTemporaryRedirect)
		case strings.HasSuffix(req.URL.Path, "/blobs/"+layerDigest) || req.URL.Path == "/storage/"+layerDigest:
			zeros(w)
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// TestPullOCIRefusesALargeLayerBeforeReadingIt: a registry's layer (or manifest) above the
// limit is refused from its Content-Length without reading its body, and without one after
// reading no more than the limit: a 256 MiB layer is never read whole.
func TestPullOCIRefusesALargeLayerBeforeReadingIt(t *testing.T) {
	const size = 256 << 20
	for _, tc := range []struct {
		name                     string
		withLength, hugeManifest bool
		limit                    string
	}{
		{"layer with its length", true, false, charts.LimitArchive},
		{"layer without a length", false, false, charts.LimitArchive},
		{"manifest with its length", true, true, charts.LimitManifest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newHugeRegistry(t, size, tc.withLength, tc.hugeManifest)
			_, _, err := charts.PullOCI("oci://"+strings.TrimPrefix(reg.URL, "http://")+"/platform/etcd-cluster", "0.1.0", charts.OCIOptions{PlainHTTP: true, Egress: localRegistry(t)})
			if budgetLimit(err) != tc.limit {
				t.Fatalf("got %v, want the %s limit exceeded", err, tc.limit)
			}
			// Above the 1 MiB limit: what the loopback connection's buffers take in before the
			// client hangs up (some 4 MiB).
			if served := reg.served.Load(); served > 16<<20 {
				t.Fatalf("the registry served %d MiB of the %d MiB: the pull read past the limit", served>>20, size>>20)
			}
			t.Logf("%v (the registry served %d KiB)", err, reg.served.Load()>>10)
		})
	}
}

// TestPullOCIRedirectedLayerKeepsTheLayerLimit: a registry that redirects a layer's download
// to a storage URL without /blobs/ (ECR, to S3) is still reading the layer: it gets the
// layer's limit, not the manifest's 256 KiB.
func TestPullOCIRedirectedLayerKeepsTheLayerLimit(t *testing.T) {
	reg := newRegistry(t, 300<<10, true, false, true)
	_, _, err := charts.PullOCI("oci://"+strings.TrimPrefix(reg.URL, "http://")+"/platform/etcd-cluster", "0.1.0", charts.OCIOptions{PlainHTTP: true, Egress: localRegistry(t)})
	if err == nil || budgetLimit(err) == charts.LimitManifest {
		t.Fatalf("got %v: a 300 KiB layer behind a redirect was held to the manifest limit", err)
	}
	if served := reg.served.Load(); served != 300<<10 {
		t.Fatalf("the registry served %d KiB of the 300 KiB layer", served>>10)
	}
}

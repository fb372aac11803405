// Package ociregistry is a minimal read-only OCI distribution registry for tests: it serves
// Helm charts (manifest, config and chart layer by tag and digest) the way a registry that
// `helm push` wrote to does, over plain HTTP, optionally behind basic auth. Only the reads of
// the distribution spec that a pull makes are served.
package ociregistry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Media types of a Helm chart in a registry.
const (
	manifestType = "application/vnd.oci.image.manifest.v1+json"
	configType   = "application/vnd.cncf.helm.config.v1+json"
	chartType    = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Registry serves charts; Pulls counts manifest reads by tag.
type Registry struct {
	*httptest.Server
	mu        sync.Mutex
	blobs     map[string][]byte // by digest
	manifests map[string][]byte // by "repo:tag" and "repo@digest"
	user      string
	password  string
	pulls     int
}

// New starts a registry; with a user, every request needs basic auth.
func New(user, password string) *Registry {
	r := &Registry{blobs: map[string][]byte{}, manifests: map[string][]byte{}, user: user, password: password}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// Host is the registry's host:port, for oci://HOST/... references.
func (r *Registry) Host() string { return strings.TrimPrefix(r.URL, "http://") }

// Pulls returns how many times a manifest was read by tag.
func (r *Registry) Pulls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulls
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// Push stores a packaged chart (.tgz) as repo:version, with the chart's name and version as
// its config (Helm reads only the layer's chart).
func (r *Registry) Push(repo, name, version string, archive []byte) string {
	cfg, _ := json.Marshal(map[string]string{"name": name, "version": version, "apiVersion": "v2"})
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int    `json:"size"`
	}
	m, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": manifestType,
		"config": desc{configType, digest(cfg), len(cfg)},
		"layers": []desc{{chartType, digest(archive), len(archive)}},
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest(cfg)], r.blobs[digest(archive)] = cfg, archive
	r.manifests[repo+":"+version], r.manifests[repo+"@"+digest(m)] = m, m
	return digest(m)
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	if r.user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "read-only registry", http.StatusMethodNotAllowed)
		return
	}
	path := strings.TrimPrefix(req.URL.Path, "/v2/")
	if path == "" || req.URL.Path == "/v2" {
		w.WriteHeader(http.StatusOK)
		return
	}
	var body []byte
	var typ string
	switch {
	case strings.Contains(path, "/manifests/"):
		i := strings.LastIndex(path, "/manifests/")
		repo, ref := path[:i], path[i+len("/manifests/"):]
		key := repo + ":" + ref
		if strings.HasPrefix(ref, "sha256:") {
			key = repo + "@" + ref
		}
		r.mu.Lock()
		body = r.manifests[key]
		if body != nil && !strings.HasPrefix(ref, "sha256:") && req.Method == http.MethodGet {
			r.pulls++
		}
		r.mu.Unlock()
		typ = manifestType
	case strings.Contains(path, "/blobs/"):
		d := path[strings.LastIndex(path, "/blobs/")+len("/blobs/"):]
		r.mu.Lock()
		body = r.blobs[d]
		r.mu.Unlock()
		typ = "application/octet-stream"
	}
	if body == nil {
		http.Error(w, fmt.Sprintf(`{"errors":[{"code":"NOT_FOUND","message":"%s"}]}`, path), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", typ)
	w.Header().Set("Docker-Content-Digest", digest(body))
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if req.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

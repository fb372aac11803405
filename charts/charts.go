// Package charts embeds the etcd-cluster Helm chart and renders it with Helm v3's engine, the
// same way `helm template` does. It is the only package of etcd-pilot that imports Helm.
package charts

import (
	"bufio"
	"bytes"
	"container/list"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// ChartDir is the folder of the embedded chart, relative to this package.
const ChartDir = "etcd-cluster"

// The "all:" prefix keeps files that start with "_" or ".", such as _helpers.tpl.
//
//go:embed all:etcd-cluster
var embedded embed.FS

// DefaultCacheSize is the number of renders a Renderer keeps.
const DefaultCacheSize = 256

// Release names the Helm release a render is for: the EtcdCluster's name and namespace.
type Release struct {
	Name      string
	Namespace string
}

// Renderer renders one chart and caches the results by a hash of the release and values.
// It is safe for concurrent use.
type Renderer struct {
	chart  *chart.Chart
	bare   *chart.Chart // chart and its subcharts without their values schemas: schema checks values
	schema *chartSchema
	caps   *chartutil.Capabilities // nil: Helm's defaults, as `helm template` without a cluster
	// sandbox, when set, is a chart from outside the binary: chart, bare and schema are nil
	// and every render runs in a sandbox (Sandbox.FromArchive).
	sandbox *sandboxed

	mu    sync.Mutex
	max   int
	lru   *list.List // of *cacheEntry, most recently used first
	index map[[sha256.Size]byte]*list.Element
}

// cacheEntry keeps a render as each object's JSON: a decoded object (nested maps of
// interfaces) takes several times the memory of its JSON, and a hit has to copy the objects
// anyway. 256 renders of the default chart were about 12 MiB of the operator's heap as objects.
type cacheEntry struct {
	key     [sha256.Size]byte
	objects [][]byte
	// err is a render that exceeded the budget, kept until retryAt: the same chart and values
	// exceed it again, and each try would cost the whole budget. A render that was slow only
	// because the operator's node was busy is tried again after that.
	err     error
	retryAt time.Time
}

// budgetRetry is how long a render that exceeded its budget is not tried again for the same
// values.
const budgetRetry = 10 * time.Minute

// Embedded returns a Renderer for the chart compiled into the binary.
func Embedded() (*Renderer, error) {
	sub, err := fs.Sub(embedded, ChartDir)
	if err != nil {
		return nil, fmt.Errorf("failed to open embedded chart: %w", err)
	}
	return FromFS(sub)
}

// FromDir returns a Renderer for the chart in dir (a platform team's customized copy).
func FromDir(dir string) (*Renderer, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to load chart %s: %w", dir, err)
	}
	return newRenderer(c), nil
}

// FromFS returns a Renderer for the chart at the root of fsys.
func FromFS(fsys fs.FS) (*Renderer, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: p, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read chart files: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("failed to load chart: %w", err)
	}
	return newRenderer(c), nil
}

// FromArchive returns a Renderer for a packaged chart (the .tgz `helm package` writes), which
// renders in this process; the archive is held to the default Budget's sizes first. A chart
// from outside the operator renders through Sandbox.FromArchive.
func FromArchive(data []byte) (*Renderer, error) {
	if err := CheckArchive(data, Budget{}); err != nil {
		return nil, err
	}
	c, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("failed to load the chart archive: %w", err)
	}
	return newRenderer(c), nil
}

// Capabilities are what a chart sees of the cluster as .Capabilities: the Kubernetes version
// and the API versions it serves ("group/version" and "group/version/Kind").
type Capabilities struct {
	KubeVersion string
	APIVersions []string
}

// WithCapabilities makes the Renderer render with caps instead of Helm's defaults. Call it
// before the first render; renders stay deterministic for equal caps.
func (r *Renderer) WithCapabilities(caps Capabilities) (*Renderer, error) {
	kv, err := chartutil.ParseKubeVersion(caps.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("failed to parse Kubernetes version %q: %w", caps.KubeVersion, err)
	}
	if r.sandbox != nil {
		r.sandbox.caps = &Capabilities{KubeVersion: caps.KubeVersion, APIVersions: append([]string(nil), caps.APIVersions...)}
		return r, nil
	}
	c := chartutil.DefaultCapabilities.Copy()
	c.KubeVersion = *kv
	c.APIVersions = append(chartutil.VersionSet{}, caps.APIVersions...)
	r.caps = c
	return r, nil
}

// newRenderer returns a Renderer of c; nil for a sandboxed chart, which the caller sets.
func newRenderer(c *chart.Chart) *Renderer {
	r := &Renderer{chart: c, max: DefaultCacheSize, lru: list.New(), index: map[[sha256.Size]byte]*list.Element{}}
	if c != nil {
		r.bare, r.schema = withoutSchemas(c), newChartSchema(c)
	}
	return r
}

// withoutSchemas returns a copy of c whose chart and subcharts have no values schema (the
// templates, values and files are shared, not copied).
func withoutSchemas(c *chart.Chart) *chart.Chart {
	out := *c
	out.Schema = nil
	deps := make([]*chart.Chart, 0, len(c.Dependencies()))
	for _, d := range c.Dependencies() {
		deps = append(deps, withoutSchemas(d))
	}
	out.SetDependencies(deps...)
	return &out
}

// Chart returns the chart's name and version, for labels and logs.
func (r *Renderer) Chart() (name, version string) {
	if r.sandbox != nil {
		return r.sandbox.name, r.sandbox.version
	}
	return r.chart.Metadata.Name, r.chart.Metadata.Version
}

// DefaultValues returns a copy of the chart's values.yaml; nil for a chart that renders in a
// sandbox (the operator does not read a tenant's chart itself).
func (r *Renderer) DefaultValues() map[string]any {
	if r.sandbox != nil {
		return nil
	}
	return chartutil.Values(r.chart.Values).AsMap()
}

// Render renders the chart for a release with values coalesced over the chart's defaults and
// checked against values.schema.json. The objects come out in Helm's install order (then by
// name), without NOTES.txt. Each call returns fresh copies the caller may change. A chart from
// a Sandbox renders in a child process within its Budget; a render that exceeds it (a
// BudgetError) is not tried again for the same values for a while.
func (r *Renderer) Render(rel Release, values map[string]any) ([]*unstructured.Unstructured, error) {
	key, err := cacheKey(rel, values)
	if err != nil {
		return nil, err
	}
	if objs, hit, err := r.cached(key); hit {
		return objs, err
	}
	if r.sandbox != nil {
		raw, err := r.sandbox.render(rel, values)
		if err != nil {
			if IsBudgetError(err) {
				r.keep(&cacheEntry{key: key, err: err, retryAt: time.Now().Add(budgetRetry)})
			}
			return nil, err
		}
		r.keep(&cacheEntry{key: key, objects: raw})
		return decodeObjects(raw)
	}
	objs, err := r.render(rel, values)
	if err != nil {
		return nil, err
	}
	if err := r.store(key, objs); err != nil {
		return nil, err
	}
	return objs, nil
}

func (r *Renderer) render(rel Release, values map[string]any) ([]*unstructured.Unstructured, error) {
	// CoalesceValues may write into the map it is given: hand it a copy.
	vals, err := copyValues(values)
	if err != nil {
		return nil, err
	}
	// Helm's own schema check compiles the schemas on every call; r.schema keeps them
	// compiled and checks the same coalesced values with the same errors.
	top, err := chartutil.ToRenderValuesWithSchemaValidation(r.bare, vals, chartutil.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true,
	}, r.caps, true)
	if err == nil {
		err = r.schema.check(top["Values"].(chartutil.Values))
	}
	if err != nil {
		return nil, fmt.Errorf("failed to prepare values for chart %s: %w", r.chart.Metadata.Name, err)
	}
	files, err := engine.Render(r.chart, top)
	if err != nil {
		return nil, fmt.Errorf("failed to render chart %s: %w", r.chart.Metadata.Name, err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("failed to sort rendered manifests: %w", err)
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("chart %s renders Helm hooks (%s); etcd-pilot applies plain objects only", r.chart.Metadata.Name, hooks[0].Path)
	}
	var out []*unstructured.Unstructured
	for _, m := range manifests {
		objs, err := DecodeManifests(m.Content)
		if err != nil {
			return nil, fmt.Errorf("failed to decode %s: %w", m.Name, err)
		}
		for _, o := range objs {
			if o.GetNamespace() == "" {
				o.SetNamespace(rel.Namespace)
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// DecodeManifests parses a YAML stream of Kubernetes objects the way kubectl does (integers
// become int64), skipping empty documents and comments such as Helm's "# Source:" lines.
func DecodeManifests(content string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(content)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(js)) == 0 || bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("failed to decode object: %w", err)
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("a list of objects is not supported in a chart template")
		}
		out = append(out, u)
	}
}

// cacheKey hashes the release and the values. encoding/json sorts map keys, so equal values
// give equal keys.
func cacheKey(rel Release, values map[string]any) ([sha256.Size]byte, error) {
	b, err := json.Marshal(values)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("failed to encode values: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", rel.Namespace, rel.Name)
	h.Write(b)
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k, nil
}

// cached returns the render kept for key, or the budget error kept for it until its retryAt.
func (r *Renderer) cached(key [sha256.Size]byte) (objs []*unstructured.Unstructured, hit bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.index[key]
	if !ok {
		return nil, false, nil
	}
	e := el.Value.(*cacheEntry)
	if e.err != nil {
		if time.Now().Before(e.retryAt) {
			r.lru.MoveToFront(el)
			return nil, true, e.err
		}
		r.lru.Remove(el)
		delete(r.index, key)
		return nil, false, nil
	}
	r.lru.MoveToFront(el)
	out, err := decodeObjects(e.objects)
	if err != nil {
		return nil, false, nil // cannot happen: the JSON was encoded from an object; render again
	}
	return out, true, nil
}

func (r *Renderer) store(key [sha256.Size]byte, objs []*unstructured.Unstructured) error {
	raw := make([][]byte, 0, len(objs))
	for _, o := range objs {
		js, err := o.MarshalJSON()
		if err != nil {
			return fmt.Errorf("failed to encode rendered %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		raw = append(raw, js)
	}
	r.keep(&cacheEntry{key: key, objects: raw})
	return nil
}

// keep caches e, in place of an entry of the same key, dropping the least recently used
// entries above the cache's size.
func (r *Renderer) keep(e *cacheEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.index[e.key]; ok {
		r.lru.Remove(el)
	}
	r.index[e.key] = r.lru.PushFront(e)
	for r.lru.Len() > r.max {
		last := r.lru.Back()
		r.lru.Remove(last)
		delete(r.index, last.Value.(*cacheEntry).key)
	}
}

// copyValues deep-copies values the way `helm template -f values.yaml` reads them (through
// YAML, so numbers become float64 as in Helm), which keeps renders identical to the CLI's.
func copyValues(values map[string]any) (map[string]any, error) {
	b, err := sigsyaml.Marshal(values)
	if err != nil {
		return nil, fmt.Errorf("failed to encode values: %w", err)
	}
	v, err := chartutil.ReadValues(b)
	if err != nil {
		return nil, fmt.Errorf("failed to decode values: %w", err)
	}
	return v.AsMap(), nil
}

// ParseSet merges one Helm --set expression (a.b=c,d=e) into values, with Helm's own parser,
// so `etcd-pilot render --set` means exactly what `helm template --set` means.
func ParseSet(expr string, values map[string]any) error {
	if err := strvals.ParseInto(expr, values); err != nil {
		return fmt.Errorf("failed to parse --set %q: %w", expr, err)
	}
	return nil
}

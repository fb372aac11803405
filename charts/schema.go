package charts

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// chartSchema holds the values schema of a chart, compiled, and its subcharts'. Helm compiles
// a chart's values.schema.json on every render (chartutil.ValidateAgainstSchema): with hundreds
// of clusters rendering at once that was about 12 MiB of the operator's heap in flight, and a
// schema that refers to an http(s) URL was fetched again on every render. Here a schema is
// compiled the first time values are checked against it and kept; validation gives Helm's own
// errors, word for word. A compile that fails (a referenced URL that does not answer) is not
// kept: the next render tries again, as Helm would.
type chartSchema struct {
	name string
	raw  []byte // values.schema.json; nil when the chart has none
	deps []*chartSchema
	// egress is the policy the http(s) URLs the schema refers to are fetched under
	// (egress.Default when nil): a chart from spec.chart.source is the tenant's.
	egress *egress.Policy

	mu     sync.Mutex
	schema *jsonschema.Schema
}

// newChartSchema builds the (uncompiled) schemas of c and its subcharts.
func newChartSchema(c *chart.Chart) *chartSchema {
	cs := &chartSchema{name: c.Name(), raw: c.Schema}
	for _, dep := range c.Dependencies() {
		cs.deps = append(cs.deps, newChartSchema(dep))
	}
	return cs
}

// check checks the coalesced values against the schemas, as Helm's ToRenderValues does, with
// the same error.
func (cs *chartSchema) check(vals chartutil.Values) error {
	if err := cs.validate(vals); err != nil {
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s", err.Error())
	}
	return nil
}

// compiled returns the chart's compiled schema, compiling it on the first call that succeeds.
func (cs *chartSchema) compiled() (*jsonschema.Schema, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.schema == nil {
		sch, err := compileSchema(cs.raw, cs.egress)
		if err != nil {
			return nil, err
		}
		cs.schema = sch
	}
	return cs.schema, nil
}

// compileSchema compiles one values.schema.json with the loaders Helm uses (http and https,
// under the outbound policy p, and urn through chartutil.URNResolver), except files: a chart's
// schema is its own document, and a reference to a file would read the operator's.
func compileSchema(schemaJSON []byte, p *egress.Policy) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	web := httpLoader(p)
	compiler := jsonschema.NewCompiler()
	compiler.UseLoader(jsonschema.SchemeURLLoader{
		"file":  noFiles{},
		"http":  web,
		"https": web,
		"urn":   urnLoader{},
	})
	if err := compiler.AddResource("file:///values.schema.json", doc); err != nil {
		return nil, err
	}
	return compiler.Compile("file:///values.schema.json")
}

// validate is chartutil.ValidateAgainstSchema with compiled schemas: the same checks, in the
// same order, with the same messages.
func (cs *chartSchema) validate(values map[string]any) error {
	var sb strings.Builder
	if cs.raw != nil {
		if err := cs.validateOwn(values); err != nil {
			fmt.Fprintf(&sb, "%s:\n", cs.name)
			sb.WriteString(err.Error())
		}
	}
	for _, dep := range cs.deps {
		raw, ok := values[dep.name]
		if !ok || raw == nil {
			continue
		}
		sub, ok := raw.(map[string]any)
		if !ok {
			fmt.Fprintf(&sb, "%s:\ninvalid type for values: expected object (map), got %T\n", dep.name, raw)
			continue
		}
		if err := dep.validate(sub); err != nil {
			sb.WriteString(err.Error())
		}
	}
	if sb.Len() > 0 {
		return errors.New(sb.String())
	}
	return nil
}

// validateOwn is chartutil.ValidateAgainstSingleSchema with the schema compiled once.
func (cs *chartSchema) validateOwn(values chartutil.Values) (reterr error) {
	defer func() {
		if r := recover(); r != nil {
			reterr = fmt.Errorf("unable to validate schema: %s", r)
		}
	}()
	sch, err := cs.compiled()
	if err != nil {
		return err
	}
	if err := sch.Validate(values.AsMap()); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n") + "\n")
	}
	return nil
}

// httpLoader loads a schema an http(s) URL refers to, as Helm's does (proxy from the
// environment, 15 s timeout), under the outbound policy p.
func httpLoader(p *egress.Policy) *chartutil.HTTPURLLoader {
	l := chartutil.HTTPURLLoader(http.Client{
		Timeout:   15 * time.Second,
		Transport: p.Transport(&http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{}}),
	})
	return &l
}

// noFiles refuses file: references (the schema itself is added as a resource, not loaded).
type noFiles struct{}

func (noFiles) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: a values schema may not refer to files", url)
}

// setEgress sets the policy of cs and its subcharts' schemas.
func (cs *chartSchema) setEgress(p *egress.Policy) {
	cs.mu.Lock()
	cs.egress = p
	cs.mu.Unlock()
	for _, d := range cs.deps {
		d.setEgress(p)
	}
}

// urnLoader resolves urn: references with chartutil.URNResolver and, like Helm, takes an
// unresolved one as the permissive schema "true".
type urnLoader struct{}

func (urnLoader) Load(urn string) (any, error) {
	if doc, err := chartutil.URNResolver(urn); err == nil && doc != nil {
		return doc, nil
	}
	return jsonschema.UnmarshalJSON(strings.NewReader("true"))
}

// WithEgress makes the http(s) URLs the chart's values schemas refer to be fetched under the
// outbound policy p (egress.Default otherwise): for a chart a tenant supplied. Call it before
// the first render.
func (r *Renderer) WithEgress(p *egress.Policy) *Renderer {
	if r.schema != nil {
		r.schema.setEgress(p)
	}
	if r.sandbox != nil {
		// The schema is read in the sandbox: it gets the policy as flags.
		r.sandbox.egress = p.Args()
	}
	return r
}

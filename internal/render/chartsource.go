package render

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

// ChartSourceError is a spec.chart.source that cannot be rendered: the ConfigMap or its key
// is missing, or the archive is not a chart. It is reported in Degraded like an invalid spec.
type ChartSourceError struct {
	msg string
	err error // what it wraps, if anything (a *charts.BudgetError)
}

func (e *ChartSourceError) Error() string { return e.msg }

func (e *ChartSourceError) Unwrap() error { return e.err }

// IsChartSourceError reports whether err is about spec.chart.source: a chart that cannot be
// read, exceeds the render budget (IsChartTooExpensive), or a render sandbox that could not
// run. Neither the ConfigMap nor the registry is watched: the operator looks again after a
// while.
func IsChartSourceError(err error) bool {
	var ce *ChartSourceError
	var se *charts.SandboxError
	return errors.As(err, &ce) || IsChartTooExpensive(err) || errors.As(err, &se)
}

// IsChartTooExpensive reports whether err is a chart from spec.chart.source that exceeds the
// operator's render budget (its archive's size, the memory or time of its render, the size of
// what it renders): Degraded, reason ChartTooExpensive, until the chart or its values change.
func IsChartTooExpensive(err error) bool {
	return charts.IsBudgetError(err)
}

// Sources caches the Renderers of charts read from ConfigMaps, by ConfigMap UID and
// resourceVersion: an unchanged ConfigMap is not unpacked again, and renders stay cached.
// An entry no pass asked for in chartSourceIdle is dropped (every cluster using it is looked
// at more often than that), with the pulled archive only it used: the cache holds the
// sources clusters use now, not every one they ever used.
type Sources struct {
	// Embedded renders clusters without spec.chart.source.
	Embedded *charts.Renderer
	// Reader reads chart ConfigMaps and pull Secrets, past the cache (the operator caches
	// only the ConfigMaps it writes).
	Reader client.Reader
	// Discovery reads the cluster's version and API versions, which charts from
	// spec.chart.source see as .Capabilities; Helm's defaults when nil.
	Discovery discovery.DiscoveryInterface
	// Recorder, when set, records a ChartPulled event on the cluster.
	Recorder events.EventRecorder
	// Egress is the outbound policy registries and the URLs a chart's schema refers to are
	// held to (egress.Default when nil).
	Egress *egress.Policy
	// Sandbox, when set, renders the charts of spec.chart.source in child processes within
	// its budget, and bounds their archives and registries' answers; nil renders them in this
	// process (etcd-pilot render, tests).
	Sandbox *charts.Sandbox

	mu      sync.Mutex
	entries map[types.NamespacedName]chartSourceEntry
	// now is the clock (tests); time.Now when nil.
	now     func() time.Time
	sweptAt time.Time

	capsAt time.Time
	caps   *charts.Capabilities
	// pulled are the charts pulled from registries, by repository, version and login: a
	// version is pulled once, whatever the capabilities.
	pulled map[string][]byte
}

// capabilitiesTTL is how long the cluster's version and API versions are kept: a CRD
// installed later reaches charts within it.
const capabilitiesTTL = 10 * time.Minute

// chartSourceIdle is how long a chart source no pass asked for stays cached: well above the
// settled requeue interval.
const chartSourceIdle = 10 * time.Minute

type chartSourceEntry struct {
	key      string // what the Renderer was built from; another key builds anew
	renderer *charts.Renderer
	// err is a chart that exceeded the budget when built from key: the same ConfigMap version
	// or registry version exceeds it again, and is not read or pulled again.
	err  error
	used time.Time
}

func (s *Sources) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// sweep is sweepLocked at most once a minute, on every pass: a source the last cluster using
// it stopped using is dropped even when no other cluster asks for a chart source.
func (s *Sources) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	if now.Sub(s.sweptAt) < time.Minute {
		return
	}
	s.sweptAt = now
	s.sweepLocked(now)
}

// sweepLocked drops the entries not asked for in chartSourceIdle, and the pulled archives no
// entry left was built from.
func (s *Sources) sweepLocked(now time.Time) {
	for name, e := range s.entries {
		if now.Sub(e.used) > chartSourceIdle {
			delete(s.entries, name)
		}
	}
	for k := range s.pulled {
		inUse := false
		for name := range s.entries {
			if name.Name == "oci:"+k {
				inUse = true
				break
			}
		}
		if !inUse {
			delete(s.pulled, k)
		}
	}
}

// get returns the Renderer cached for name when it was built from key, else builds one with
// the cluster's capabilities and caches it. A failed build is not cached, but for a chart
// that exceeds the budget.
func (s *Sources) get(name types.NamespacedName, key string, caps func() (*charts.Capabilities, error), build func(*charts.Capabilities) (*charts.Renderer, error)) (*charts.Renderer, error) {
	cs, err := caps()
	if err != nil {
		return nil, err
	}
	// Other capabilities build anew: a CRD installed since reaches the chart. Equal ones read
	// again do not: a chart in a sandbox costs a process to load and one per render.
	key = fmt.Sprintf("%s caps=%s", key, capabilitiesKey(cs))
	s.mu.Lock()
	now := s.clock()
	if e, ok := s.entries[name]; ok && e.key == key {
		e.used = now
		s.entries[name] = e
		s.mu.Unlock()
		return e.renderer, e.err
	}
	s.sweepLocked(now)
	s.mu.Unlock()
	rend, err := build(cs)
	if err != nil && !IsChartTooExpensive(err) {
		return nil, err
	}
	if rend != nil {
		rend.WithEgress(s.Egress)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[types.NamespacedName]chartSourceEntry{}
	}
	s.entries[name] = chartSourceEntry{key: key, renderer: rend, err: err, used: s.clock()}
	return rend, err
}

// capabilitiesKey is a hash of caps ("none" for nil).
func capabilitiesKey(caps *charts.Capabilities) string {
	if caps == nil {
		return "none"
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", caps.KubeVersion)
	for _, v := range caps.APIVersions {
		fmt.Fprintf(h, "%s\x00", v)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// For returns the Renderer of c's chart: the operator's own unless spec.chart.source
// names a ConfigMap. The ConfigMap is read past the cache (the operator caches only the
// ConfigMaps it writes); an unchanged one is not unpacked again.
func (s *Sources) For(ctx context.Context, c *v1alpha1.EtcdCluster) (*charts.Renderer, error) {
	s.sweep()
	src := c.Spec.Chart.Source
	if src == nil || (src.ConfigMap == nil && src.OCI == nil) {
		return s.Embedded, nil
	}
	if src.OCI != nil {
		return s.ociRenderer(ctx, c)
	}
	// Its metadata every pass (a chart may be near a MiB); all of it only when it changed.
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	name := types.NamespacedName{Namespace: c.Namespace, Name: src.ConfigMap.Name}
	if err := s.Reader.Get(ctx, name, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, configMapMissing(name, src.ConfigMap.Key)
		}
		return nil, fmt.Errorf("failed to get chart ConfigMap %s: %w", name, err)
	}
	built := fmt.Sprintf("%s@%s/%s", meta.UID, meta.ResourceVersion, src.ConfigMap.Key)
	return s.get(name, built, s.capabilities, func(caps *charts.Capabilities) (*charts.Renderer, error) {
		cm, key, err := chartConfigMap(ctx, s.Reader, c)
		if err != nil {
			return nil, err
		}
		return chartFromConfigMap(cm, key, caps, s.Sandbox)
	})
}

// ociRenderer pulls spec.chart.source.oci once per repository, version and pull Secret
// version; a failed pull is tried again on the next pass.
func (s *Sources) ociRenderer(ctx context.Context, c *v1alpha1.EtcdCluster) (*charts.Renderer, error) {
	o := c.Spec.Chart.Source.OCI
	opts, secretVersion, err := ociOptions(ctx, s.Reader, c)
	if err != nil {
		return nil, err
	}
	opts.Egress = s.Egress
	if s.Sandbox != nil {
		opts.MaxBytes = s.Sandbox.Budget().Archive
	}
	key := fmt.Sprintf("%s:%s plain=%t secret=%s@%s", o.Repository, o.Version, o.PlainHTTP, o.PullSecret, secretVersion)
	// By the whole key: clusters of a namespace on different versions keep one each.
	name := types.NamespacedName{Namespace: c.Namespace, Name: "oci:" + key}
	return s.get(name, key, s.capabilities, func(caps *charts.Capabilities) (*charts.Renderer, error) {
		s.mu.Lock()
		archive, ok := s.pulled[key]
		s.mu.Unlock()
		if !ok {
			var err error
			if archive, err = pullOCI(o, opts); err != nil {
				return nil, err
			}
			s.mu.Lock()
			if s.pulled == nil {
				s.pulled = map[string][]byte{}
			}
			s.pulled[key] = archive
			s.mu.Unlock()
			if s.Recorder != nil {
				s.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ChartPulled", "PullChart", "Pulled chart %s version %s", o.Repository, o.Version)
			}
		}
		return rendererWith(archive, caps, s.Sandbox)
	})
}

func pullOCI(o *v1alpha1.OCIChartSource, opts charts.OCIOptions) ([]byte, error) {
	archive, _, err := charts.PullOCI(o.Repository, o.Version, opts)
	if err != nil {
		return nil, &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.oci: %v", err), err: err}
	}
	return archive, nil
}

// fromArchive is a Renderer of the packaged chart: in sb's sandboxes, or in this process
// when sb is nil.
func fromArchive(archive []byte, sb *charts.Sandbox) (*charts.Renderer, error) {
	if sb != nil {
		return sb.FromArchive(archive)
	}
	return charts.FromArchive(archive)
}

// rendererWith is a Renderer of the packaged chart with caps (nil: Helm's defaults), rendering
// in sb's sandboxes (nil: in this process).
func rendererWith(archive []byte, caps *charts.Capabilities, sb *charts.Sandbox) (*charts.Renderer, error) {
	rend, err := fromArchive(archive, sb)
	if err != nil {
		return nil, &ChartSourceError{msg: fmt.Sprintf("spec.chart.source: %v", err), err: err}
	}
	if caps != nil {
		return rend.WithCapabilities(*caps)
	}
	return rend, nil
}

// ociOptions reads the registry credentials of spec.chart.source.oci.pullSecret for the
// repository's host, and the Secret's resourceVersion (a new login pulls again).
func ociOptions(ctx context.Context, reader client.Reader, c *v1alpha1.EtcdCluster) (charts.OCIOptions, string, error) {
	o := c.Spec.Chart.Source.OCI
	opts := charts.OCIOptions{PlainHTTP: o.PlainHTTP}
	if o.PullSecret == "" {
		return opts, "", nil
	}
	sec := &corev1.Secret{}
	name := types.NamespacedName{Namespace: c.Namespace, Name: o.PullSecret}
	if err := reader.Get(ctx, name, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return opts, "", &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.oci.pullSecret: Secret %s not found (create it with kubectl create secret docker-registry)", name)}
		}
		return opts, "", fmt.Errorf("failed to get pull Secret %s: %w", name, err)
	}
	host := strings.SplitN(strings.TrimPrefix(o.Repository, "oci://"), "/", 2)[0]
	user, pass, ok := dockerConfigLogin(sec.Data[corev1.DockerConfigJsonKey], host)
	if !ok {
		return opts, "", &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.oci.pullSecret: Secret %s has no login (username and password, or auth) for %s in %s; identity tokens are not supported", name, host, corev1.DockerConfigJsonKey)}
	}
	opts.Username, opts.Password = user, pass
	return opts, sec.ResourceVersion, nil
}

// dockerConfigLogin finds host's username and password in a .dockerconfigjson.
func dockerConfigLogin(data []byte, host string) (string, string, bool) {
	var cfg struct {
		Auths map[string]struct {
			Username string `json:"username"`
			Password string `json:"password"`
			Auth     string `json:"auth"`
		} `json:"auths"`
	}
	if json.Unmarshal(data, &cfg) != nil {
		return "", "", false
	}
	for k, a := range cfg.Auths {
		k = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://"), "/")
		if k != host {
			continue
		}
		if a.Username != "" && a.Password != "" {
			return a.Username, a.Password, true
		}
		if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
			if u, p, ok := strings.Cut(string(b), ":"); ok && u != "" && p != "" {
				return u, p, true
			}
		}
	}
	return "", "", false
}

// ChartFor returns the Renderer of c's chart as the operator would pick it: embedded unless
// spec.chart.source names a ConfigMap (read with reader) or an OCI chart (pulled now, under
// the outbound policy p); d reads what such a chart sees of the cluster (nil: Helm's
// defaults). A chart from the cluster renders in sb, as the operator renders it: a tenant's
// chart costs the one who runs the command no more than the budget. For `etcd-pilot render
// --live`.
func ChartFor(ctx context.Context, reader client.Reader, d discovery.DiscoveryInterface, embedded *charts.Renderer, c *v1alpha1.EtcdCluster, p *egress.Policy, sb *charts.Sandbox) (*charts.Renderer, error) {
	rend, err := chartFor(ctx, reader, d, embedded, c, p, sb)
	if err != nil || rend == embedded {
		return rend, err
	}
	return rend.WithEgress(p), nil
}

func chartFor(ctx context.Context, reader client.Reader, d discovery.DiscoveryInterface, embedded *charts.Renderer, c *v1alpha1.EtcdCluster, p *egress.Policy, sb *charts.Sandbox) (*charts.Renderer, error) {
	src := c.Spec.Chart.Source
	if src == nil || (src.ConfigMap == nil && src.OCI == nil) {
		return embedded, nil
	}
	var caps *charts.Capabilities
	var err error
	if d != nil {
		if caps, err = readCapabilities(d); err != nil {
			return nil, err
		}
	}
	if src.OCI != nil {
		opts, _, err := ociOptions(ctx, reader, c)
		if err != nil {
			return nil, err
		}
		opts.Egress = p
		archive, err := pullOCI(src.OCI, opts)
		if err != nil {
			return nil, err
		}
		return rendererWith(archive, caps, sb)
	}
	cm, key, err := chartConfigMap(ctx, reader, c)
	if err != nil {
		return nil, err
	}
	return chartFromConfigMap(cm, key, caps, sb)
}

func chartConfigMap(ctx context.Context, reader client.Reader, c *v1alpha1.EtcdCluster) (*corev1.ConfigMap, string, error) {
	src := c.Spec.Chart.Source.ConfigMap
	key := src.Key
	if key == "" {
		key = "chart.tgz"
	}
	name := types.NamespacedName{Namespace: c.Namespace, Name: src.Name}
	cm := &corev1.ConfigMap{}
	if err := reader.Get(ctx, name, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", configMapMissing(name, key)
		}
		return nil, "", fmt.Errorf("failed to get chart ConfigMap %s: %w", name, err)
	}
	return cm, key, nil
}

func configMapMissing(name types.NamespacedName, key string) error {
	if key == "" {
		key = "chart.tgz"
	}
	return &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s not found; create it with the packaged chart under binaryData key %s (kubectl create configmap %s --from-file=%s=CHART.tgz)", name, key, name.Name, key)}
}

// chartFromConfigMap is a Renderer of the chart in cm's binaryData key, rendering in sb's
// sandboxes (nil: in this process).
func chartFromConfigMap(cm *corev1.ConfigMap, key string, caps *charts.Capabilities, sb *charts.Sandbox) (*charts.Renderer, error) {
	name := cm.Namespace + "/" + cm.Name
	data, ok := cm.BinaryData[key]
	if !ok {
		keys := make([]string, 0, len(cm.BinaryData))
		for k := range cm.BinaryData {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s has no binaryData key %s (it has %v); the packaged chart goes there", name, key, keys)}
	}
	rend, err := fromArchive(data, sb)
	if err != nil {
		return nil, &ChartSourceError{msg: fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s key %s: %v", name, key, err), err: err}
	}
	if caps != nil {
		return rend.WithCapabilities(*caps)
	}
	return rend, nil
}

// capabilities reads the cluster's version and API versions for charts from a
// spec.chart.source (the embedded chart does not depend on them), again after
// capabilitiesTTL; a failed read is not kept. nil without Discovery.
func (s *Sources) capabilities() (*charts.Capabilities, error) {
	if s.Discovery == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caps != nil && time.Since(s.capsAt) < capabilitiesTTL {
		return s.caps, nil
	}
	caps, err := readCapabilities(s.Discovery)
	if err != nil {
		return nil, &ChartSourceError{msg: fmt.Sprintf("spec.chart.source: %v (the chart sees them as .Capabilities)", err)}
	}
	s.caps, s.capsAt = caps, time.Now()
	return caps, nil
}

func readCapabilities(d discovery.DiscoveryInterface) (*charts.Capabilities, error) {
	v, err := d.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("failed to read the Kubernetes version: %w", err)
	}
	_, lists, err := d.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("failed to read the API versions the cluster serves: %w", err)
	}
	caps := &charts.Capabilities{KubeVersion: v.GitVersion}
	for _, l := range lists {
		caps.APIVersions = append(caps.APIVersions, l.GroupVersion)
		for _, res := range l.APIResources {
			caps.APIVersions = append(caps.APIVersions, l.GroupVersion+"/"+res.Kind)
		}
	}
	return caps, nil
}

package controllers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
)

// The embedded chart's optional PodMonitor (monitoring.podMonitor) is applied as an extra
// kind (not watched: the Prometheus Operator's CRD may be missing).
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;create;patch;delete

// ChartSourceError is a spec.chart.source that cannot be rendered: the ConfigMap or its key
// is missing, or the archive is not a chart. It is reported in Degraded like an invalid spec.
type ChartSourceError struct{ msg string }

func (e *ChartSourceError) Error() string { return e.msg }

func isChartSourceError(err error) bool {
	var ce *ChartSourceError
	return errors.As(err, &ce)
}

// chartSources caches the Renderers of charts read from ConfigMaps, by ConfigMap UID and
// resourceVersion: an unchanged ConfigMap is not unpacked again, and renders stay cached.
type chartSources struct {
	mu      sync.Mutex
	entries map[types.NamespacedName]chartSourceEntry

	capsOnce sync.Once
	caps     *charts.Capabilities
	capsErr  error
}

type chartSourceEntry struct {
	key      string // what the Renderer was built from; another key builds anew
	renderer *charts.Renderer
}

// get returns the Renderer cached for name when it was built from key, else builds one with
// the cluster's capabilities and caches it. A failed build is not cached.
func (s *chartSources) get(name types.NamespacedName, key string, caps func() (*charts.Capabilities, error), build func(*charts.Capabilities) (*charts.Renderer, error)) (*charts.Renderer, error) {
	s.mu.Lock()
	if e, ok := s.entries[name]; ok && e.key == key {
		s.mu.Unlock()
		return e.renderer, nil
	}
	s.mu.Unlock()
	cs, err := caps()
	if err != nil {
		return nil, err
	}
	rend, err := build(cs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[types.NamespacedName]chartSourceEntry{}
	}
	s.entries[name] = chartSourceEntry{key: key, renderer: rend}
	return rend, nil
}

// rendererFor returns the Renderer of c's chart: the operator's own unless spec.chart.source
// names a ConfigMap. The ConfigMap is read past the cache (the operator caches only the
// ConfigMaps it writes); an unchanged one is not unpacked again.
func (r *EtcdClusterReconciler) rendererFor(ctx context.Context, c *v1alpha1.EtcdCluster) (*charts.Renderer, error) {
	src := c.Spec.Chart.Source
	if src == nil || (src.ConfigMap == nil && src.OCI == nil) {
		return r.Renderer, nil
	}
	if src.OCI != nil {
		return r.ociRenderer(ctx, c)
	}
	cm, key, err := chartConfigMap(ctx, r.apiReader(), c)
	if err != nil {
		return nil, err
	}
	name := types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}
	built := fmt.Sprintf("%s@%s/%s", cm.UID, cm.ResourceVersion, key)
	return r.sources.get(name, built, r.capabilities, func(caps *charts.Capabilities) (*charts.Renderer, error) {
		return chartFromConfigMap(cm, key, caps)
	})
}

// ociRenderer pulls spec.chart.source.oci once per repository, version and pull Secret
// version; a failed pull is tried again on the next pass.
func (r *EtcdClusterReconciler) ociRenderer(ctx context.Context, c *v1alpha1.EtcdCluster) (*charts.Renderer, error) {
	o := c.Spec.Chart.Source.OCI
	opts, secretVersion, err := ociOptions(ctx, r.apiReader(), c)
	if err != nil {
		return nil, err
	}
	name := types.NamespacedName{Namespace: c.Namespace, Name: "oci:" + o.Repository}
	key := fmt.Sprintf("%s:%s plain=%t secret=%s@%s", o.Repository, o.Version, o.PlainHTTP, o.PullSecret, secretVersion)
	pulled := false
	rend, err := r.sources.get(name, key, r.capabilities, func(caps *charts.Capabilities) (*charts.Renderer, error) {
		pulled = true
		return pullOCI(o, opts, caps)
	})
	if pulled && err == nil {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ChartPulled", "PullChart", "Pulled chart %s version %s", o.Repository, o.Version)
	}
	return rend, err
}

func pullOCI(o *v1alpha1.OCIChartSource, opts charts.OCIOptions, caps *charts.Capabilities) (*charts.Renderer, error) {
	rend, _, err := charts.PullOCI(o.Repository, o.Version, opts)
	if err != nil {
		return nil, &ChartSourceError{fmt.Sprintf("spec.chart.source.oci: %v", err)}
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
			return opts, "", &ChartSourceError{fmt.Sprintf("spec.chart.source.oci.pullSecret: Secret %s not found (create it with kubectl create secret docker-registry)", name)}
		}
		return opts, "", fmt.Errorf("failed to get pull Secret %s: %w", name, err)
	}
	host := strings.SplitN(strings.TrimPrefix(o.Repository, "oci://"), "/", 2)[0]
	user, pass, ok := dockerConfigLogin(sec.Data[corev1.DockerConfigJsonKey], host)
	if !ok {
		return opts, "", &ChartSourceError{fmt.Sprintf("spec.chart.source.oci.pullSecret: Secret %s has no login for %s in %s", name, host, corev1.DockerConfigJsonKey)}
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
		if a.Username != "" || a.Password != "" {
			return a.Username, a.Password, true
		}
		if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
			if u, p, ok := strings.Cut(string(b), ":"); ok {
				return u, p, true
			}
		}
	}
	return "", "", false
}

// ChartFor returns the Renderer of c's chart as the operator would pick it: embedded unless
// spec.chart.source names a ConfigMap, read with reader; caps (nil: Helm's defaults) are what
// such a chart sees of the cluster. For `etcd-pilot render --live`.
func ChartFor(ctx context.Context, reader client.Reader, d discovery.DiscoveryInterface, embedded *charts.Renderer, c *v1alpha1.EtcdCluster) (*charts.Renderer, error) {
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
		return pullOCI(src.OCI, opts, caps)
	}
	cm, key, err := chartConfigMap(ctx, reader, c)
	if err != nil {
		return nil, err
	}
	return chartFromConfigMap(cm, key, caps)
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
			return nil, "", &ChartSourceError{fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s not found; create it with the packaged chart under binaryData key %s (kubectl create configmap %s --from-file=%s=CHART.tgz)", name, key, name.Name, key)}
		}
		return nil, "", fmt.Errorf("failed to get chart ConfigMap %s: %w", name, err)
	}
	return cm, key, nil
}

func chartFromConfigMap(cm *corev1.ConfigMap, key string, caps *charts.Capabilities) (*charts.Renderer, error) {
	name := cm.Namespace + "/" + cm.Name
	data, ok := cm.BinaryData[key]
	if !ok {
		keys := make([]string, 0, len(cm.BinaryData))
		for k := range cm.BinaryData {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, &ChartSourceError{fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s has no binaryData key %s (it has %v); the packaged chart goes there", name, key, keys)}
	}
	rend, err := charts.FromArchive(data)
	if err != nil {
		return nil, &ChartSourceError{fmt.Sprintf("spec.chart.source.configMap: ConfigMap %s key %s: %v", name, key, err)}
	}
	if caps != nil {
		return rend.WithCapabilities(*caps)
	}
	return rend, nil
}

// capabilities reads the cluster's version and API versions once, for charts from a
// spec.chart.source (the embedded chart does not depend on them). nil without Discovery.
func (r *EtcdClusterReconciler) capabilities() (*charts.Capabilities, error) {
	if r.Discovery == nil {
		return nil, nil
	}
	s := &r.sources
	s.capsOnce.Do(func() {
		s.caps, s.capsErr = readCapabilities(r.Discovery)
	})
	return s.caps, s.capsErr
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

// Package render turns an EtcdCluster into the objects the operator applies: the chart source,
// the render, the patches, the chart contract, and what the controllers need to know of the
// rendered StatefulSet (Topology). It talks to no cluster except to read a chart source.
package render

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstructuredv1 "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/postrender"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

type unstructured = unstructuredv1.Unstructured

// ClientTLSEnabled reports whether the cluster serves its client port over TLS.
func ClientTLSEnabled(c *v1alpha1.EtcdCluster) bool {
	return c.Spec.TLS != nil && c.Spec.TLS.Client != nil
}

// PeerURL is the peer URL a pod advertises, from the rendered StatefulSet's
// --initial-advertise-peer-urls with $(POD_NAME) substituted.
func (t Topology) PeerURL(pod string) string {
	return strings.ReplaceAll(t.PeerURLTemplate, "$(POD_NAME)", pod)
}

// Desired returns exactly the objects the operator applies for c: the chart rendered with the
// values computed from c for an operator running as op, each with c as its controlling owner when c has a UID (an object
// read from a file has none, and then the chart's output is returned as is). An error means
// the spec cannot be turned into objects; its message says what to fix.
// m is what the pass remembers (memory.Of(c) outside a pass).
func Desired(r *charts.Renderer, c *v1alpha1.EtcdCluster, op values.Operator, m memory.Memory) ([]*unstructured, error) {
	return DesiredAt(r, c, op, m, values.Phase{})
}

// DesiredAt is Desired rendering phase p of a switch between plain and TLS.
func DesiredAt(r *charts.Renderer, c *v1alpha1.EtcdCluster, op values.Operator, m memory.Memory, p values.Phase) ([]*unstructured, error) {
	vals, err := values.ComputeAt(c, op, m, p)
	if err != nil {
		return nil, err
	}
	return DesiredFromValues(r, c, vals, op.PodSecurity)
}

// DesiredFromValues is Desired with the chart values given (etcd-pilot render merges its
// --values and --set over the computed ones). Every pod the objects would run is held to
// level (empty: restricted), after the patches.
func DesiredFromValues(r *charts.Renderer, c *v1alpha1.EtcdCluster, vals map[string]any, level podsecurity.Level) ([]*unstructured, error) {
	objs, err := r.Render(charts.Release{Name: c.Name, Namespace: c.Namespace}, vals)
	if err != nil {
		return nil, fmt.Errorf("the chart refused the values computed from the spec (check spec.chart.values): %w", err)
	}
	if err := postrender.Apply(objs, c.Spec.Chart.Patches); err != nil {
		return nil, err
	}
	// The operator finds, prunes and deletes what it applied by these labels, whatever the
	// chart (a platform team's chart may not set them).
	for _, o := range objs {
		for _, field := range []string{"labels", "annotations"} {
			if _, _, err := unstructuredv1.NestedStringMap(o.Object, "metadata", field); err != nil {
				return nil, fmt.Errorf("the chart renders %s %s with metadata.%s that are not all strings (quote values such as \"true\"): %w", o.GetKind(), o.GetName(), field, err)
			}
		}
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[v1alpha1.LabelCluster] = c.Name
		l[v1alpha1.LabelManagedBy] = v1alpha1.ManagedByValue
		o.SetLabels(l)
	}
	if err := chartcontract.Check(objs, withTLSOf(ContractOf(c), vals)); err != nil {
		return nil, err
	}
	if err := podsecurity.Check(objs, level); err != nil {
		return nil, err
	}
	if c.UID != "" {
		ref := OwnerRef(c)
		for _, o := range objs {
			o.SetOwnerReferences([]metav1.OwnerReference{ref})
		}
	}
	return objs, nil
}

// SelectorLabels select c's member pods; a StatefulSet's selector never changes.
func SelectorLabels(c *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": c.Name}
}

// ContractOf is what every render for c must hold (see internal/chartcontract).
func ContractOf(c *v1alpha1.EtcdCluster) chartcontract.Contract {
	k := chartcontract.Contract{
		Name: c.Name, Namespace: c.Namespace, SelectorLabels: SelectorLabels(c),
		MembershipConfigMap: values.MembershipConfigMapName(c.Name),
		Ephemeral:           c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral,
		ClientService:       c.Name + "-client",
		PodLabels:           map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
		ClaimLabels:         map[string]string{v1alpha1.LabelCluster: c.Name},
		Reserved:            []string{"ConfigMap/" + values.MembershipConfigMapName(c.Name)},
	}
	if c.UID != "" {
		k.Token = values.ClusterToken(c)
	}
	for _, name := range []string{v1alpha1.CASecretName(c.Name), v1alpha1.PeerCASecretName(c.Name), v1alpha1.PeerTLSSecretName(c.Name), v1alpha1.ServerTLSSecretName(c.Name),
		v1alpha1.OperatorTLSSecretName(c.Name), v1alpha1.RootAuthSecretName(c.Name)} {
		k.Reserved = append(k.Reserved, "Secret/"+name, "Certificate/"+name)
	}
	return k
}

// OwnerRef makes c the controlling owner of an object: it goes when c is deleted.
func OwnerRef(c *v1alpha1.EtcdCluster) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster", Name: c.Name, UID: c.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// OwnedSecretMeta is the metadata of a Secret the operator keeps for c: owned by c and
// labelled so the operator's cache (which holds only managed Secrets) sees it.
func OwnedSecretMeta(c *v1alpha1.EtcdCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: c.Namespace,
		Labels:          map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
		OwnerReferences: []metav1.OwnerReference{OwnerRef(c)},
	}
}

// InventorySelector selects the objects applied for the EtcdCluster named name.
func InventorySelector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelCluster: name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
}

// Topology is what the controller needs to know of the rendered StatefulSet to find the
// members.
type Topology struct {
	StatefulSet string
	Service     string
	Namespace   string
	ClientPort  int32
	Selector    labels.Selector
	// PeerURLTemplate is the advertised peer URL with $(POD_NAME) in it.
	PeerURLTemplate string
	// PeerPort is the members' peer port; PeerTransitionPort the port of the second peer
	// listener of a switch between plain and TLS (the chart's default, the peer port + 2,
	// when the render has none).
	PeerPort, PeerTransitionPort int32
	// ClientScheme is http or https, from the advertised client URL.
	ClientScheme string
	// DomainSuffix is what follows a pod's name in its DNS name
	// (<service>.<namespace>.svc.<cluster domain>); clusterDomain the last part of it.
	DomainSuffix  string
	ClusterDomain string
	// ClientService is the name of the client Service.
	ClientService string
	// TLS is what the operator dials the client port with (nil: plain HTTP), set by
	// reconcileTLS.
	TLS *tls.Config
}

// TopologyOf reads the topology from the rendered StatefulSet, falling back to the chart's
// default naming when nothing could be rendered.
func TopologyOf(c *v1alpha1.EtcdCluster, desired []*unstructured) Topology {
	t := Topology{
		StatefulSet: c.Name, Service: c.Name, Namespace: c.Namespace, ClientPort: 2379,
		PeerURLTemplate: fmt.Sprintf("http://$(POD_NAME).%s.%s.svc.cluster.local:2380", c.Name, c.Namespace),
		PeerPort:        2380, PeerTransitionPort: 2382,
		Selector:     labels.SelectorFromSet(SelectorLabels(c)),
		ClientScheme: "http", ClientService: c.Name + "-client", ClusterDomain: "cluster.local",
		DomainSuffix: fmt.Sprintf("%s.%s.svc.cluster.local", c.Name, c.Namespace),
	}
	if ClientTLSEnabled(c) {
		t.ClientScheme = "https"
	}
	// The client Service is <name>-client (the chart contract holds every render to it).
	for _, o := range desired {
		if o.GetKind() != "StatefulSet" || o.GroupVersionKind().Group != "apps" {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
			return t
		}
		t.StatefulSet, t.Service = sts.Name, sts.Spec.ServiceName
		if sts.Spec.Selector != nil {
			if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err == nil {
				t.Selector = sel
			}
		}
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			if ctr.Name != "etcd" {
				continue // a sidecar's ports and flags are not etcd's
			}
			flags := chartcontract.ParseEtcdArgs(ctr.Command, ctr.Args)
			if urls := flags.URLs("initial-advertise-peer-urls"); len(urls) > 0 {
				t.PeerURLTemplate = urls[0]
			}
			if urls := flags.URLs("advertise-client-urls"); len(urls) > 0 {
				if u, err := url.Parse(urls[0]); err == nil {
					t.ClientScheme = u.Scheme
					if host, ok := strings.CutPrefix(u.Hostname(), "$(POD_NAME)."); ok {
						t.DomainSuffix = host
						short := fmt.Sprintf("%s.%s.svc", sts.Spec.ServiceName, sts.Namespace)
						t.ClusterDomain = strings.TrimPrefix(strings.TrimPrefix(host, short), ".")
					}
				}
			}
			transition := int32(0)
			for _, p := range ctr.Ports {
				switch p.Name {
				case "client":
					t.ClientPort = p.ContainerPort
				case "peer":
					t.PeerPort = p.ContainerPort
				case "peer-transition":
					transition = p.ContainerPort
				}
			}
			t.PeerTransitionPort = t.PeerPort + 2
			if transition != 0 {
				t.PeerTransitionPort = transition
			}
		}
	}
	return t
}

// Endpoint is the client URL of a member pod, by its stable DNS name.
func (t Topology) Endpoint(pod string) string {
	return fmt.Sprintf("%s://%s.%s.%s.svc:%d", t.ClientScheme, pod, t.Service, t.Namespace, t.ClientPort)
}

func SpecReplicas(c *v1alpha1.EtcdCluster) int32 {
	if c.Spec.Replicas != nil {
		return *c.Spec.Replicas
	}
	return values.DefaultReplicas
}

// ClaimTemplateSize is the storage the data claim template of the StatefulSet named sts in
// desired asks ("" when there is none): what the render asks, whatever spec.storage.size
// says (a custom chart or a patch may set it).
func ClaimTemplateSize(desired []*unstructured, sts string) string {
	for _, o := range desired {
		if o.GetKind() != "StatefulSet" || o.GetName() != sts {
			continue
		}
		tmpls, _, _ := unstructuredv1.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
		for _, t := range tmpls {
			m, ok := t.(map[string]any)
			if !ok {
				continue
			}
			if name, _, _ := unstructuredv1.NestedString(m, "metadata", "name"); name != "data" {
				continue
			}
			size, _, _ := unstructuredv1.NestedFieldNoCopy(m, "spec", "resources", "requests", "storage")
			if size != nil {
				return fmt.Sprint(size)
			}
		}
	}
	return ""
}

// PinClaimTemplates makes the StatefulSet in desired carry the labels, annotations and
// storage request of live's volume claim templates, claim by claim name. A StatefulSet's
// volumeClaimTemplates cannot change, so labels that differ from what it was created with
// (commonLabels that went there before the chart stopped putting them in, or
// storage.claimLabels changed later), or a grown spec.storage.size, would make every apply of
// it fail. The storage planner grows the claims themselves, then re-creates the StatefulSet,
// which carries the new size from then on. live may be nil (nothing created yet).
func PinClaimTemplates(desired []*unstructured, live *appsv1.StatefulSet) error {
	if live == nil {
		return nil
	}
	byName := map[string]metav1.ObjectMeta{}
	liveSize := map[string]string{}
	for _, t := range live.Spec.VolumeClaimTemplates {
		byName[t.Name] = t.ObjectMeta
		if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			liveSize[t.Name] = q.String()
		}
	}
	for _, o := range desired {
		if o.GetKind() != "StatefulSet" || o.GetName() != live.Name {
			continue
		}
		tmpls, _, err := unstructuredv1.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
		if err != nil {
			return fmt.Errorf("failed to read the volume claim templates of StatefulSet %s: %w", o.GetName(), err)
		}
		for i, t := range tmpls {
			m, ok := t.(map[string]any)
			if !ok {
				continue
			}
			name, _, _ := unstructuredv1.NestedString(m, "metadata", "name")
			was, ok := byName[name]
			if !ok {
				continue
			}
			for field, v := range map[string]map[string]string{"labels": was.Labels, "annotations": was.Annotations} {
				if len(v) == 0 {
					unstructuredv1.RemoveNestedField(m, "metadata", field)
					continue
				}
				if err := unstructuredv1.SetNestedStringMap(m, v, "metadata", field); err != nil {
					return fmt.Errorf("failed to pin the %s of volume claim template %s: %w", field, name, err)
				}
			}
			if size, ok := liveSize[name]; ok {
				if err := unstructuredv1.SetNestedField(m, size, "spec", "resources", "requests", "storage"); err != nil {
					return fmt.Errorf("failed to pin the size of volume claim template %s: %w", name, err)
				}
			}
			tmpls[i] = m
		}
		if err := unstructuredv1.SetNestedSlice(o.Object, tmpls, "spec", "volumeClaimTemplates"); err != nil {
			return fmt.Errorf("failed to pin the volume claim templates of StatefulSet %s: %w", o.GetName(), err)
		}
	}
	return nil
}

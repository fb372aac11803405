// Package chartcontract checks that a render (any chart, after spec.chart.patches) gives the
// operator what its membership, rollout and safety logic rely on. The embedded chart keeps it
// by construction; a platform team's chart or a patch may not, and then nothing of the render
// is applied. It is pure: objects in, a list of what is missing out.
package chartcontract

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Contract is what a render for one EtcdCluster must hold.
type Contract struct {
	// Name and Namespace of the cluster: the StatefulSet and its headless Service are named
	// after it, and every object lives in its namespace.
	Name, Namespace string
	// SelectorLabels select the member pods (immutable on a StatefulSet).
	SelectorLabels map[string]string
	// MembershipConfigMap is the ConfigMap the etcd container takes ETCD_INITIAL_CLUSTER and
	// ETCD_INITIAL_CLUSTER_STATE from (envFrom), so members join one at a time.
	MembershipConfigMap string
	// Ephemeral: the data volume is an emptyDir volume rather than a volume claim template.
	Ephemeral bool
}

// clusterScoped are kinds a render may not hold: the operator applies into the cluster's
// namespace only, with namespaced permissions.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "Node": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "APIService": true,
}

// Error lists every broken term of the contract.
type Error struct{ Missing []string }

func (e *Error) Error() string {
	return "the render breaks etcd-pilot's chart contract: " + strings.Join(e.Missing, "; ")
}

// Check returns nil when objs keep the contract, else an *Error naming every broken term.
func Check(objs []*unstructured.Unstructured, c Contract) error {
	var missing []string
	add := func(format string, args ...any) { missing = append(missing, fmt.Sprintf(format, args...)) }

	var sts *unstructured.Unstructured
	services := map[string]*unstructured.Unstructured{}
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.GroupVersionKind().GroupKind().String() + "/" + o.GetName()
		if seen[key] {
			add("%s %s is rendered twice", o.GetKind(), o.GetName())
		}
		seen[key] = true
		if clusterScoped[o.GetKind()] {
			add("%s %s is cluster-scoped; a render may only hold objects of the cluster's namespace", o.GetKind(), o.GetName())
		} else if o.GetNamespace() != c.Namespace {
			add("%s %s is in namespace %q, not the cluster's namespace %q", o.GetKind(), o.GetName(), o.GetNamespace(), c.Namespace)
		}
		switch {
		case o.GetKind() == "StatefulSet" && o.GroupVersionKind().Group == "apps":
			if o.GetName() == c.Name {
				sts = o
			} else {
				add("StatefulSet %s: the only StatefulSet must be named after the cluster (%s)", o.GetName(), c.Name)
			}
		case o.GetKind() == "Service" && o.GroupVersionKind().Group == "":
			services[o.GetName()] = o
		}
	}
	if sts == nil {
		add("no StatefulSet named %s (apps/v1): the members run in it", c.Name)
		return &Error{Missing: missing}
	}
	checkStatefulSet(sts, c, services, add)
	sort.Strings(missing)
	if len(missing) > 0 {
		return &Error{Missing: missing}
	}
	return nil
}

func checkStatefulSet(sts *unstructured.Unstructured, c Contract, services map[string]*unstructured.Unstructured, add func(string, ...any)) {
	where := "StatefulSet " + sts.GetName()
	sel, _, _ := unstructured.NestedStringMap(sts.Object, "spec", "selector", "matchLabels")
	if !maps.Equal(sel, c.SelectorLabels) {
		add("%s: spec.selector.matchLabels must be exactly %s (it is %s)", where, show(c.SelectorLabels), show(sel))
	}
	if exprs, ok, _ := unstructured.NestedSlice(sts.Object, "spec", "selector", "matchExpressions"); ok && len(exprs) > 0 {
		add("%s: spec.selector may not have matchExpressions", where)
	}
	tl, _, _ := unstructured.NestedStringMap(sts.Object, "spec", "template", "metadata", "labels")
	for k, v := range c.SelectorLabels {
		if tl[k] != v {
			add("%s: the pod template needs the label %s=%s", where, k, v)
		}
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(sts.Object, "spec", "replicas"); ok {
		add("%s: spec.replicas must not be set: the operator owns it and adds members one at a time", where)
	}
	if t, _, _ := unstructured.NestedString(sts.Object, "spec", "updateStrategy", "type"); t != "OnDelete" {
		add("%s: spec.updateStrategy.type must be OnDelete (it is %q): the operator restarts members in a safe order", where, t)
	}
	svcName, _, _ := unstructured.NestedString(sts.Object, "spec", "serviceName")
	if svcName != c.Name {
		add("%s: spec.serviceName must be %s: members reach each other at <pod>.%s", where, c.Name, c.Name)
	} else if svc := services[svcName]; svc == nil {
		add("no Service %s: the headless Service that gives members their DNS names", svcName)
	} else {
		if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip != "None" {
			add("Service %s: spec.clusterIP must be None (headless)", svcName)
		}
		if p, _, _ := unstructured.NestedBool(svc.Object, "spec", "publishNotReadyAddresses"); !p {
			add("Service %s: spec.publishNotReadyAddresses must be true: members must resolve each other before they are ready", svcName)
		}
	}

	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	var etcd map[string]any
	for _, ct := range containers {
		if m, ok := ct.(map[string]any); ok && m["name"] == "etcd" {
			etcd = m
		}
	}
	if etcd == nil {
		add("%s: no container named etcd", where)
		return
	}
	ports := map[string]bool{}
	ps, _, _ := unstructured.NestedSlice(etcd, "ports")
	for _, p := range ps {
		if m, ok := p.(map[string]any); ok {
			if n, ok := m["name"].(string); ok {
				ports[n] = true
			}
		}
	}
	for _, n := range []string{"client", "peer", "metrics"} {
		if !ports[n] {
			add("%s: the etcd container needs a port named %s", where, n)
		}
	}
	if c.MembershipConfigMap != "" {
		found := false
		ef, _, _ := unstructured.NestedSlice(etcd, "envFrom")
		for _, e := range ef {
			if m, ok := e.(map[string]any); ok {
				if n, _, _ := unstructured.NestedString(m, "configMapRef", "name"); n == c.MembershipConfigMap {
					found = true
				}
			}
		}
		if !found {
			add("%s: the etcd container needs envFrom configMapRef %s (the membership hook: members join with the initial cluster the operator writes there)", where, c.MembershipConfigMap)
		}
	}
	mounted := false
	vms, _, _ := unstructured.NestedSlice(etcd, "volumeMounts")
	for _, v := range vms {
		if m, ok := v.(map[string]any); ok && m["name"] == "data" {
			mounted = true
		}
	}
	if !mounted {
		add("%s: the etcd container needs the volume data mounted (its data directory)", where)
	}
	if c.Ephemeral {
		return
	}
	vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	hasData := false
	for _, v := range vcts {
		if m, ok := v.(map[string]any); ok {
			if n, _, _ := unstructured.NestedString(m, "metadata", "name"); n == "data" {
				hasData = true
			}
		}
	}
	if !hasData {
		add("%s: needs a volume claim template named data (the members' data survives a pod)", where)
	}
}

func show(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k+"="+m[k])
	}
	sort.Strings(keys)
	return "{" + strings.Join(keys, ",") + "}"
}

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
	// ClientService is the name of the client Service (not headless).
	ClientService string
	// PodLabels must label the member pods besides SelectorLabels: the operator's caches and
	// lists select pods by them. ClaimLabels must label the data claim template: the
	// operator finds the members' claims by them.
	PodLabels, ClaimLabels map[string]string
	// Token is the --initial-cluster-token the members must start with; empty: not checked.
	Token string
	// Reserved are "Kind/name" of objects the operator writes itself (the membership
	// ConfigMap, its Secrets): a render may not hold them.
	Reserved []string
	// ClientCertAuth: the values ask the client port to refuse clients without a
	// certificate, so the etcd container must set --client-cert-auth=true. ClientTLSOnly:
	// the client port serves TLS only, so every client listener must be https.
	ClientCertAuth, ClientTLSOnly bool
	// PeerCertAuth: a peer listener serves TLS, so the etcd container must set
	// --peer-client-cert-auth=true. PeerTLSOnly: the peer side serves TLS only (no switch
	// between plain and TLS runs), so every peer listener must be https.
	PeerCertAuth, PeerTLSOnly bool
	// ClientCRL: the values ask the members to check client certificates against the
	// revocation list, so the etcd container must set --client-crl-file. PeersPinned: the
	// values pin the peer port to the members' names, so it must set
	// --peer-cert-allowed-hostname (or --peer-cert-allowed-cn).
	ClientCRL, PeersPinned bool
}

// DataMount and DataDir are where the etcd container must keep its data: a restore writes
// the restored member's data to DataDir on the claim mounted at DataMount.
const (
	DataMount = "/var/lib/etcd"
	DataDir   = DataMount + "/data"
)

// forbiddenKinds may not be rendered: the operator creates and deletes them itself (pods,
// claims, backups) or they would manage clusters.
var forbiddenKinds = map[string]string{
	"Pod":                   "the StatefulSet runs the members; the operator runs its own backup and restore pods",
	"PersistentVolumeClaim": "the StatefulSet's claim templates make the members' claims; a rendered claim would be pruned with its data",
	"EtcdCluster":           "a chart may not create or manage clusters",
	"EtcdBackup":            "the operator takes backups from spec.backup",
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
		if why, ok := forbiddenKinds[o.GetKind()]; ok {
			add("%s %s may not be rendered: %s", o.GetKind(), o.GetName(), why)
		}
		for _, r := range c.Reserved {
			if r == o.GetKind()+"/"+o.GetName() {
				add("%s %s is the operator's own (it writes that object itself); give the chart's object another name", o.GetKind(), o.GetName())
			}
		}
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
	for _, want := range []map[string]string{c.SelectorLabels, c.PodLabels} {
		for k, v := range want {
			if tl[k] != v {
				add("%s: the pod template needs the label %s=%s", where, k, v)
			}
		}
	}
	if c.ClientService != "" {
		if svc := services[c.ClientService]; svc == nil {
			add("no Service %s: the client Service the operator names in certificates and status", c.ClientService)
		} else if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip == "None" {
			add("Service %s: the client Service may not be headless", c.ClientService)
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
	checkEtcdContainer(etcd, c, where, add)
	mounted := false
	vms, _, _ := unstructured.NestedSlice(etcd, "volumeMounts")
	for _, v := range vms {
		if m, ok := v.(map[string]any); ok && m["name"] == "data" {
			mounted = m["mountPath"] == DataMount
		}
	}
	if !mounted {
		add("%s: the etcd container needs the volume data mounted at %s (a restore writes the data there)", where, DataMount)
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
				l, _, _ := unstructured.NestedStringMap(m, "metadata", "labels")
				for k, v := range c.ClaimLabels {
					if l[k] != v {
						add("%s: the data claim template needs the label %s=%s (the operator finds the members' claims by it)", where, k, v)
					}
				}
			}
		}
	}
	if !hasData {
		add("%s: needs a volume claim template named data (the members' data survives a pod)", where)
	}
}

// checkEtcdContainer checks the flags and environment of the etcd container: the ones the
// operator reads or relies on are there, and nothing overrides the membership hook.
func checkEtcdContainer(etcd map[string]any, c Contract, where string, add func(string, ...any)) {
	args, _, _ := unstructured.NestedStringSlice(etcd, "args")
	cmd, _, _ := unstructured.NestedStringSlice(etcd, "command")
	checkEtcdFlags(cmd, args, c, where, add)
	flags := ParseEtcdArgs(cmd, args)
	required := []struct{ name, value string }{{"name", "$(POD_NAME)"}, {"data-dir", DataDir}, {"listen-peer-urls", ""}, {"initial-advertise-peer-urls", ""}, {"advertise-client-urls", ""}}
	if c.Token != "" {
		required = append(required, struct{ name, value string }{"initial-cluster-token", c.Token})
	}
	for _, r := range required {
		v, ok := flags.Get(r.name)
		if !ok || (r.value != "" && v != r.value) {
			add("%s: the etcd container needs the flag --%s=%s", where, r.name, r.value)
		}
	}
	if c.MembershipConfigMap == "" {
		return
	}
	// force-new-cluster is refused with the unsafe flags (checkEtcdFlags), membership or not.
	for _, f := range []string{"initial-cluster", "initial-cluster-state", "discovery", "discovery-srv", "discovery-endpoints"} {
		if flags.Has(f) {
			add("%s: the etcd container may not set --%s: the operator forms the cluster and adds members through the membership ConfigMap", where, f)
		}
	}
	env, _, _ := unstructured.NestedSlice(etcd, "env")
	for _, e := range env {
		if m, ok := e.(map[string]any); ok {
			if n, _ := m["name"].(string); strings.HasPrefix(n, "ETCD_") {
				add("%s: the etcd container may not set the environment variable %s: etcd reads ETCD_* variables as flags, which the operator owns", where, n)
			}
		}
	}
	ef, _, _ := unstructured.NestedSlice(etcd, "envFrom")
	last := -1
	for i, e := range ef {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if n, _, _ := unstructured.NestedString(m, "configMapRef", "name"); n == c.MembershipConfigMap {
			last = i
			continue
		}
		p, _ := m["prefix"].(string)
		if p == "" || strings.HasPrefix("ETCD_", p) || strings.HasPrefix(p, "ETCD_") {
			add("%s: envFrom[%d] of the etcd container needs a prefix that cannot make an ETCD_* variable (it has %q): etcd reads them as flags", where, i, p)
		}
	}
	switch {
	case last < 0:
		add("%s: the etcd container needs envFrom configMapRef %s (the membership hook: members join with the initial cluster the operator writes there)", where, c.MembershipConfigMap)
	case last != len(ef)-1:
		add("%s: envFrom configMapRef %s must be the etcd container's last envFrom source, so nothing overrides it", where, c.MembershipConfigMap)
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

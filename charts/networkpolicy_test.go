package charts_test

import (
	"k8s.io/utils/ptr"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

func networkPolicy(tb testing.TB, objs []*unstructured.Unstructured, name string) *networkingv1.NetworkPolicy {
	tb.Helper()
	np := &networkingv1.NetworkPolicy{}
	toTyped(tb, find(tb, objs, "NetworkPolicy", name), np)
	return np
}

// ingressFrom returns the from list of the one ingress rule for port, failing when there is
// none or more than one.
func ingressFrom(t *testing.T, np *networkingv1.NetworkPolicy, port int32) []networkingv1.NetworkPolicyPeer {
	t.Helper()
	var out []networkingv1.NetworkPolicyPeer
	found := 0
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) != 1 || r.Ports[0].Port == nil || r.Ports[0].Protocol == nil || *r.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Fatalf("ingress rule with ports %+v: want exactly one TCP port per rule", r.Ports)
		}
		if r.Ports[0].Port.IntValue() == int(port) {
			out, found = r.From, found+1
		}
	}
	if found != 1 {
		t.Fatalf("%d ingress rules for port %d, want 1: %+v", found, port, np.Spec.Ingress)
	}
	return out
}

func membersPeer(sel map[string]string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: sel}}
}

func operatorPeer(op values.Operator) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": op.Namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: op.PodLabels},
	}
}

// TestNetworkPolicy checks what the policy the operator renders allows, port by port: peers
// only from the members (and the operator), the client port from the members, the operator,
// its backup pods and spec.networkPolicy.allowedClients, the metrics port from
// allowedMetricsClients, and egress only to the peers and DNS when restrictEgress is set.
func TestNetworkPolicy(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "network-policy")
	op := values.DefaultOperator()
	objs := render(t, r, f.release(), f.values)
	np := networkPolicy(t, objs, f.cluster.Name)
	sts := statefulSet(t, objs, f.cluster.Name)

	members := sts.Spec.Selector.MatchLabels
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, members) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
		t.Errorf("the policy selects %+v, want the StatefulSet's selector %v", np.Spec.PodSelector, members)
	}
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("the policy's selector does not match the member pods' labels %v", sts.Spec.Template.Labels)
	}
	if want := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}; !reflect.DeepEqual(np.Spec.PolicyTypes, want) {
		t.Errorf("policyTypes = %v, want %v", np.Spec.PolicyTypes, want)
	}
	if len(np.Spec.Ingress) != 3 {
		t.Errorf("%d ingress rules, want one each for the peer, client and metrics ports", len(np.Spec.Ingress))
	}

	if got, want := ingressFrom(t, np, 2380), []networkingv1.NetworkPolicyPeer{membersPeer(members), operatorPeer(op)}; !reflect.DeepEqual(got, want) {
		t.Errorf("peer port from %+v\nwant the members and the operator %+v", got, want)
	}

	spec := f.cluster.Spec.NetworkPolicy
	want := []networkingv1.NetworkPolicyPeer{membersPeer(members), operatorPeer(op), membersPeer(values.BackupPodLabels(f.cluster.Name))}
	want = append(want,
		networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: spec.AllowedClients[0].NamespaceSelector.MatchLabels}},
		networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}},
			PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"api", "worker"}}}},
		},
		networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.20.0.0/16", Except: []string{"10.20.99.0/24"}}},
	)
	if got := ingressFrom(t, np, 2379); !reflect.DeepEqual(got, want) {
		t.Errorf("client port from %+v\nwant %+v", got, want)
	}

	metrics := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
	}}
	if got := ingressFrom(t, np, 2381); !reflect.DeepEqual(got, metrics) {
		t.Errorf("metrics port from %+v, want only Prometheus %+v", got, metrics)
	}

	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	if len(np.Spec.Egress) != 2 {
		t.Fatalf("egress %+v: want the peers and DNS", np.Spec.Egress)
	}
	peers := np.Spec.Egress[0]
	if len(peers.Ports) != 1 || peers.Ports[0].Port.IntValue() != 2380 || !reflect.DeepEqual(peers.To, []networkingv1.NetworkPolicyPeer{membersPeer(members)}) {
		t.Errorf("egress %+v: want the members' peer port", peers)
	}
	dns := np.Spec.Egress[1]
	if len(dns.To) != 0 || len(dns.Ports) != 2 || *dns.Ports[0].Protocol != udp || *dns.Ports[1].Protocol != tcp ||
		dns.Ports[0].Port.IntValue() != 53 || dns.Ports[1].Port.IntValue() != 53 {
		t.Errorf("egress %+v: want DNS, port 53 over UDP and TCP", dns)
	}
}

func TestNetworkPolicyVariants(t *testing.T) {
	r := newRenderer(t)
	f := fixtureNamed(t, "network-policy")
	base := f.cluster.DeepCopy()
	base.Spec.NetworkPolicy.RestrictEgress = false
	base.Spec.NetworkPolicy.AllowedMetricsClients = nil

	t.Run("egress stays open unless asked", func(t *testing.T) {
		v, err := values.Compute(base, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		np := networkPolicy(t, render(t, r, f.release(), v), f.cluster.Name)
		if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Egress) > 0 {
			t.Errorf("policyTypes %v, egress %+v: want ingress only", np.Spec.PolicyTypes, np.Spec.Egress)
		}
		// Without allowedMetricsClients nobody is admitted to the metrics port: no rule.
		for _, rule := range np.Spec.Ingress {
			if rule.Ports[0].Port.IntValue() == 2381 {
				t.Errorf("a rule for the metrics port without allowedMetricsClients: %+v", rule)
			}
		}
	})

	t.Run("an operator without a namespace is not named", func(t *testing.T) {
		v, err := values.Compute(base, values.Operator{})
		if err != nil {
			t.Fatal(err)
		}
		objs := render(t, r, f.release(), v)
		np := networkPolicy(t, objs, f.cluster.Name)
		members := statefulSet(t, objs, f.cluster.Name).Spec.Selector.MatchLabels
		if got := ingressFrom(t, np, 2380); !reflect.DeepEqual(got, []networkingv1.NetworkPolicyPeer{membersPeer(members)}) {
			t.Errorf("peer port from %+v, want the members only", got)
		}
		client := ingressFrom(t, np, 2379)
		if len(client) != 2+len(base.Spec.NetworkPolicy.AllowedClients) ||
			!reflect.DeepEqual(client[:2], []networkingv1.NetworkPolicyPeer{membersPeer(members), membersPeer(values.BackupPodLabels(f.cluster.Name))}) {
			t.Errorf("client port from %+v, want the members, the backup pods and allowedClients", client)
		}
	})

	t.Run("the ports follow the chart's port values", func(t *testing.T) {
		v, err := values.Compute(f.cluster, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		v = values.Merge(v, map[string]any{"etcd": map[string]any{"clientPort": 12379, "peerPort": 12380, "metricsPort": 12381}})
		np := networkPolicy(t, render(t, r, f.release(), v), f.cluster.Name)
		ingressFrom(t, np, 12379)
		ingressFrom(t, np, 12380)
		ingressFrom(t, np, 12381)
		if np.Spec.Egress[0].Ports[0].Port.IntValue() != 12380 {
			t.Errorf("egress to peers on %v, want 12380", np.Spec.Egress[0].Ports[0].Port)
		}
	})

	t.Run("disabled renders none", func(t *testing.T) {
		off := f.cluster.DeepCopy()
		off.Spec.NetworkPolicy.Enabled = ptr.To(false)
		v, err := values.Compute(off, values.DefaultOperator())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range render(t, r, f.release(), v) {
			if o.GetKind() == "NetworkPolicy" {
				t.Fatalf("networkPolicy.enabled false renders %s", o.GetName())
			}
		}
	})
}

// TestNetworkPolicySchema: the chart's schema refuses entries the API server would refuse in
// the policy, so `helm install` fails before anything is created.
func TestNetworkPolicySchema(t *testing.T) {
	r := newRenderer(t)
	for name, peer := range map[string]any{
		"empty entry":            map[string]any{},
		"ipBlock beside a pod":   map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/8"}, "podSelector": map[string]any{}},
		"address without prefix": map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.1"}},
		"unknown operator":       map[string]any{"podSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Equals"}}}},
		"unknown field":          map[string]any{"namespace": "apps"},
	} {
		t.Run(name, func(t *testing.T) {
			v := map[string]any{"networkPolicy": map[string]any{"enabled": true, "allowedClients": []any{peer}}}
			if _, err := r.Render(chartAloneRelease, v); err == nil {
				t.Errorf("the chart accepted allowedClients [%v]", peer)
			}
		})
	}
	ok := map[string]any{"networkPolicy": map[string]any{"enabled": true, "allowedClients": []any{
		map[string]any{"ipBlock": map[string]any{"cidr": "2001:db8::/64", "except": []any{"2001:db8::/80"}}},
		map[string]any{"namespaceSelector": map[string]any{}},
	}}}
	if _, err := r.Render(charts.Release{Name: "ok", Namespace: "db"}, ok); err != nil {
		t.Errorf("the chart refused valid entries: %v", err)
	}
}

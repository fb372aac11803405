package v1alpha1_test

import (
	"k8s.io/utils/ptr"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func TestNetworkPolicyAdmission(t *testing.T) {
	np := func(peers ...v1alpha1.NetworkPolicyPeer) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), AllowedClients: peers}
		}
	}
	byName := &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "apps"}}
	app := &v1alpha1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}
	expr := func(op string, values ...string) *v1alpha1.LabelSelector {
		return &v1alpha1.LabelSelector{MatchExpressions: []v1alpha1.LabelSelectorRequirement{{Key: "team", Operator: op, Values: values}}}
	}
	runCreateCases(t, []createCase{
		{name: "enabled without clients accepted", spec: np()},
		{name: "namespace, pods, pods in a namespace and an ipBlock accepted", spec: np(
			v1alpha1.NetworkPolicyPeer{NamespaceSelector: byName},
			v1alpha1.NetworkPolicyPeer{PodSelector: app},
			v1alpha1.NetworkPolicyPeer{NamespaceSelector: byName, PodSelector: app},
			v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24"}}},
			v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "2001:db8::/64"}},
		)},
		{name: "every namespace ({}) accepted", spec: np(v1alpha1.NetworkPolicyPeer{NamespaceSelector: &v1alpha1.LabelSelector{}})},
		{name: "set-based selectors accepted", spec: np(
			v1alpha1.NetworkPolicyPeer{NamespaceSelector: expr("In", "a", "b")},
			v1alpha1.NetworkPolicyPeer{PodSelector: expr("Exists")},
		)},
		{name: "metrics clients accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true), RestrictEgress: true,
				AllowedMetricsClients: []v1alpha1.NetworkPolicyPeer{{NamespaceSelector: byName, PodSelector: app}}}
		}},
		{name: "empty entry refused", spec: np(v1alpha1.NetworkPolicyPeer{}),
			wantErr: []string{"spec.networkPolicy.allowedClients[0]", "needs namespaceSelector, podSelector or ipBlock"}},
		{name: "empty metrics entry refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{AllowedMetricsClients: []v1alpha1.NetworkPolicyPeer{{PodSelector: app}, {}}}
		}, wantErr: []string{"spec.networkPolicy.allowedMetricsClients[1]", "needs namespaceSelector, podSelector or ipBlock"}},
		{name: "ipBlock with a selector refused", spec: np(v1alpha1.NetworkPolicyPeer{PodSelector: app, IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.0/8"}}),
			wantErr: []string{"ipBlock cannot be combined"}},
		{name: "address without a prefix refused", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.1"}}),
			wantErr: []string{"ipBlock.cidr must be a CIDR"}},
		// The NetworkPolicy API refuses these, which would leave the cluster Stalled on an
		// object it cannot apply (found on the real-node lane).
		{name: "CIDR with host bits refused", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.200.0.1/24"}}),
			wantErr: []string{"ipBlock.cidr must be in canonical form", "10.200.0.0/24"}},
		{name: "except with host bits refused", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.7/24"}}}),
			wantErr: []string{"ipBlock.except: each entry must be in canonical form"}},
		{name: "canonical IPv6 accepted", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "2001:db8::/64", Except: []string{"2001:db8::/96"}}})},
		{name: "except outside the CIDR refused", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.1.0.0/24"}}}),
			wantErr: []string{"strictly inside ipBlock.cidr"}},
		{name: "except equal to the CIDR refused", spec: np(v1alpha1.NetworkPolicyPeer{IPBlock: &v1alpha1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.0.0/16"}}}),
			wantErr: []string{"strictly inside ipBlock.cidr"}},
		{name: "unknown selector operator refused", spec: np(v1alpha1.NetworkPolicyPeer{PodSelector: expr("Equals", "x")}),
			wantErr: []string{"podSelector.matchExpressions[0].operator", "In", "DoesNotExist"}},
		{name: "In without values refused", spec: np(v1alpha1.NetworkPolicyPeer{NamespaceSelector: expr("In")}),
			wantErr: []string{"namespaceSelector.matchExpressions[0]", "In and NotIn need values"}},
		{name: "Exists with values refused", spec: np(v1alpha1.NetworkPolicyPeer{PodSelector: expr("Exists", "x")}),
			wantErr: []string{"podSelector.matchExpressions[0]", "Exists and DoesNotExist take none"}},
	})
}

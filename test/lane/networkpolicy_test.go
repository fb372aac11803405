package lane

import (
	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// laneHostAllowed is a cluster's NetworkPolicy that also admits the lane's own network (the
// tests run there, as a client outside the cluster's pods would), besides the operator and
// the members the policy admits anyway. No agent enforces NetworkPolicy on this machine
// kind's lane (its kernel lacks the nftables queue expression kube-network-policies needs),
// but a scenario that works only because nothing enforces its policy would prove less.
func laneHostAllowed() *v1alpha1.NetworkPolicySpec {
	return &v1alpha1.NetworkPolicySpec{AllowedClients: []v1alpha1.NetworkPolicyPeer{
		{IPBlock: &v1alpha1.IPBlock{CIDR: "10.200.0.0/24"}},
	}}
}

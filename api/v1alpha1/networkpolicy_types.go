package v1alpha1

// NetworkPolicySpec is the NetworkPolicy the chart renders for the member pods. With it, the
// members accept:
//   - on the peer port: the other members of this cluster, and the operator (it reads the
//     members' peer certificates during a CA rotation);
//   - on the client port: the members, the operator and its backup pods (which stream
//     snapshots onto volume claims), and AllowedClients;
//   - on the metrics port: AllowedMetricsClients (kubelet probes come from the node, which
//     NetworkPolicy implementations let through).
//
// Everything else is refused, once a network plugin that implements NetworkPolicy enforces
// it; without one the policy is stored and has no effect. Egress stays open unless
// RestrictEgress is set.
type NetworkPolicySpec struct {
	// Enabled renders the NetworkPolicy; false deletes it. Unset: on for a cluster created
	// under secure defaults (so a networkPolicy written only to add allowedClients keeps the
	// policy), off for one created before them, as it always was.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// AllowedClients may reach the client port, besides the members, the operator and its
	// backup pods. A namespace by name: namespaceSelector with matchLabels
	// kubernetes.io/metadata.name: <namespace>. Empty: nobody else.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	AllowedClients []NetworkPolicyPeer `json:"allowedClients,omitempty"`

	// AllowedMetricsClients may reach the metrics port (/metrics, /livez, /readyz), for example
	// a Prometheus in another namespace. Empty: nobody but the node (kubelet probes).
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	AllowedMetricsClients []NetworkPolicyPeer `json:"allowedMetricsClients,omitempty"`

	// RestrictEgress limits the members' outgoing traffic to the other members' peer port
	// and DNS (port 53). Default false: egress is not restricted. Sidecars of
	// spec.chart.values.extraContainers that send anywhere else need egress open.
	// +optional
	RestrictEgress bool `json:"restrictEgress,omitempty"`
}

// NetworkPolicyPeer selects who may connect, as an entry of a NetworkPolicy's from list:
// pods by podSelector (in the cluster's namespace, or in the namespaces namespaceSelector
// selects), every pod of the namespaces namespaceSelector selects, or addresses by ipBlock.
// +kubebuilder:validation:XValidation:rule="has(self.namespaceSelector) || has(self.podSelector) || has(self.ipBlock)",message="each entry needs namespaceSelector, podSelector or ipBlock (a namespace by name: namespaceSelector.matchLabels with kubernetes.io/metadata.name set to it)"
// +kubebuilder:validation:XValidation:rule="!has(self.ipBlock) || (!has(self.namespaceSelector) && !has(self.podSelector))",message="ipBlock cannot be combined with namespaceSelector or podSelector in one entry; write two entries"
type NetworkPolicyPeer struct {
	// NamespaceSelector selects namespaces by their labels: alone, every pod in them; with
	// PodSelector, those pods in them. {} selects every namespace.
	// +optional
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`

	// PodSelector selects pods by their labels, in the cluster's namespace unless
	// NamespaceSelector is set. {} selects every pod.
	// +optional
	PodSelector *LabelSelector `json:"podSelector,omitempty"`

	// IPBlock allows addresses, for clients that are not pods (outside the cluster, behind
	// a LoadBalancer Service that keeps the source address). Pod addresses are better
	// selected with the selectors: they change.
	// +optional
	IPBlock *IPBlock `json:"ipBlock,omitempty"`
}

// IPBlock is a CIDR, minus the CIDRs in Except.
// +kubebuilder:validation:XValidation:rule="!has(self.except) || !isCIDR(self.cidr) || self.except.all(e, isCIDR(e) && cidr(self.cidr).containsCIDR(e) && cidr(e).prefixLength() > cidr(self.cidr).prefixLength())",message="ipBlock.except: each entry must be a CIDR strictly inside ipBlock.cidr"
// +kubebuilder:validation:XValidation:rule="!has(self.except) || self.except.all(e, !isCIDR(e) || string(cidr(e).masked()) == e)",message="ipBlock.except: each entry must be in canonical form, the network's first address with no bits set past the prefix (10.200.1.0/24, not 10.200.1.7/24): the NetworkPolicy API refuses any other"
type IPBlock struct {
	// CIDR is an IPv4 or IPv6 range, for example 10.0.0.0/16 or 2001:db8::/64.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="ipBlock.cidr must be a CIDR such as 10.0.0.0/16 or 2001:db8::/64"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || string(cidr(self).masked()) == self",message="ipBlock.cidr must be in canonical form, the network's first address with no bits set past the prefix (10.200.0.0/24, not 10.200.0.1/24): the NetworkPolicy API refuses any other"
	CIDR string `json:"cidr"`

	// Except are ranges inside CIDR that are not allowed.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=atomic
	// +optional
	Except []string `json:"except,omitempty"`
}

// LabelSelector is metav1.LabelSelector with bounds, so that the API server can check it
// (CEL rules need bounded lists): matchLabels and matchExpressions are ANDed; an empty
// selector selects everything.
type LabelSelector struct {
	// MatchLabels are labels the object must carry with these values.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// MatchExpressions are set-based requirements.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one set-based requirement of a LabelSelector.
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",message="matchExpressions: operators In and NotIn need values, Exists and DoesNotExist take none"
type LabelSelectorRequirement struct {
	// Key is the label key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`

	// Operator is In, NotIn, Exists or DoesNotExist.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator string `json:"operator"`

	// Values of the label, for In and NotIn.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
}

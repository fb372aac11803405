package charts

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Values is the typed form of the chart's values.yaml, for the values the operator computes.
// Fields left empty keep the chart's defaults (omitempty drops them before Helm coalesces).
type Values struct {
	FullnameOverride          string                            `json:"fullnameOverride,omitempty"`
	Replicas                  int32                             `json:"replicas"`
	Image                     ImageValues                       `json:"image"`
	ManagedBy                 string                            `json:"managedBy,omitempty"`
	CommonLabels              map[string]string                 `json:"commonLabels,omitempty"`
	Etcd                      EtcdValues                        `json:"etcd"`
	Storage                   StorageValues                     `json:"storage"`
	Resources                 *corev1.ResourceRequirements      `json:"resources,omitempty"`
	NodeSelector              map[string]string                 `json:"nodeSelector,omitempty"`
	Tolerations               []corev1.Toleration               `json:"tolerations,omitempty"`
	Affinity                  *corev1.Affinity                  `json:"affinity,omitempty"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	PriorityClassName         string                            `json:"priorityClassName,omitempty"`
	PodLabels                 map[string]string                 `json:"podLabels,omitempty"`
	PodAnnotations            map[string]string                 `json:"podAnnotations,omitempty"`
	Operator                  OperatorValues                    `json:"operator,omitempty"`
	TLS                       *TLSValues                        `json:"tls,omitempty"`
	NetworkPolicy             *NetworkPolicyValues              `json:"networkPolicy,omitempty"`
}

// NetworkPolicyValues is the chart's networkPolicy block.
type NetworkPolicyValues struct {
	Enabled bool `json:"enabled"`
	// AllowedClients and AllowedMetricsClients may reach the client and the metrics port.
	AllowedClients        []networkingv1.NetworkPolicyPeer `json:"allowedClients,omitempty"`
	AllowedMetricsClients []networkingv1.NetworkPolicyPeer `json:"allowedMetricsClients,omitempty"`
	RestrictEgress        bool                             `json:"restrictEgress,omitempty"`
	// Operator names the operator's pods, which the policy lets reach the members.
	Operator *NetworkPolicyOperatorValues `json:"operator,omitempty"`
}

// NetworkPolicyOperatorValues is the chart's networkPolicy.operator block: the operator's pods
// (PodLabels in Namespace; no rule when Namespace is empty) and the pods it runs in the
// cluster's namespace that connect to the client port (AgentPodLabels).
type NetworkPolicyOperatorValues struct {
	Namespace      string            `json:"namespace,omitempty"`
	PodLabels      map[string]string `json:"podLabels,omitempty"`
	AgentPodLabels map[string]string `json:"agentPodLabels,omitempty"`
}

// TLSValues is the chart's tls block.
type TLSValues struct {
	Peer   TLSSideValues `json:"peer"`
	Client TLSSideValues `json:"client"`
}

// TLSSideValues is one side of the chart's tls block: whether it is on, and the Secret with
// tls.crt, tls.key and ca.crt mounted into the members.
type TLSSideValues struct {
	Enabled    bool   `json:"enabled"`
	SecretName string `json:"secretName,omitempty"`
	// ClientCertAuth (client side only) refuses clients without a certificate.
	ClientCertAuth *bool `json:"clientCertAuth,omitempty"`
	// AcceptPlain (client side only) serves plain HTTP on the client port beside TLS.
	AcceptPlain bool `json:"acceptPlain,omitempty"`
	// CRLSecretName (client side only) is the Secret with the revocation list (crl.der) the
	// members check client certificates against.
	CRLSecretName string `json:"crlSecretName,omitempty"`
	// Transition (peer side only) is the scheme of a second peer listener on the transition
	// port ("", http or https), while the operator switches the peer side of a live cluster.
	Transition string `json:"transition,omitempty"`
	// AdvertiseTransition (peer side only) makes members advertise the transition listener.
	AdvertiseTransition bool `json:"advertiseTransition,omitempty"`
	// PinPeers (peer side only) takes on the peer port only certificates valid for the
	// members' own DNS names (--peer-cert-allowed-hostname).
	PinPeers bool `json:"pinPeers,omitempty"`
}

// OperatorValues is the chart's operator block: what the operator takes over from the chart.
type OperatorValues struct {
	// MembershipConfigMap names the ConfigMap with ETCD_INITIAL_CLUSTER and
	// ETCD_INITIAL_CLUSTER_STATE; when set, the chart also leaves the StatefulSet's replicas
	// to the operator.
	MembershipConfigMap string `json:"membershipConfigMap,omitempty"`
}

// ImageValues is the chart's image block.
type ImageValues struct {
	Repository string `json:"repository,omitempty"`
	Tag        string `json:"tag,omitempty"`
	PullPolicy string `json:"pullPolicy,omitempty"`
}

// EtcdValues is the chart's etcd block.
type EtcdValues struct {
	Version                 string            `json:"version"`
	ClusterToken            string            `json:"clusterToken,omitempty"`
	InitialClusterState     string            `json:"initialClusterState,omitempty"`
	QuotaBackendBytes       int64             `json:"quotaBackendBytes,omitempty"`
	AutoCompactionMode      string            `json:"autoCompactionMode,omitempty"`
	AutoCompactionRetention string            `json:"autoCompactionRetention,omitempty"`
	HeartbeatInterval       int32             `json:"heartbeatInterval,omitempty"`
	ElectionTimeout         int32             `json:"electionTimeout,omitempty"`
	SnapshotCount           int64             `json:"snapshotCount,omitempty"`
	ExtraArgs               map[string]string `json:"extraArgs,omitempty"`
}

// StorageValues is the chart's storage block.
type StorageValues struct {
	Ephemeral        bool   `json:"ephemeral,omitempty"`
	Size             string `json:"size,omitempty"`
	StorageClassName string `json:"storageClassName,omitempty"`
	// ClaimLabels label the volume claim templates (immutable once the StatefulSet exists).
	ClaimLabels map[string]string `json:"claimLabels,omitempty"`
}

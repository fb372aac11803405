package v1alpha1

import "strings"

// GuardedChartValue is a key of spec.chart.values that etcd-pilot refuses: the operator
// computes it from a typed spec field, which would let spec.chart.values skip that field's
// admission rules, or owns it, because it decides how the operator finds, names or forms the
// cluster.
//
// GuardedChartValues is the one list of them. `make manifests` declares each key in the
// CRD's schema of spec.chart.values and writes one CEL rule per key from it (hack/chartvalues:
// CEL cannot see fields the schema does not declare, and no marker declares them below a
// RawExtension), and internal/values refuses the same keys for objects stored before the
// rules existed. Both refuse with Message.
//
// +kubebuilder:object:generate=false
type GuardedChartValue struct {
	// Path is the key's dotted path below spec.chart.values, for example etcd.version.
	Path string
	// Type is the key's JSON type in the chart's values.schema.json (string, integer,
	// boolean, object, or array for a list of objects): the CRD declares the key with it.
	Type string
	// Reason says which typed field to use instead, or why etcd-pilot owns the key.
	Reason string
}

// Message is the refusal, the same at admission and in the Degraded condition.
func (g GuardedChartValue) Message() string {
	return "spec.chart.values." + g.Path + ": " + g.Reason
}

// Rule is the CEL rule on spec.chart.values that refuses the key: has() of each parent
// first, since has() fails on a missing parent. A null is not refused here: the CRD declares
// the key not nullable, so the API server drops a null before validating (a null stored
// before that would delete the computed value, and internal/values refuses it).
func (g GuardedChartValue) Rule() string {
	parts := strings.Split(g.Path, ".")
	var terms []string
	for i := range parts {
		terms = append(terms, "!has(self."+strings.Join(parts[:i+1], ".")+")")
	}
	return strings.Join(terms, " || ")
}

// ownedName is the reason of both name overrides.
const ownedName = "owned by etcd-pilot: every object is named after the EtcdCluster; another name would replace the running StatefulSet with a new, empty one and prune it"

// GuardedChartValues are the keys spec.chart.values may not set, in the order refusals are
// reported. Keys that only shape the pods or Services (imagePullSecrets, image.pullPolicy,
// podSecurityContext, terminationGracePeriodSeconds, serviceAccount, service,
// podDisruptionBudget, commonLabels, etcd.clusterDomain and the ports) stay open.
var GuardedChartValues = []GuardedChartValue{
	{Path: "replicas", Type: "integer", Reason: "use spec.replicas"},
	{Path: "image.repository", Type: "string", Reason: "use spec.image"},
	{Path: "image.tag", Type: "string", Reason: `use spec.version: the image tag is always "v" + spec.version`},
	{Path: "etcd.version", Type: "string", Reason: "use spec.version"},
	{Path: "etcd.quotaBackendBytes", Type: "integer", Reason: "use spec.etcd.quotaBackendBytes"},
	{Path: "etcd.autoCompactionMode", Type: "string", Reason: "use spec.etcd.autoCompactionMode"},
	{Path: "etcd.autoCompactionRetention", Type: "string", Reason: "use spec.etcd.autoCompactionRetention"},
	{Path: "etcd.heartbeatInterval", Type: "integer", Reason: "use spec.etcd.heartbeatIntervalMillis"},
	{Path: "etcd.electionTimeout", Type: "integer", Reason: "use spec.etcd.electionTimeoutMillis"},
	{Path: "etcd.snapshotCount", Type: "integer", Reason: "use spec.etcd.snapshotCount"},
	{Path: "etcd.extraArgs", Type: "object", Reason: "use spec.etcd.extraArgs, where flags etcd-pilot owns (such as force-new-cluster), flags with typed fields and unknown flags are refused"},
	{Path: "etcd.clusterToken", Type: "string", Reason: "owned by etcd-pilot: the token derives from the EtcdCluster's UID, so a volume left over from another cluster can never join this one"},
	{Path: "etcd.initialClusterState", Type: "string", Reason: "owned by etcd-pilot: the operator forms the cluster and adds members one at a time through the membership ConfigMap"},
	{Path: "storage.size", Type: "string", Reason: "use spec.storage.size"},
	{Path: "storage.storageClassName", Type: "string", Reason: "use spec.storage.storageClassName"},
	{Path: "storage.ephemeral", Type: "boolean", Reason: "use spec.storage.ephemeral"},
	{Path: "resources", Type: "object", Reason: "use spec.resources"},
	{Path: "nodeSelector", Type: "object", Reason: "use spec.nodeSelector"},
	{Path: "tolerations", Type: "array", Reason: "use spec.tolerations"},
	{Path: "affinity", Type: "object", Reason: "use spec.affinity"},
	{Path: "topologySpreadConstraints", Type: "array", Reason: "use spec.topologySpreadConstraints"},
	{Path: "priorityClassName", Type: "string", Reason: "use spec.priorityClassName"},
	{Path: "podLabels", Type: "object", Reason: "use spec.podLabels"},
	{Path: "podAnnotations", Type: "object", Reason: "use spec.podAnnotations"},
	{Path: "operator", Type: "object", Reason: "owned by etcd-pilot: it hands the StatefulSet's replicas and the members' initial cluster to the operator"},
	{Path: "tls", Type: "object", Reason: "use spec.tls: the operator issues or checks the certificates and connects to etcd with them"},
	{Path: "networkPolicy", Type: "object", Reason: "use spec.networkPolicy: the operator adds its own pods and its backup pods to the policy, which a value here could shut out"},
	{Path: "managedBy", Type: "string", Reason: "owned by etcd-pilot: the operator finds and prunes the objects it applied by this label"},
	{Path: "global.imageRegistry", Type: "string", Reason: "use spec.image: the registry is part of the image the operator runs and upgrades"},
	{Path: "fullnameOverride", Type: "string", Reason: ownedName},
	{Path: "nameOverride", Type: "string", Reason: ownedName},
}

package v1alpha1

// Condition types of an EtcdCluster. Ready summarizes the other three.
const (
	// ConditionAvailable is True while a quorum of members is ready to serve.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the operator is changing the cluster (creating,
	// rolling out, scaling) and False once the cluster matches the spec.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs attention: a spec the operator cannot
	// act on, a failed apply, or unhealthy members.
	ConditionDegraded = "Degraded"
	// ConditionReady is True when the cluster is Available, not Progressing and not Degraded.
	ConditionReady = "Ready"
	// ConditionEphemeralStorage is True while members keep their data in emptyDir volumes.
	ConditionEphemeralStorage = "EphemeralStorage"
)

// Condition reasons.
const (
	// ReasonQuorumAvailable : a quorum of members is ready.
	ReasonQuorumAvailable = "QuorumAvailable"
	// ReasonQuorumNotReady : fewer members are ready than a quorum needs.
	ReasonQuorumNotReady = "QuorumNotReady"

	// ReasonCreating : the cluster's objects were applied and members are starting.
	ReasonCreating = "Creating"
	// ReasonRollingOut : members are starting or restarting to match the spec.
	ReasonRollingOut = "RollingOut"
	// ReasonReconciled : the applied objects and the members match the spec.
	ReasonReconciled = "Reconciled"
	// ReasonPaused : spec.paused is set; only status is reported.
	ReasonPaused = "Paused"

	// ReasonAsExpected : nothing needs attention.
	ReasonAsExpected = "AsExpected"
	// ReasonInvalidSpec : the spec cannot be turned into a valid render.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonApplyFailed : the API server refused an object the chart rendered.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonMembersUnhealthy : some members are not ready or not healthy.
	ReasonMembersUnhealthy = "MembersUnhealthy"

	// ReasonReady : the cluster is available and matches the spec.
	ReasonReady = "Ready"
	// ReasonNotAvailable : Ready is False because the cluster is not Available.
	ReasonNotAvailable = "NotAvailable"
	// ReasonProgressing : Ready is False because a change is under way.
	ReasonProgressing = "Progressing"
	// ReasonDegraded : Ready is False because the cluster is Degraded.
	ReasonDegraded = "Degraded"

	// ReasonEmptyDir : storage.ephemeral is set.
	ReasonEmptyDir = "EmptyDirVolumes"
	// ReasonPersistentVolumes : members keep their data on PersistentVolumeClaims.
	ReasonPersistentVolumes = "PersistentVolumes"
)

// FinalizerName is the finalizer etcd-pilot puts on every EtcdCluster.
const FinalizerName = "etcdpilot.io/finalizer"

// Labels etcd-pilot puts on the objects it renders: the inventory used for pruning.
const (
	// LabelCluster names the EtcdCluster an object belongs to.
	LabelCluster = "etcdpilot.io/cluster"
	// LabelManagedBy is the standard managed-by label; its value is ManagedByValue.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue marks objects that etcd-pilot applied.
	ManagedByValue = "etcd-pilot"
)

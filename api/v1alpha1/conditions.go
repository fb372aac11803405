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
	// ConditionInsecureTransport is True while the spec leaves the peer or the client side
	// in plain HTTP (status.security Plain or Partial). It is information, not a fault:
	// Ready does not depend on it.
	ConditionInsecureTransport = "InsecureTransport"
)

// The conditions kstatus reads (sigs.k8s.io/cli-utils/pkg/kstatus, the library behind kpt,
// Flux's health checks and cli-utils' apply waiters). kstatus computes one status per object:
// InProgress while status.observedGeneration differs from metadata.generation, else Failed
// when Stalled is True, InProgress when Reconciling is True, else Current when Ready is True
// and InProgress when it is False. Both follow kstatus's abnormal-true polarity; etcd-pilot
// always writes them, False when they do not apply, so `kubectl wait
// --for=condition=Stalled=false` and the like work too. Outside spec.paused exactly one of
// Ready, Reconciling and Stalled is True.
const (
	// ConditionReconciling is True while the operator works towards the spec and the cluster
	// is not Ready yet: a change is under way (Progressing: forming, scaling, a rollout or
	// upgrade, a TLS switch, a CA rotation, a restore), or something it waits out or acts on by
	// itself (members starting, unhealthy or lost, a quorum coming back, cert-manager issuing
	// a certificate, an API error it retries). Its reason and message are those of Progressing
	// when that is True, else of Degraded, else of Available. kstatus: InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the operator cannot get further without the user: a spec it
	// cannot act on (InvalidSpec, VersionRefused, a TLS Secret that is missing or unusable, an
	// object the API server refuses as invalid or forbidden), or Degraded for a reason Stalls
	// marks (something a person must decide, delete or fix, or a wait past its deadline).
	// Its reason and message are Degraded's. It clears by itself once the cause is gone; the
	// operator keeps looking. kstatus: Failed. Reconciling is False while Stalled is True.
	ConditionStalled = "Stalled"
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
	// ReasonChartContractBroken : the chart (spec.chart.source) or spec.chart.patches render
	// objects without what the operator relies on, or etcd arguments it refuses (an unsafe
	// flag, a flag given twice, a control character, less TLS than the spec asks); the
	// message lists every broken term, naming the flag and the argument. Nothing of the
	// render is applied until it is fixed.
	ReasonChartContractBroken = "ChartContractBroken"
	// ReasonPodSecurityViolation : a pod the render would run (after spec.chart.patches,
	// whatever the chart) is outside the Pod Security level the operator holds renders to
	// (restricted unless its admin set --pod-security-level), or would get a service-account
	// token or another ServiceAccount than the render's own; the message names each object,
	// container and field. Nothing of the render is applied; what runs keeps running.
	ReasonPodSecurityViolation = "PodSecurityViolation"
	// ReasonChartTooExpensive : the chart of spec.chart.source exceeds the operator's budget
	// for a tenant's chart: its archive's size (packed, unpacked, files; a registry's layer),
	// or the memory or time of its render, or the size of what it renders. The message names
	// the limit and the operator flag that sets it. Nothing is applied and the render is not
	// tried again for the same chart and values for a while; the other clusters are not held up.
	ReasonChartTooExpensive = "ChartTooExpensive"
	// ReasonTLSNotReady : spec.tls cannot be served yet: a Secret the user provides is missing
	// or invalid, the CA Secret cannot be read, or (source CertManager) cert-manager is not
	// installed or has not written a valid Secret for a Certificate yet. Nothing is applied
	// until it is fixed; the message names the Secret (and Certificate) and what is wrong.
	ReasonTLSNotReady = "TLSNotReady"
	// ReasonRotatingCA : the cluster's CA is being rotated: the next CA is trusted next to the
	// current one, members restart onto the new bundle, the new CA signs, the old one is
	// dropped and members restart once more (status.caRotation says where it stands).
	ReasonRotatingCA = "RotatingCA"
	// ReasonSwitchingClientTLS : the client side is switching between plain and TLS: the
	// members restart one at a time onto serving both, then onto the target
	// (status.tlsTransition says where it stands).
	ReasonSwitchingClientTLS = "SwitchingClientTLS"
	// ReasonSwitchingPeerTLS : the peer side is switching between plain and TLS: the members
	// restart onto a second peer listener, their peer URLs move to it one at a time, and back
	// once the peer port serves the target (status.tlsTransition says where it stands).
	ReasonSwitchingPeerTLS = "SwitchingPeerTLS"
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

	// ReasonNotStalled : Stalled is False: nothing waits for the user (Degraded, if True, clears
	// without the user).
	ReasonNotStalled = "NotStalled"

	// ReasonEmptyDir : storage.ephemeral is set.
	ReasonEmptyDir = "EmptyDirVolumes"
	// ReasonPersistentVolumes : members keep their data on PersistentVolumeClaims.
	ReasonPersistentVolumes = "PersistentVolumes"

	// ReasonInsecureByChoice : spec.insecure is set, or spec.tls leaves a side plain.
	ReasonInsecureByChoice = "InsecureByChoice"
	// ReasonCreatedBeforeSecureDefaults : the cluster was created before the operator made
	// TLS the default (it carries no AnnotationDefaults) and has no spec.tls: it keeps plain
	// HTTP, as it was created.
	ReasonCreatedBeforeSecureDefaults = "CreatedBeforeSecureDefaults"
	// ReasonTLS : both sides use TLS.
	ReasonTLS = "TLS"
)

// SecurityMode is what the spec asks of the transport (status.security).
// +kubebuilder:validation:Enum=TLS;Partial;Plain
type SecurityMode string

const (
	// SecurityTLS : peer and client TLS.
	SecurityTLS SecurityMode = "TLS"
	// SecurityPartial : TLS on one side only.
	SecurityPartial SecurityMode = "Partial"
	// SecurityPlain : plain HTTP on both sides.
	SecurityPlain SecurityMode = "Plain"
)

// AnnotationDefaults marks an EtcdCluster the operator first saw under secure defaults: it
// adds it, with the value DefaultsSecure, in the same write as the finalizer. A cluster with
// the annotation and without spec.insecure gets peer and client TLS and the NetworkPolicy
// where its spec leaves them out; a cluster without it (created before secure defaults, so
// its finalizer was added without it) keeps plain HTTP and no NetworkPolicy, as it was
// created, with no restart. Setting it by hand only makes a cluster more secure.
const AnnotationDefaults = "etcdpilot.io/defaults"

// DefaultsSecure is AnnotationDefaults' value for secure defaults.
const DefaultsSecure = "secure"

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

// Membership reasons, in Progressing (changes and waits within them) and Degraded (waits
// that need the user).
const (
	// ReasonBootstrapping : the first members are forming the cluster.
	ReasonBootstrapping = "Bootstrapping"
	// ReasonEtcdUnreachable : no member answered the operator.
	ReasonEtcdUnreachable = "EtcdUnreachable"
	// ReasonQuorumLost : fewer voting members are healthy than quorum needs; no membership change is made.
	ReasonQuorumLost = "QuorumLost"
	// ReasonNoLeader : the members follow no common leader.
	ReasonNoLeader = "NoLeader"
	// ReasonSplitBrain : members report different cluster IDs; nothing is changed.
	ReasonSplitBrain = "SplitBrain"
	// ReasonUnknownMember : etcd lists members that are not pods of the StatefulSet.
	ReasonUnknownMember = "UnknownMember"
	// ReasonPodNotMember : a ready pod is not a member of the cluster.
	ReasonPodNotMember = "PodNotMember"
	// ReasonQuorumAtRisk : a change would leave fewer healthy voters than quorum.
	ReasonQuorumAtRisk = "QuorumAtRisk"
	// ReasonStaleVolume : a kept volume claim of a removed member blocks a scale-out.
	ReasonStaleVolume = "StaleVolume"
	// ReasonMemberUnhealthy : a member is unhealthy.
	ReasonMemberUnhealthy = "MemberUnhealthy"
	// ReasonInvalidIntent : the recorded membership change could not be read and is abandoned.
	ReasonInvalidIntent = "InvalidIntent"
	// ReasonScaleOut : a member is being added (learner, then promoted).
	ReasonScaleOut = "ScaleOut"
	// ReasonScaleIn : a member is being removed.
	ReasonScaleIn = "ScaleIn"
	// ReasonReplaceMember : a lost member is being replaced by a fresh one.
	ReasonReplaceMember = "ReplaceMember"
	// ReasonReaddPod : a pod without a member is being re-added as a learner on a fresh volume.
	ReasonReaddPod = "ReaddPod"
	// ReasonAdoptLearner : a learner found without a recorded change is being finished.
	ReasonAdoptLearner = "AdoptLearner"
	// ReasonWaitingForPod : waiting for the joining member's pod.
	ReasonWaitingForPod = "WaitingForPod"
	// ReasonPodTerminating : waiting for a pod to terminate.
	ReasonPodTerminating = "PodTerminating"
	// ReasonVolumeDeleting : waiting for a volume claim to be deleted.
	ReasonVolumeDeleting = "VolumeDeleting"
	// ReasonLearnerStarting : waiting for the learner to start.
	ReasonLearnerStarting = "LearnerStarting"
	// ReasonLearnerCatchingUp : waiting for the learner to catch up with the leader.
	ReasonLearnerCatchingUp = "LearnerCatchingUp"
	// ReasonMemberStarting : waiting for a member to start.
	ReasonMemberStarting = "MemberStarting"
	// ReasonLeaderUnreachable : the leader did not answer; leadership cannot be moved yet.
	ReasonLeaderUnreachable = "LeaderUnreachable"
	// ReasonLearnerNeverStarted : a learner's pod did not start within
	// spec.membership.replaceAfter; the learner is removed and added again (degrades).
	ReasonLearnerNeverStarted = "LearnerNeverStarted"
	// ReasonPodNotCreated : a member has had no pod for spec.membership.replaceAfter; the
	// StatefulSet does not create it (admission, quota, policy). Not replaced (degrades).
	ReasonPodNotCreated = "PodNotCreated"
)

// Rollout reasons (version upgrades and other pod template changes), in Progressing and
// Degraded.
const (
	// ReasonRolloutWaiting : the rollout waits for its preflight (every member healthy, voting
	// and caught up, no alarm, a leader).
	ReasonRolloutWaiting = "RolloutWaiting"
	// ReasonMemberRestarting : a member restarted onto the new pod template and is not healthy
	// and caught up yet.
	ReasonMemberRestarting = "MemberRestarting"
	// ReasonVersionStep : every member runs an intermediate release; waiting for etcd to raise
	// the cluster version before the next minor.
	ReasonVersionStep = "VersionStep"
	// ReasonUpgradeStalled : a restarted member did not become healthy within
	// spec.upgrade.memberTimeout; the rollout stopped.
	ReasonUpgradeStalled = "UpgradeStalled"
	// ReasonVersionRefused : spec.version is below the cluster version etcd runs.
	ReasonVersionRefused = "VersionRefused"
)

// Maintenance reasons (defragmentation, compaction, alarms), in Progressing and Degraded.
const (
	// ReasonDefragmenting : a member is being defragmented (one at a time, followers first,
	// the leader last after leadership moved), or a defragmentation waits for every voting
	// member to be up and caught up.
	ReasonDefragmenting = "Defragmenting"
	// ReasonCompacting : the keyspace is being compacted to the current revision, the first
	// step of the recovery from a NOSPACE alarm.
	ReasonCompacting = "Compacting"
	// ReasonNoSpaceAlarm : etcd raised a NOSPACE alarm: the cluster refuses writes until space
	// is freed (compaction, defragmentation) and the alarm disarmed. The operator recovers by
	// itself; the message says what blocks it, or that the data does not fit under the quota
	// (raise spec.etcd.quotaBackendBytes or delete data).
	ReasonNoSpaceAlarm = "NoSpaceAlarm"
	// ReasonCorruptAlarm : etcd raised a CORRUPT alarm: a member's data differs from the
	// others'. The operator never disarms it: find the corrupt member (etcdctl alarm list,
	// etcdctl endpoint hashkv), remove it so the operator replaces it, or restore from a backup.
	ReasonCorruptAlarm = "CorruptAlarm"
	// ReasonDisarmingAlarm : a NOSPACE alarm is being disarmed after its cause was removed.
	ReasonDisarmingAlarm = "DisarmingAlarm"
)

// Storage reasons (spec.storage.size grown), in Progressing and Degraded.
const (
	// ReasonExpandingVolumes : spec.storage.size grew: the members' claims are expanded one
	// at a time, the operator waits for their file systems to grow, then re-creates the
	// StatefulSet (its pods kept) with the new size in its claim template.
	ReasonExpandingVolumes = "ExpandingVolumes"
	// ReasonVolumeExpansionNotAllowed : spec.storage.size grew, but the members' StorageClass
	// does not allow volume expansion (allowVolumeExpansion is not true). No claim was
	// touched; the expansion goes on once an administrator lets the class allow it. (The size
	// cannot go back down: admission refuses any shrink.)
	ReasonVolumeExpansionNotAllowed = "VolumeExpansionNotAllowed"
	// ReasonVolumeExpansionFailed : the storage reports the resize of a member's claim
	// infeasible (allocatedResourceStatuses): free or add capacity in the storage; the
	// expansion goes on once the storage can grow the claim.
	ReasonVolumeExpansionFailed = "VolumeExpansionFailed"
)

// Authentication reasons.
const (
	// ReasonEnablingAuth : the operator is creating the root user and its own, or turning
	// etcd's authentication on (spec.auth.enabled).
	ReasonEnablingAuth = "EnablingAuth"
	// ReasonDisablingAuth : the operator is turning etcd's authentication off.
	ReasonDisablingAuth = "DisablingAuth"
	// ReasonAuthLockedOut : etcd's authentication is on and the operator has no identity etcd
	// accepts as root: its client certificate maps to no user with the root role, or it has
	// none (tls.client removed, clientCertAuth off), so etcd refuses its membership changes,
	// maintenance and snapshots ("user name is empty", "permission denied"). The message says
	// what etcd refused and how to fix it.
	ReasonAuthLockedOut = "AuthLockedOut"
	// ReasonAuthStillEnabled : the spec asks the client port to stop serving TLS (tls.client
	// removed), which takes the operator's client certificate, its identity in etcd, away,
	// while etcd reports its authentication on (or could not be asked): the switch holds, TLS
	// stays served and the operator keeps dialing with its certificate, until etcd reports
	// authentication off (set spec.auth.enabled: false and the operator turns it off).
	ReasonAuthStillEnabled = "AuthStillEnabled"
	// ReasonRenamingOperatorUser : the operator's client certificate of a cluster created
	// before secure defaults is moving from the common name every such cluster's operator
	// certificate shares (etcd-pilot) to one of this cluster's own: the new etcd user with the
	// root role first, then the certificate, then the old user is removed.
	ReasonRenamingOperatorUser = "RenamingOperatorUser"
)

// Safety gate reasons.
const (
	// ReasonStepRefused : the safety gate refused the step a planner proposed, because it
	// breaks a named invariant given what etcd reported in this pass; the operator waits and
	// looks again (the message names the invariant and the members concerned).
	ReasonStepRefused = "StepRefused"
)

// Effect says what a reason of the Progressing and Degraded conditions means for the cluster.
type Effect string

const (
	// EffectWaits : a wait inside a change that ends by itself within seconds; the operator
	// looks again after a second.
	EffectWaits Effect = "Waits"
	// EffectProgresses : a change under way, or a wait that is part of normal operation.
	EffectProgresses Effect = "Progresses"
	// EffectDegrades : the cluster needs the user's attention; Degraded says why.
	EffectDegrades Effect = "Degrades"
)

// ReasonEffects declares once, for every reason a planner or the safety gate gives, whether it
// waits, progresses or degrades.
var ReasonEffects = map[string]Effect{
	ReasonBootstrapping:             EffectWaits,
	ReasonEtcdUnreachable:           EffectDegrades,
	ReasonQuorumLost:                EffectDegrades,
	ReasonNoLeader:                  EffectProgresses,
	ReasonSwitchingClientTLS:        EffectProgresses,
	ReasonSwitchingPeerTLS:          EffectProgresses,
	ReasonSplitBrain:                EffectDegrades,
	ReasonUnknownMember:             EffectDegrades,
	ReasonPodNotMember:              EffectDegrades,
	ReasonQuorumAtRisk:              EffectDegrades,
	ReasonStaleVolume:               EffectDegrades,
	ReasonMemberUnhealthy:           EffectProgresses,
	ReasonInvalidIntent:             EffectDegrades,
	ReasonScaleOut:                  EffectProgresses,
	ReasonScaleIn:                   EffectProgresses,
	ReasonReplaceMember:             EffectProgresses,
	ReasonReaddPod:                  EffectProgresses,
	ReasonAdoptLearner:              EffectProgresses,
	ReasonWaitingForPod:             EffectWaits,
	ReasonPodTerminating:            EffectWaits,
	ReasonVolumeDeleting:            EffectWaits,
	ReasonLearnerStarting:           EffectWaits,
	ReasonLearnerCatchingUp:         EffectWaits,
	ReasonMemberStarting:            EffectWaits,
	ReasonLeaderUnreachable:         EffectProgresses,
	ReasonLearnerNeverStarted:       EffectDegrades,
	ReasonPodNotCreated:             EffectDegrades,
	ReasonRollingOut:                EffectWaits,
	ReasonRolloutWaiting:            EffectWaits,
	ReasonMemberRestarting:          EffectWaits,
	ReasonVersionStep:               EffectWaits,
	ReasonUpgradeStalled:            EffectDegrades,
	ReasonStepRefused:               EffectWaits,
	ReasonDefragmenting:             EffectProgresses,
	ReasonCompacting:                EffectProgresses,
	ReasonNoSpaceAlarm:              EffectDegrades,
	ReasonCorruptAlarm:              EffectDegrades,
	ReasonDisarmingAlarm:            EffectProgresses,
	ReasonEnablingAuth:              EffectProgresses,
	ReasonDisablingAuth:             EffectProgresses,
	ReasonRenamingOperatorUser:      EffectProgresses,
	ReasonExpandingVolumes:          EffectProgresses,
	ReasonVolumeExpansionNotAllowed: EffectDegrades,
	ReasonVolumeExpansionFailed:     EffectDegrades,
	ReasonAuthLockedOut:             EffectDegrades,
	ReasonAuthStillEnabled:          EffectDegrades,
	// The render waits for the user to fix spec.chart (or the admin to relax the level).
	ReasonPodSecurityViolation: EffectDegrades,
	ReasonChartTooExpensive:    EffectDegrades,
}

// Stalls says, for every reason that degrades, whether it also stalls (Stalled=True, kstatus
// Failed): the operator does not get past it without the user (a person must decide, delete
// or fix something), or a deadline for progress ran out and the operator stopped. false: the
// operator gets past it by itself (members come back, it replaces a learner or recovers from
// a NOSPACE alarm), and the cluster is Reconciling meanwhile. Every reason ReasonEffects marks
// EffectDegrades is listed. Reasons of a spec that cannot be acted on (InvalidSpec,
// VersionRefused, TLSNotReady, ApplyFailed) are decided where they arise: a TLS Secret
// cert-manager has not issued yet, and an API error other than invalid or forbidden, do not
// stall.
var Stalls = map[string]bool{
	ReasonEtcdUnreachable: false,
	ReasonQuorumLost:      false,
	ReasonQuorumAtRisk:    false,
	ReasonInvalidIntent:   false,
	// The operator removes the learner and adds it again.
	ReasonLearnerNeverStarted: false,
	// The recovery compacts, defragments and disarms by itself; when the data does not fit
	// the message says so, but the reason is the same as while the recovery waits for a
	// leader or a member.
	ReasonNoSpaceAlarm: false,

	ReasonSplitBrain:     true,
	ReasonUnknownMember:  true,
	ReasonPodNotMember:   true,
	ReasonStaleVolume:    true,
	ReasonPodNotCreated:  true,
	ReasonUpgradeStalled: true,
	ReasonCorruptAlarm:   true,
	ReasonAuthLockedOut:  true,
	// The client TLS switch waits for spec.auth.enabled: false (or tls.client back).
	ReasonAuthStillEnabled: true,
	// The StorageClass must allow expansion, or spec.storage.size go back.
	ReasonVolumeExpansionNotAllowed: true,
	ReasonVolumeExpansionFailed:     true,
	// Nothing is applied until spec.chart changes.
	ReasonPodSecurityViolation: true,
	// The chart or its values must get cheaper, or the operator's admin raise the limit.
	ReasonChartTooExpensive: true,

	// An upgrade waits for its backup, which failed: delete the EtcdBackup to take it again.
	// A scheduled backup that failed for good stalls too until a newer one succeeds.
	ReasonBackupFailed:    true,
	ReasonInvalidSchedule: true,
	ReasonBackupOverdue:   true,

	ReasonRestoreFailed:            true,
	ReasonDisasterRecoveryRequired: true,
	ReasonNoBackupToRestore:        true,
}

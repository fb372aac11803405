package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultVersion is the etcd version a new EtcdCluster gets when spec.version is empty.
// Keep it in step with the +kubebuilder:default marker on EtcdClusterSpec.Version.
const DefaultVersion = "3.6.16"

// DefaultImageRepository is the image repository of the official etcd release images.
const DefaultImageRepository = "gcr.io/etcd-development/etcd"

// EtcdClusterSpec is the desired state of an etcd cluster.
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap)",message="bootstrap can only be set when the cluster is created: it decides the data the founding members start from"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.storage) || !has(self.storage.ephemeral) || !self.storage.ephemeral",message="bootstrap needs volume claims: with storage.ephemeral the data directory only exists once the pod runs, so it cannot be restored before etcd starts"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.fromObject) || !has(self.version) || !self.version.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || !self.bootstrap.fromObject.etcdVersion.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || (self.version.split('.')[0] == self.bootstrap.fromObject.etcdVersion.split('.')[0] && int(self.version.split('.')[1]) - int(self.bootstrap.fromObject.etcdVersion.split('.')[1]) in [0, 1])",messageExpression="'a snapshot of etcd ' + self.bootstrap.fromObject.etcdVersion + ' cannot be restored into etcd ' + self.version + ': etcd supports restoring a snapshot into the same minor version or the next one (an upgrade); restore into ' + self.bootstrap.fromObject.etcdVersion.split('.')[0] + '.' + self.bootstrap.fromObject.etcdVersion.split('.')[1] + ' and upgrade step by step'"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.tls) || !has(oldSelf.tls.client) || (has(self.tls) && has(self.tls.client)) || (has(oldSelf.tls.client.acceptPlain) && oldSelf.tls.client.acceptPlain)",message="tls.client can be removed only from acceptPlain: true: first set tls.client.acceptPlain so that the members serve plain HTTP beside TLS, move your clients to plain HTTP, then remove tls.client. To keep client TLS and drop only settings (application certificates, a source), keep tls.client and change those fields instead"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !self.auth.enabled || !has(self.tls) || !has(self.tls.client) || !has(self.tls.client.acceptPlain) || !self.tls.client.acceptPlain",message="tls.client.acceptPlain cannot be set while auth is enabled: passwords must not cross the network in clear text"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !self.auth.enabled || ((has(self.tls) && has(self.tls.client)) ? (!has(self.tls.client.clientCertAuth) || self.tls.client.clientCertAuth) : !(has(self.insecure) && self.insecure))",message="auth.enabled needs client TLS with clientCertAuth (tls.client, or the secure default's without spec.insecure): the operator authenticates to etcd by its client certificate, and passwords must not cross the network in clear text"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !self.auth.enabled || !has(oldSelf.auth) || !oldSelf.auth.enabled || !has(self.tls) || !has(self.tls.client) || ((!has(oldSelf.tls) || !has(oldSelf.tls.client)) && has(oldSelf.insecure) && oldSelf.insecure) || ((has(self.tls.client.source) ? self.tls.client.source : 'Operator') == ((has(oldSelf.tls) && has(oldSelf.tls.client) && has(oldSelf.tls.client.source)) ? oldSelf.tls.client.source : 'Operator') && (has(self.tls.client.operatorSecretName) ? self.tls.client.operatorSecretName : '-') == ((has(oldSelf.tls) && has(oldSelf.tls.client) && has(oldSelf.tls.client.operatorSecretName)) ? oldSelf.tls.client.operatorSecretName : '-'))",message="tls.client.source and tls.client.operatorSecretName cannot change while auth is enabled (without tls.client in the spec, the secure default's is source Operator): etcd knows the operator by its client certificate's common name, and a certificate of another name would lock it out. Turn auth off first, or keep the certificate's common name"
type EtcdClusterSpec struct {
	// Replicas is the number of voting etcd members. Odd numbers tolerate the same number of
	// failures as the next even number, with less write overhead.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Version is the etcd release to run, as MAJOR.MINOR.PATCH (for example 3.6.16).
	// +kubebuilder:default="3.6.16"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$')",message="version must be an etcd release such as 3.6.16: MAJOR.MINOR.PATCH, without a 'v' prefix and without tags such as 'latest'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || self.matches('^3\\\\.(5|6|7)\\\\.')",message="etcd-pilot runs etcd 3.5, 3.6 and 3.7; pick a version of one of those minors (for example 3.6.16)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || !oldSelf.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || !oldSelf.startsWith('3.5.') || self.startsWith('3.5.') || int(oldSelf.split('.')[2]) >= 20",messageExpression="'version cannot go from ' + oldSelf + ' to ' + self + ': leaving etcd 3.5 needs 3.5.20 or later first (it fixes learner promotion during upgrades); upgrade to a recent 3.5 release (for example 3.5.35), then to ' + self"
	// +optional
	Version string `json:"version,omitempty"`

	// Image overrides the image repository (for example a mirror of the official etcd images).
	// The tag is always "v" + version.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.matches('.*(@|:[^/]*$)')",message="image is a repository without a tag or digest (for example registry.example/etcd); the tag comes from spec.version"
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[A-Za-z0-9][A-Za-z0-9._/:-]*$')",message="image must be an image repository such as registry.example/etcd or registry.example:5000/mirror/etcd: letters, digits and the characters . _ - / : only"
	// +optional
	Image string `json:"image,omitempty"`

	// Storage configures each member's data volume.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// Resources are the etcd container's compute resources.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains member pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the member pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity of the member pods. When empty, the chart prefers spreading members across nodes.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints of the member pods.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the member pods.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="priorityClassName must be the name of a PriorityClass: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// PodLabels are added to the member pods. They cannot replace the selector labels.
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// PodAnnotations are added to the member pods.
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// Etcd tunes the etcd server.
	// +kubebuilder:default={}
	// +optional
	Etcd EtcdSettings `json:"etcd,omitempty"`

	// Membership tunes member replacement.
	// +kubebuilder:default={}
	// +optional
	Membership MembershipSpec `json:"membership,omitempty"`

	// Upgrade tunes how version and pod template changes roll out.
	// +kubebuilder:default={}
	// +optional
	Upgrade UpgradeSpec `json:"upgrade,omitempty"`

	// Chart customizes the chart render.
	// +optional
	Chart ChartSpec `json:"chart,omitempty"`

	// Backup takes scheduled, verified backups of the cluster (and one before every
	// minor-version upgrade).
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Maintenance tunes defragmentation and alarm handling.
	// +kubebuilder:default={}
	// +optional
	Maintenance MaintenanceSpec `json:"maintenance,omitempty"`

	// Paused stops every action on the cluster (apply, membership, upgrades); status is still
	// reported.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Bootstrap restores the founding members' data from a snapshot before etcd first starts.
	// It can only be set at creation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bootstrap cannot change after creation: the founding members' data came from it"
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// DisasterRecovery says what happens when quorum is lost for good (a majority of the
	// members lost their data).
	// +kubebuilder:default={}
	// +optional
	DisasterRecovery DisasterRecoverySpec `json:"disasterRecovery,omitempty"`

	// TLS secures the peer and client traffic. Absent: a cluster created under secure
	// defaults (see AnnotationDefaults) gets peer and client TLS with client-certificate
	// authentication, certificates from the operator (source Operator on both sides), unless
	// Insecure is set; a cluster created before them, or with Insecure, speaks plain HTTP.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Insecure opts out of the secure defaults, explicitly: without spec.tls the members serve
	// plain HTTP on the client and peer ports, to any pod that reaches them and without
	// authentication, and without spec.networkPolicy no NetworkPolicy is rendered. spec.tls and
	// spec.networkPolicy, when set, still apply. status.security and the InsecureTransport
	// condition show the choice.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Auth turns on etcd's authentication. It needs tls.client with clientCertAuth: the
	// operator authenticates by its client certificate, and passwords never cross the
	// network in clear text.
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// NetworkPolicy renders a NetworkPolicy for the member pods: peer traffic only between
	// the members, the client port for the operator, its backup pods and the clients named
	// here, the metrics port for the scrapers named here. It needs a network plugin that
	// enforces NetworkPolicy. Absent: a cluster created under secure defaults gets it enabled
	// (no further clients), unless Insecure is set; a cluster created before them, or with
	// Insecure, gets none.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`
}

// StorageSpec configures the members' data volumes.
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.storageClassName cannot be changed after creation: the members' volume claims are immutable. Create a new EtcdCluster with the new class and move the data with a snapshot"
// +kubebuilder:validation:XValidation:rule="has(self.ephemeral) == has(oldSelf.ephemeral) && (!has(self.ephemeral) || self.ephemeral == oldSelf.ephemeral)",message="storage.ephemeral cannot be changed after creation: it decides whether members keep their data on volume claims or in emptyDir"
// +kubebuilder:validation:XValidation:rule="!has(self.size) || !has(oldSelf.size) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0",message="storage.size cannot shrink: a volume cannot be made smaller. Keep the size, or create a new EtcdCluster with the smaller size and move the data with a snapshot"
// +kubebuilder:validation:XValidation:rule="!(has(self.ephemeral) && self.ephemeral) || !has(self.size) || !has(oldSelf.size) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) == 0",message="storage.size cannot change with storage.ephemeral: true: the emptyDir's size limit is part of the pod template, and a restarted member would lose its data"
// +kubebuilder:validation:XValidation:rule="!(has(self.ephemeral) && self.ephemeral && has(self.storageClassName))",message="storage.storageClassName has no effect with storage.ephemeral: true; remove one of them"
type StorageSpec struct {
	// Size of each member's volume (and the size limit of the emptyDir when ephemeral). It may
	// grow, never shrink: the operator expands every member's claim (the StorageClass must
	// allow volume expansion), waits for the file systems to grow, then re-creates the
	// StatefulSet without its pods so that new members' claims get the new size. Members do not
	// restart unless the storage can only grow a file system offline; then they restart one at
	// a time, the leader last. status.storage shows each member's progress.
	// +kubebuilder:default="1Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the members' volume claims; empty means the cluster's default class.
	// Immutable after creation.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="storage.storageClassName must be the name of a StorageClass: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Retention decides what happens to members' volume claims when members are removed.
	// +optional
	Retention VolumeRetention `json:"retention,omitempty"`

	// Ephemeral opts into emptyDir volumes instead of PersistentVolumeClaims: a member whose pod
	// is deleted loses its data and must be replaced. For tests and caches only; the status
	// carries a warning condition while it is set. Immutable after creation.
	// +optional
	Ephemeral *bool `json:"ephemeral,omitempty"`
}

// RetentionAction is what happens to a removed member's volume claim.
// +kubebuilder:validation:Enum=Delete;Retain
type RetentionAction string

const (
	// RetentionDelete deletes the claim (and so, with a Delete reclaim policy, the data).
	RetentionDelete RetentionAction = "Delete"
	// RetentionRetain keeps the claim. Its data is never reused by a later member.
	RetentionRetain RetentionAction = "Retain"
)

// VolumeRetention says what happens to volume claims of removed members.
type VolumeRetention struct {
	// WhenScaledIn applies to the claim of a member removed by a scale-in. Default Delete: a
	// removed member's data can never rejoin the cluster.
	// +kubebuilder:default=Delete
	// +optional
	WhenScaledIn RetentionAction `json:"whenScaledIn,omitempty"`
	// WhenDeleted applies to every claim when the EtcdCluster is deleted. Default Retain:
	// deleting a cluster never deletes its data unless asked.
	// +kubebuilder:default=Retain
	// +optional
	WhenDeleted RetentionAction `json:"whenDeleted,omitempty"`
}

// MembershipSpec tunes how the operator changes etcd's membership.
type MembershipSpec struct {
	// ReplaceAfter is how long a member may be lost (its pod on a NotReady node, or failing
	// to start) before the operator replaces it with a fresh member, while quorum holds.
	// +kubebuilder:default="5m"
	// +optional
	ReplaceAfter *metav1.Duration `json:"replaceAfter,omitempty"`
}

// UpgradeSpec tunes rolling restarts: version upgrades and any other pod template change.
// Members restart one at a time, followers first and the leader last (after leadership moved
// to an updated member); a version more than one minor ahead is reached one minor at a time.
type UpgradeSpec struct {
	// MemberTimeout is how long a member restarted onto the new pod template may take to become
	// healthy and catch up with the leader. Past it the rollout stops, Degraded names the member
	// and why, and the other members keep serving on the previous template: fix the cause (the
	// rollout then resumes) or set spec.version back to the version the other members run.
	// +kubebuilder:default="5m"
	// +optional
	MemberTimeout *metav1.Duration `json:"memberTimeout,omitempty"`
}

// MaintenanceSpec tunes the operator's maintenance of etcd's storage.
type MaintenanceSpec struct {
	// Defragmentation returns space that etcd freed (after compaction) to the file system.
	// +kubebuilder:default={}
	// +optional
	Defragmentation DefragmentationSpec `json:"defragmentation,omitempty"`
}

// DefragmentationSpec decides when a member is defragmented. Members are defragmented one at
// a time, followers first, the leader last after leadership moved, and never while another
// voting member is down. A NOSPACE alarm is always handled (compact, defragment, disarm),
// whatever these settings say.
type DefragmentationSpec struct {
	// Disabled turns off defragmentation driven by fragmentation and by the quota.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// FragmentedPercent is the share of a member's database file that must be free pages
	// ((db size - db size in use) / db size) before it is defragmented.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	FragmentedPercent int32 `json:"fragmentedPercent,omitempty"`

	// MinFragmentedSize is the least free space worth a defragmentation.
	// +kubebuilder:default="64Mi"
	// +optional
	MinFragmentedSize *resource.Quantity `json:"minFragmentedSize,omitempty"`

	// QuotaPercent defragments a member whose database file exceeds this share of the space
	// quota (spec.etcd.quotaBackendBytes, etcd's default 2Gi) and holds free pages, whatever
	// its fragmentation, before etcd raises a NOSPACE alarm.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	QuotaPercent int32 `json:"quotaPercent,omitempty"`

	// Schedule, in cron syntax, restricts defragmentation driven by fragmentation to windows
	// that open at these times and last Window; empty means at any time. The quota trigger
	// and NOSPACE recovery do not wait for a window.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="schedule must not carry a time zone (CRON_TZ= or TZ=); use defragmentation.timeZone"
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly|every [0-9].*)$') || self.split(' ').filter(f, f != '').size() == 5",message="schedule must be five cron fields (minute hour day-of-month month day-of-week, for example '0 3 * * 0') or a descriptor such as @weekly"
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// TimeZone is the IANA time zone of Schedule; default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Window is how long after each scheduled time defragmentation may start.
	// +kubebuilder:default="1h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
}

// AutoCompactionMode is etcd's --auto-compaction-mode.
// +kubebuilder:validation:Enum=periodic;revision
type AutoCompactionMode string

const (
	// AutoCompactionPeriodic keeps the history of a time window.
	AutoCompactionPeriodic AutoCompactionMode = "periodic"
	// AutoCompactionRevision keeps a number of revisions.
	AutoCompactionRevision AutoCompactionMode = "revision"
)

// EtcdSettings tunes the etcd server. Unset fields keep etcd's own defaults.
// +kubebuilder:validation:XValidation:rule="(has(self.electionTimeoutMillis) ? self.electionTimeoutMillis : 1000) >= 5 * (has(self.heartbeatIntervalMillis) ? self.heartbeatIntervalMillis : 100)",message="etcd.electionTimeoutMillis must be at least 5 times etcd.heartbeatIntervalMillis (etcd's defaults are 1000 and 100)"
// +kubebuilder:validation:XValidation:rule="!has(self.autoCompactionRetention) || (has(self.autoCompactionMode) && self.autoCompactionMode == 'revision' ? self.autoCompactionRetention.matches('^[0-9]+$') : self.autoCompactionRetention.matches('^([0-9]+|([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+)$'))",message="etcd.autoCompactionRetention must be a revision count (for example 10000) with mode revision, or a duration (for example 30m or 1h) or a number of hours with mode periodic"
type EtcdSettings struct {
	// QuotaBackendBytes is the backend size limit (--quota-backend-bytes), for example 8Gi.
	// etcd raises a NOSPACE alarm and refuses writes past it.
	// +optional
	QuotaBackendBytes *resource.Quantity `json:"quotaBackendBytes,omitempty"`

	// AutoCompactionMode is periodic (keep a time window) or revision (keep a revision count).
	// +optional
	AutoCompactionMode AutoCompactionMode `json:"autoCompactionMode,omitempty"`

	// AutoCompactionRetention is the window to keep: a duration such as 1h for periodic mode,
	// a revision count for revision mode. Empty disables auto compaction.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`

	// HeartbeatIntervalMillis is the raft heartbeat interval in milliseconds.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=10000
	// +optional
	HeartbeatIntervalMillis *int32 `json:"heartbeatIntervalMillis,omitempty"`

	// ElectionTimeoutMillis is the raft election timeout in milliseconds.
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=50000
	// +optional
	ElectionTimeoutMillis *int32 `json:"electionTimeoutMillis,omitempty"`

	// SnapshotCount is the number of committed transactions that trigger a snapshot to disk.
	// +kubebuilder:validation:Minimum=1
	// +optional
	SnapshotCount *int64 `json:"snapshotCount,omitempty"`

	// The messageExpressions name the offending flags with format, not join: the API server
	// cannot bound the size of a joined list computed from map keys, so it refuses join here
	// as too costly, while format's cost only depends on the format string.

	// ExtraArgs are further etcd flags, by name without leading dashes (for example
	// log-level: debug). Flags the operator owns, flags with a typed field and unknown flags
	// are refused, and so are values with anything but printable ASCII (a line break would
	// start another flag).
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','listen-client-http-urls','listen-metrics-urls','initial-advertise-peer-urls','advertise-client-urls','initial-cluster','initial-cluster-state','initial-cluster-token','discovery','discovery-fallback','discovery-proxy','discovery-srv','discovery-srv-name','discovery-token','discovery-endpoints','discovery-cacert','discovery-cert','discovery-key','discovery-user','discovery-password','discovery-insecure-transport','discovery-insecure-skip-tls-verify','discovery-dial-timeout','discovery-request-timeout','discovery-keepalive-time','discovery-keepalive-timeout','cert-file','key-file','client-cert-file','client-key-file','trusted-ca-file','client-cert-auth','client-crl-file','client-cert-allowed-hostname','auto-tls','peer-cert-file','peer-key-file','peer-client-cert-file','peer-client-key-file','peer-trusted-ca-file','peer-client-cert-auth','peer-crl-file','peer-cert-allowed-cn','peer-cert-allowed-hostname','peer-auto-tls','self-signed-cert-validity','config-file','force-new-cluster','strict-reconfig-check','unsafe-no-fsync','enable-v2','experimental-enable-v2v3','proxy','version'])",messageExpression="'extraArgs sets flags that etcd-pilot owns: %s. Remove them: the operator sets member names, URLs, the initial cluster, the data directory and TLS paths itself, and refuses unsafe flags'.format([self.filter(k, k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','listen-client-http-urls','listen-metrics-urls','initial-advertise-peer-urls','advertise-client-urls','initial-cluster','initial-cluster-state','initial-cluster-token','discovery','discovery-fallback','discovery-proxy','discovery-srv','discovery-srv-name','discovery-token','discovery-endpoints','discovery-cacert','discovery-cert','discovery-key','discovery-user','discovery-password','discovery-insecure-transport','discovery-insecure-skip-tls-verify','discovery-dial-timeout','discovery-request-timeout','discovery-keepalive-time','discovery-keepalive-timeout','cert-file','key-file','client-cert-file','client-key-file','trusted-ca-file','client-cert-auth','client-crl-file','client-cert-allowed-hostname','auto-tls','peer-cert-file','peer-key-file','peer-client-cert-file','peer-client-key-file','peer-trusted-ca-file','peer-client-cert-auth','peer-crl-file','peer-cert-allowed-cn','peer-cert-allowed-hostname','peer-auto-tls','self-signed-cert-validity','config-file','force-new-cluster','strict-reconfig-check','unsafe-no-fsync','enable-v2','experimental-enable-v2v3','proxy','version'])])"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k in ['quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','heartbeat-interval','election-timeout','snapshot-count'])",messageExpression="'extraArgs sets flags that have typed fields: %s. Use spec.etcd.quotaBackendBytes, autoCompactionMode, autoCompactionRetention, heartbeatIntervalMillis, electionTimeoutMillis or snapshotCount instead'.format([self.filter(k, k in ['quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','heartbeat-interval','election-timeout','snapshot-count'])])"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['auth-token','auth-token-ttl','backend-batch-interval','backend-batch-limit','backend-bbolt-freelist-type','bcrypt-cost','cipher-suites','tls-min-version','tls-max-version','enable-grpc-gateway','enable-log-rotation','enable-pprof','feature-gates','grpc-keepalive-interval','grpc-keepalive-min-time','grpc-keepalive-timeout','host-whitelist','initial-election-tick-advance','log-format','log-level','log-outputs','log-rotation-config-json','logger','max-concurrent-streams','max-request-bytes','max-snapshots','max-txn-ops','max-wals','metrics','pre-vote','raft-read-timeout','raft-write-timeout','socket-reuse-address','socket-reuse-port','v2-deprecation','bootstrap-defrag-threshold-megabytes','compact-hash-check-time','compaction-batch-limit','compaction-sleep-interval','corrupt-check-time','distributed-tracing-address','distributed-tracing-instance-id','distributed-tracing-sampling-rate','distributed-tracing-service-name','downgrade-check-time','enable-distributed-tracing','max-learners','memory-mlock','peer-skip-client-san-verification','snapshot-catchup-entries','warning-apply-duration','warning-unary-request-duration','watch-progress-notify-interval','experimental-bootstrap-defrag-threshold-megabytes','experimental-compact-hash-check-enabled','experimental-compact-hash-check-time','experimental-compaction-batch-limit','experimental-compaction-sleep-interval','experimental-corrupt-check-time','experimental-distributed-tracing-address','experimental-distributed-tracing-instance-id','experimental-distributed-tracing-sampling-rate','experimental-distributed-tracing-service-name','experimental-downgrade-check-time','experimental-enable-distributed-tracing','experimental-enable-lease-checkpoint','experimental-enable-lease-checkpoint-persist','experimental-initial-corrupt-check','experimental-max-learners','experimental-memory-mlock','experimental-peer-skip-client-san-verification','experimental-snapshot-catchup-entries','experimental-stop-grpc-service-on-defrag','experimental-txn-mode-write-with-shared-buffer','experimental-warning-apply-duration','experimental-warning-unary-request-duration','experimental-watch-progress-notify-interval'] || k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','listen-client-http-urls','listen-metrics-urls','initial-advertise-peer-urls','advertise-client-urls','initial-cluster','initial-cluster-state','initial-cluster-token','discovery','discovery-fallback','discovery-proxy','discovery-srv','discovery-srv-name','discovery-token','discovery-endpoints','discovery-cacert','discovery-cert','discovery-key','discovery-user','discovery-password','discovery-insecure-transport','discovery-insecure-skip-tls-verify','discovery-dial-timeout','discovery-request-timeout','discovery-keepalive-time','discovery-keepalive-timeout','cert-file','key-file','client-cert-file','client-key-file','trusted-ca-file','client-cert-auth','client-crl-file','client-cert-allowed-hostname','auto-tls','peer-cert-file','peer-key-file','peer-client-cert-file','peer-client-key-file','peer-trusted-ca-file','peer-client-cert-auth','peer-crl-file','peer-cert-allowed-cn','peer-cert-allowed-hostname','peer-auto-tls','self-signed-cert-validity','config-file','force-new-cluster','strict-reconfig-check','unsafe-no-fsync','enable-v2','experimental-enable-v2v3','proxy','version'] || k in ['quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','heartbeat-interval','election-timeout','snapshot-count'])",messageExpression="'extraArgs has unknown etcd flags: %s. Write flag names without leading dashes, as etcd 3.5 to 3.7 spell them (for example log-level or max-request-bytes)'.format([self.filter(k, !(k in ['auth-token','auth-token-ttl','backend-batch-interval','backend-batch-limit','backend-bbolt-freelist-type','bcrypt-cost','cipher-suites','tls-min-version','tls-max-version','enable-grpc-gateway','enable-log-rotation','enable-pprof','feature-gates','grpc-keepalive-interval','grpc-keepalive-min-time','grpc-keepalive-timeout','host-whitelist','initial-election-tick-advance','log-format','log-level','log-outputs','log-rotation-config-json','logger','max-concurrent-streams','max-request-bytes','max-snapshots','max-txn-ops','max-wals','metrics','pre-vote','raft-read-timeout','raft-write-timeout','socket-reuse-address','socket-reuse-port','v2-deprecation','bootstrap-defrag-threshold-megabytes','compact-hash-check-time','compaction-batch-limit','compaction-sleep-interval','corrupt-check-time','distributed-tracing-address','distributed-tracing-instance-id','distributed-tracing-sampling-rate','distributed-tracing-service-name','downgrade-check-time','enable-distributed-tracing','max-learners','memory-mlock','peer-skip-client-san-verification','snapshot-catchup-entries','warning-apply-duration','warning-unary-request-duration','watch-progress-notify-interval','experimental-bootstrap-defrag-threshold-megabytes','experimental-compact-hash-check-enabled','experimental-compact-hash-check-time','experimental-compaction-batch-limit','experimental-compaction-sleep-interval','experimental-corrupt-check-time','experimental-distributed-tracing-address','experimental-distributed-tracing-instance-id','experimental-distributed-tracing-sampling-rate','experimental-distributed-tracing-service-name','experimental-downgrade-check-time','experimental-enable-distributed-tracing','experimental-enable-lease-checkpoint','experimental-enable-lease-checkpoint-persist','experimental-initial-corrupt-check','experimental-max-learners','experimental-memory-mlock','experimental-peer-skip-client-san-verification','experimental-snapshot-catchup-entries','experimental-stop-grpc-service-on-defrag','experimental-txn-mode-write-with-shared-buffer','experimental-warning-apply-duration','experimental-warning-unary-request-duration','experimental-watch-progress-notify-interval'] || k in ['name','data-dir','wal-dir','listen-peer-urls','listen-client-urls','listen-client-http-urls','listen-metrics-urls','initial-advertise-peer-urls','advertise-client-urls','initial-cluster','initial-cluster-state','initial-cluster-token','discovery','discovery-fallback','discovery-proxy','discovery-srv','discovery-srv-name','discovery-token','discovery-endpoints','discovery-cacert','discovery-cert','discovery-key','discovery-user','discovery-password','discovery-insecure-transport','discovery-insecure-skip-tls-verify','discovery-dial-timeout','discovery-request-timeout','discovery-keepalive-time','discovery-keepalive-timeout','cert-file','key-file','client-cert-file','client-key-file','trusted-ca-file','client-cert-auth','client-crl-file','client-cert-allowed-hostname','auto-tls','peer-cert-file','peer-key-file','peer-client-cert-file','peer-client-key-file','peer-trusted-ca-file','peer-client-cert-auth','peer-crl-file','peer-cert-allowed-cn','peer-cert-allowed-hostname','peer-auto-tls','self-signed-cert-validity','config-file','force-new-cluster','strict-reconfig-check','unsafe-no-fsync','enable-v2','experimental-enable-v2v3','proxy','version'] || k in ['quota-backend-bytes','auto-compaction-mode','auto-compaction-retention','heartbeat-interval','election-timeout','snapshot-count']))])"
	// +optional
	ExtraArgs map[string]EtcdFlagValue `json:"extraArgs,omitempty"`
}

// ChartSpec customizes the render of the embedded chart.
type ChartSpec struct {
	// Values are chart values merged over the ones the operator computes, last: the platform
	// team's escape hatch (see charts/etcd-cluster/values.yaml). The chart's schema still
	// applies to the merged result. Keys with a typed field (replicas, image.repository,
	// image.tag, etcd.version, the etcd tuning, etcd.extraArgs, storage, pod placement and
	// metadata, tls, networkPolicy) and keys etcd-pilot owns (etcd.clusterToken,
	// etcd.initialClusterState, operator, managedBy, fullnameOverride, nameOverride) are
	// refused.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +optional
	Values *runtime.RawExtension `json:"values,omitempty"`

	// Source is where the chart comes from; the chart embedded in the operator when unset.
	// Whatever the source, every render must keep etcd-pilot's chart contract (a StatefulSet
	// named after the cluster with the selector labels, the etcd container's ports, the
	// membership ConfigMap, OnDelete updates, a headless Service): a render that breaks it is
	// reported in Degraded and nothing of it is applied.
	// +optional
	Source *ChartSource `json:"source,omitempty"`

	// Patches change the rendered objects after the chart renders, in order, before the
	// chart contract is checked: for what no chart value covers. `etcd-pilot render` shows
	// their result.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Patches []ChartPatch `json:"patches,omitempty"`
}

// ChartSource names a chart to render instead of the embedded one.
// +kubebuilder:validation:XValidation:rule="has(self.configMap) != has(self.oci)",message="chart.source needs exactly one of configMap and oci"
type ChartSource struct {
	// ConfigMap holds the chart as a packaged archive (the .tgz `helm package` writes) in
	// its binaryData, in the EtcdCluster's namespace. The operator re-reads it on every pass;
	// a change renders the new chart.
	// +optional
	ConfigMap *ChartConfigMapSource `json:"configMap,omitempty"`
	// OCI is a chart in an OCI registry (`helm push`), pulled with Helm's registry client
	// once per repository and version.
	// +optional
	OCI *OCIChartSource `json:"oci,omitempty"`
}

// OCIChartSource is a chart version in an OCI registry.
type OCIChartSource struct {
	// Repository is the chart's reference without its version, as `helm pull` takes it:
	// oci://HOST[:PORT]/PATH/CHART (no login in it: use pullSecret). The operator pulls under
	// its outbound policy, which its administrator sets: by default https only, and no
	// loopback, link-local or cloud metadata address.
	// +kubebuilder:validation:Pattern=`^oci://[A-Za-z0-9.-]+(:[0-9]+)?(/[^\s/:@]+)+$`
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:] ]')",message="repository must not contain control characters or spaces"
	Repository string `json:"repository"`
	// Version is the chart version to pull (its tag in the registry). Pin it: the operator
	// pulls a version once, so a tag moved later is not seen.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version"`
	// PlainHTTP reaches the registry over plain HTTP (an in-cluster registry without TLS),
	// if the operator's administrator allows plain HTTP (--allow-insecure-endpoints).
	// +optional
	PlainHTTP bool `json:"plainHTTP,omitempty"`
	// PullSecret names a kubernetes.io/dockerconfigjson Secret in the cluster's namespace
	// with credentials for the registry's host.
	// +optional
	PullSecret string `json:"pullSecret,omitempty"`
}

// ChartConfigMapSource is a packaged chart in a ConfigMap.
type ChartConfigMapSource struct {
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key of the archive in the ConfigMap's binaryData.
	// +kubebuilder:default="chart.tgz"
	// +kubebuilder:validation:MinLength=1
	// +optional
	Key string `json:"key,omitempty"`
}

// ChartPatch changes the rendered objects that Target selects, with a strategic-merge patch
// (a JSON merge patch for kinds without a strategy, such as custom resources) or an RFC 6902
// JSON patch.
// +kubebuilder:validation:XValidation:rule="has(self.strategicMerge) != has(self.json)",message="a chart patch needs exactly one of strategicMerge and json"
type ChartPatch struct {
	// Target selects the objects to patch; a patch that selects nothing is an error.
	Target PatchTarget `json:"target"`
	// StrategicMerge is a partial object merged into each target, as `kubectl patch
	// --type strategic` does.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +optional
	StrategicMerge *runtime.RawExtension `json:"strategicMerge,omitempty"`
	// JSON is an RFC 6902 JSON patch applied to each target.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +optional
	JSON []JSONPatchOperation `json:"json,omitempty"`
}

// PatchTarget selects rendered objects by kind and, optionally, name.
type PatchTarget struct {
	// Kind of the objects, such as StatefulSet.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Group of the kind; empty matches any group.
	// +optional
	Group string `json:"group,omitempty"`
	// Name of the object; empty selects every object of the kind.
	// +optional
	Name string `json:"name,omitempty"`
}

// JSONPatchOperation is one RFC 6902 operation.
// +kubebuilder:validation:XValidation:rule="!(self.op in ['move', 'copy']) || has(self.from)",message="move and copy need from"
type JSONPatchOperation struct {
	// Op is the operation.
	// +kubebuilder:validation:Enum=add;remove;replace;move;copy;test
	Op string `json:"op"`
	// Path is a JSON pointer into the object, such as /spec/template/metadata/annotations.
	// +kubebuilder:validation:Pattern=`^/.*$`
	Path string `json:"path"`
	// From is the source pointer of move and copy.
	// +optional
	From string `json:"from,omitempty"`
	// Value of add, replace and test (required there; checked when the patch is applied,
	// since CEL cannot see a field of any type): any JSON value but null (the API server
	// drops a null; remove drops a field).
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +optional
	Value *runtime.RawExtension `json:"value,omitempty"`
}

// MemberStatus is one etcd member as etcd's member list and status calls report it.
type MemberStatus struct {
	// Name of the member (the pod name).
	Name string `json:"name"`
	// ID of the member, in hexadecimal as etcdctl prints it.
	// +optional
	ID string `json:"id,omitempty"`
	// PeerURL is the member's first advertised peer URL.
	// +optional
	PeerURL string `json:"peerURL,omitempty"`
	// ClientURL is the member's first advertised client URL.
	// +optional
	ClientURL string `json:"clientURL,omitempty"`
	// Learner is true while the member is a non-voting learner.
	// +optional
	Learner bool `json:"learner,omitempty"`
	// Leader is true for the current raft leader.
	// +optional
	Leader bool `json:"leader,omitempty"`
	// Healthy is true when the member answered a status call.
	Healthy bool `json:"healthy"`
	// Version is the etcd server version the member reports.
	// +optional
	Version string `json:"version,omitempty"`
	// DBSizeBytes is the size of the member's backend database.
	// +optional
	DBSizeBytes int64 `json:"dbSizeBytes,omitempty"`
	// RaftIndex is the member's raft index.
	// +optional
	RaftIndex uint64 `json:"raftIndex,omitempty"`
}

// EtcdClusterStatus is the observed state of an etcd cluster.
type EtcdClusterStatus struct {
	// ObservedGeneration is the newest generation of the spec that a pass of the operator
	// finished on: it rendered and applied that spec and took (or waited on) the next step
	// towards it, or found that it cannot act on it and said so in Stalled. The conditions
	// describe that generation. A pass that ends in an error it retries (the API server or
	// etcd failing a call) leaves it unchanged. It does not say the cluster matches the spec:
	// Ready does (with Reconciling and Stalled saying why not).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Available, Progressing, Degraded, and Ready as their summary; Reconciling
	// and Stalled as kstatus reads them; EphemeralStorage, InsecureTransport and BackupReady where they apply.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of member pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of member pods that pass their readiness probe.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector is the label selector of the member pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Members is etcd's member list, with each member's health.
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []MemberStatus `json:"members,omitempty"`

	// Leader is the name of the leading member.
	// +optional
	Leader string `json:"leader,omitempty"`

	// LeaderID is the member ID of the leader, in hexadecimal.
	// +optional
	LeaderID string `json:"leaderID,omitempty"`

	// ClusterID is etcd's cluster ID, in hexadecimal.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// CurrentVersion is the lowest etcd version running among the members.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// TargetVersion is the version in the spec that the operator works towards.
	// +optional
	TargetVersion string `json:"targetVersion,omitempty"`

	// ClusterVersion is the cluster version etcd reports (MAJOR.MINOR.0): the protocol every
	// member speaks. etcd raises it once every member runs a newer minor; members older than it
	// cannot join, so spec.version cannot go below its minor.
	// +optional
	ClusterVersion string `json:"clusterVersion,omitempty"`

	// LegacyLogIndex is set while the members' raft logs may still hold entries written under
	// cluster version 3.5 (etcd 3.5's v2 requests), which etcd 3.7 cannot replay: the raft
	// index the log had when the cluster version rose from 3.5. The operator keeps the members
	// on 3.6 until each has taken a raft snapshot past it (proposing lease grant/revoke pairs,
	// which change no key, when the cluster is too idle to get there soon), then clears it.
	// +optional
	LegacyLogIndex uint64 `json:"legacyLogIndex,omitempty"`

	// Upgrade is the rollout under way: set while members still run an older pod template, or
	// while the cluster passes through an intermediate minor version.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// LeaderChanges counts the leader changes the operator has observed.
	// +optional
	LeaderChanges int64 `json:"leaderChanges,omitempty"`

	// ExtraKinds are the kinds beyond the built-in ones (StatefulSet, Service,
	// ServiceAccount, PodDisruptionBudget, NetworkPolicy) that the chart renders, as
	// apiVersion/Kind: the operator prunes objects of these kinds the chart stops rendering,
	// and deletes them with the cluster. Its role needs permission for them.
	// +listType=set
	// +optional
	ExtraKinds []string `json:"extraKinds,omitempty"`

	// LastLeaderChangeTime is when the operator last observed a new leader.
	// +optional
	LastLeaderChangeTime *metav1.Time `json:"lastLeaderChangeTime,omitempty"`

	// Backup is the state of the backups: the newest successful one and the schedule.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// Certificates are the certificates of spec.tls, read from their Secrets: when each
	// expires and, for those the operator issues, when it renews them.
	// +optional
	// +listType=map
	// +listMapKey=secret
	Certificates []CertificateStatus `json:"certificates,omitempty"`

	// TrustGeneration is the generation of the CA trust bundle the operator keeps (see
	// AnnotationTrustGeneration), read from the CA Secret (CASecretName); the members' pod
	// template carries it, so a change of the bundle restarts them one at a time.
	// +optional
	TrustGeneration int64 `json:"trustGeneration,omitempty"`

	// PeerTrustGeneration is the same for the peer side's own CA (PeerCASecretName), carried
	// by the pod template as AnnotationPeerTrustGeneration.
	// +optional
	PeerTrustGeneration int64 `json:"peerTrustGeneration,omitempty"`

	// ClientRevocationList is true once the revocation list of the application client
	// certificates (Secret <name>-crl, spec.tls.client.certificates) exists: from then on the
	// members read it (--client-crl-file), also after the last entry is removed.
	// +optional
	ClientRevocationList bool `json:"clientRevocationList,omitempty"`

	// CARotation says where a CA rotation stands; empty when none runs.
	// +optional
	CARotation string `json:"caRotation,omitempty"`

	// Security says what the spec asks of the transport: TLS (peer and client TLS), Partial
	// (one side only) or Plain (neither). The InsecureTransport condition says why, and how to
	// turn TLS on.
	// +optional
	Security SecurityMode `json:"security,omitempty"`

	// TLSTransition says where a switch of the client side between plain and TLS stands;
	// absent when none runs.
	// +optional
	TLSTransition *TLSTransitionStatus `json:"tlsTransition,omitempty"`

	// AuthEnabled is whether etcd's authentication was on when the operator last read it
	// (etcd's authentication status, or etcd refusing the operator as no user); absent until
	// it was read. Admission reads it: the operator's client certificate identity
	// (tls.client with clientCertAuth) cannot be removed while it is true, or, before it was
	// read, while spec.auth was set.
	// +optional
	AuthEnabled *bool `json:"authEnabled,omitempty"`

	// Restore is the latest restore of the cluster's data (spec.bootstrap or disaster
	// recovery): what was restored, and where it stands.
	// +optional
	Restore *RestoreStatus `json:"restore,omitempty"`

	// Storage is the members' volumes as the last pass read them: the size new members'
	// claims get, and each member's claim (what it asks for and what it has). Absent under
	// storage.ephemeral.
	// +optional
	Storage *StorageStatus `json:"storage,omitempty"`
}

// StorageStatus is the members' volumes.
type StorageStatus struct {
	// TemplateSize is the size in the StatefulSet's volume claim template: the size a new
	// member's claim gets. Below spec.storage.size while the members' claims are expanded;
	// the StatefulSet is re-created with the new size once every claim has it.
	// +optional
	TemplateSize string `json:"templateSize,omitempty"`
	// Members is each member pod's claim, by ordinal.
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []MemberVolumeStatus `json:"members,omitempty"`
}

// VolumeState is where a member's claim stands against spec.storage.size.
type VolumeState string

const (
	// VolumeReady : the claim's capacity is spec.storage.size or more.
	VolumeReady VolumeState = "Ready"
	// VolumeWaiting : the claim still asks for less; the operator expands it in its turn.
	VolumeWaiting VolumeState = "Waiting"
	// VolumeResizing : the claim asks for the new size; the storage grows the volume.
	VolumeResizing VolumeState = "Resizing"
	// VolumeFileSystemResizePending : the volume grew; the kubelet grows its file system
	// (offline, when the member's pod restarts, if the storage cannot do it online).
	VolumeFileSystemResizePending VolumeState = "FileSystemResizePending"
	// VolumeResizeFailed : the storage reports the resize infeasible or failing.
	VolumeResizeFailed VolumeState = "ResizeFailed"
)

// MemberVolumeStatus is one member pod's volume claim.
type MemberVolumeStatus struct {
	// Name of the member pod.
	Name string `json:"name"`
	// Requested is the size the claim asks for.
	// +optional
	Requested string `json:"requested,omitempty"`
	// Capacity is the size the claim has (its status).
	// +optional
	Capacity string `json:"capacity,omitempty"`
	// State is where the claim stands against spec.storage.size.
	// +optional
	State VolumeState `json:"state,omitempty"`
}

// UpgradeStatus is a rollout in progress.
type UpgradeStatus struct {
	// StepVersion is the version the members are moving to in this step: spec.version, or the
	// intermediate release of the next minor when spec.version is further ahead.
	// +optional
	StepVersion string `json:"stepVersion,omitempty"`
	// Member is the member being restarted onto the new pod template, if any.
	// +optional
	Member string `json:"member,omitempty"`
	// UpdatedMembers is the number of members running the new pod template.
	// +optional
	UpdatedMembers int32 `json:"updatedMembers,omitempty"`
	// PendingMembers is the number of members still running an older pod template.
	// +optional
	PendingMembers int32 `json:"pendingMembers,omitempty"`
	// Message says what the rollout does or waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// EtcdCluster is an etcd cluster run by etcd-pilot: the embedded chart renders its topology,
// the controllers keep its membership, version and health.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=etcdc,categories=etcd
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.currentVersion`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.targetVersion`,priority=1
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="Security",type=string,JSONPath=`.status.security`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Last Backup",type=date,JSONPath=`.status.backup.lastSuccessfulTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || !has(oldSelf.spec.version) || !has(self.spec.version) || !self.spec.version.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || !oldSelf.spec.version.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+$') || int(self.spec.version.split('.')[1]) >= int(oldSelf.spec.version.split('.')[1]) || (has(self.status) && has(self.status.clusterVersion) && self.status.clusterVersion.matches('^[0-9]+\\\\.[0-9]+\\\\.') && int(self.spec.version.split('.')[1]) >= int(self.status.clusterVersion.split('.')[1]))",messageExpression="'version cannot go from ' + oldSelf.spec.version + ' down to ' + self.spec.version + ': ' + (has(self.status) && has(self.status.clusterVersion) ? 'etcd already runs the cluster at version ' + self.status.clusterVersion + ' (status.clusterVersion)' : 'the cluster version etcd runs is not known yet') + '. A downgrade across minor versions needs etcd\\'s downgrade procedure, which etcd-pilot does not run; going back a minor is allowed only while an upgrade has not completed (the cluster version is still the older minor)'"
// +kubebuilder:validation:XValidation:rule="!(has(self.spec) && has(self.spec.insecure) && self.spec.insecure) || (has(oldSelf.spec) && has(oldSelf.spec.insecure) && oldSelf.spec.insecure) || (has(self.spec.tls) && has(self.spec.tls.client)) || !(has(self.status) && has(self.status.security) && self.status.security == 'TLS')",message="spec.insecure cannot be set on a cluster whose client port serves TLS by default (status.security is TLS) without spec.tls.client: it would switch clients to plain HTTP at once. As when removing tls.client: first write tls.client with acceptPlain: true (the members serve both), move your clients to plain HTTP, set spec.insecure, then remove tls.client"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.spec) && has(oldSelf.spec.tls) && has(oldSelf.spec.tls.client) && (!has(oldSelf.spec.tls.client.clientCertAuth) || oldSelf.spec.tls.client.clientCertAuth)) || (has(self.spec) && has(self.spec.tls) && has(self.spec.tls.client) && (!has(self.spec.tls.client.clientCertAuth) || self.spec.tls.client.clientCertAuth)) || ((has(self.status) && has(self.status.authEnabled)) ? !self.status.authEnabled : !(has(oldSelf.spec) && has(oldSelf.spec.auth)))",message="tls.client (with clientCertAuth) cannot be removed while etcd's authentication may be on (status.authEnabled is true, or not read yet while spec.auth is set): the operator authenticates to etcd by its client certificate, and without it etcd refuses every membership change, defragmentation and backup. Keep tls.client, set spec.auth.enabled: false, wait until status.authEnabled is false, then remove tls.client"
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec EtcdClusterSpec `json:"spec,omitempty"`
	// +optional
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}

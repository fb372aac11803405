package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupSpec schedules backups of an EtcdCluster: each run creates an EtcdBackup, which takes
// a verified snapshot from a healthy, caught-up member and streams it to the destination.
type BackupSpec struct {
	// Schedule is a cron schedule in the standard five-field syntax (minute hour day-of-month
	// month day-of-week), or a descriptor such as @hourly or @daily, read in TimeZone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="schedule must not carry a time zone (CRON_TZ= or TZ=); use backup.timeZone"
	// +kubebuilder:validation:XValidation:rule="self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly|every [0-9].*)$') || self.split(' ').filter(f, f != '').size() == 5",message="schedule must be five cron fields (minute hour day-of-month month day-of-week, for example '0 3 * * *') or a descriptor such as @daily, @hourly or '@every 6h'"
	Schedule string `json:"schedule"`

	// TimeZone is the IANA time zone the schedule is read in (for example Europe/Berlin);
	// default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Suspend stops creating scheduled backups; backups already running finish.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Retention decides which scheduled backups are kept. Old backups (their objects and their
	// EtcdBackup objects) are deleted only after a newer backup succeeded, and the newest
	// successful backup is always kept.
	// +kubebuilder:default={}
	// +optional
	Retention BackupRetention `json:"retention,omitempty"`

	// Destination is where the snapshots are stored.
	Destination BackupDestination `json:"destination"`
}

// BackupRetention bounds how many scheduled backups are kept, by count and by age. A backup is
// deleted when either bound says so.
type BackupRetention struct {
	// MaxCount is the number of successful scheduled backups kept.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxCount *int32 `json:"maxCount,omitempty"`

	// MaxAge deletes successful scheduled backups older than this (for example 168h); empty
	// keeps them whatever their age (up to MaxCount).
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// BackupDestination is where a snapshot is stored: exactly one of S3 and
// PersistentVolumeClaim.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.persistentVolumeClaim)",message="destination needs exactly one of s3 and persistentVolumeClaim"
type BackupDestination struct {
	// S3 stores snapshots in an S3-compatible object store.
	// +optional
	S3 *S3Destination `json:"s3,omitempty"`

	// PersistentVolumeClaim stores snapshots as files on a claim in the cluster's namespace.
	// A short-lived pod running the operator's image mounts it and streams the snapshot.
	// +optional
	PersistentVolumeClaim *PVCDestination `json:"persistentVolumeClaim,omitempty"`
}

// S3Destination is a bucket of an S3-compatible object store.
type S3Destination struct {
	// Endpoint is the store's URL, for example https://s3.eu-central-1.amazonaws.com or
	// http://minio.storage.svc:9000. The operator connects to it under its outbound policy,
	// which its administrator sets: by default https only, and no loopback, link-local or
	// cloud metadata address (a backup to a refused endpoint fails with EndpointRefused).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#]+/?$')",message="endpoint must be an http:// or https:// URL with a host (and optional port) and no path, for example https://s3.eu-central-1.amazonaws.com"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="endpoint must not carry a user name or password: the store's credentials come from credentialsSecret"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:] ]')",message="endpoint must not contain control characters or spaces"
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://(\\\\[[0-9A-Fa-f:.]+\\\\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?/?$')",message="endpoint's host must be a DNS name or an IP address (an IPv6 address in brackets), with an optional port"
	Endpoint string `json:"endpoint"`

	// Bucket holds the snapshots; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// Prefix is prepended to every object key (for example etcd/prod/); default
	// "<namespace>/<cluster name>/".
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket; default us-east-1.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// CredentialsSecret names a Secret in the cluster's namespace with the keys accessKeyID and
	// secretAccessKey (and optionally sessionToken). The operator reads only this Secret.
	CredentialsSecret SecretReference `json:"credentialsSecret"`

	// CABundle is a PEM bundle of certificate authorities to trust for the endpoint, besides
	// the system's.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	CABundle string `json:"caBundle,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PVCDestination is a folder on a PersistentVolumeClaim in the cluster's namespace.
type PVCDestination struct {
	// ClaimName is the claim; it must exist and be mountable by a pod (ReadWriteOnce is
	// enough: one backup pod mounts it at a time).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// Path is the folder on the claim; default "<cluster name>/".
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="path must be relative to the claim's root and must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`
}

// EtcdBackupSpec names the cluster to back up.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EtcdBackup's spec cannot change; create a new EtcdBackup"
type EtcdBackupSpec struct {
	// ClusterName is the EtcdCluster in the same namespace to back up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ClusterName string `json:"clusterName"`

	// Destination overrides the cluster's spec.backup.destination; one of the two is needed.
	// +optional
	Destination *BackupDestination `json:"destination,omitempty"`
}

// BackupPhase is where an EtcdBackup is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type BackupPhase string

const (
	// BackupPending : not started yet (waiting for a healthy member or the destination).
	BackupPending BackupPhase = "Pending"
	// BackupRunning : the snapshot is being streamed.
	BackupRunning BackupPhase = "Running"
	// BackupSucceeded : the object is stored and verified.
	BackupSucceeded BackupPhase = "Succeeded"
	// BackupFailed : the backup failed for good; Conditions say why. Nothing verified was
	// stored under its location.
	BackupFailed BackupPhase = "Failed"
)

// EtcdBackupStatus is the outcome of a backup.
type EtcdBackupStatus struct {
	// Phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// StartTime is when the snapshot started streaming (the latest attempt).
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the backup succeeded or failed for good.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Attempts counts the attempts made.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// Size of the stored snapshot in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`

	// SHA256 of the stored object (hex), computed while streaming.
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// Revision is the member's etcd revision when the snapshot was requested: the snapshot
	// holds every write up to it, and may hold a few more that committed before the member
	// began the snapshot (a restore reads the exact revision from the snapshot itself, in the
	// cluster's status.restore.revision).
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// EtcdVersion is the version of the member that served the snapshot.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`

	// ClusterID is the etcd cluster ID the snapshot belongs to (hex).
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// Member is the member the snapshot was taken from.
	// +optional
	Member string `json:"member,omitempty"`

	// MemberID is the etcd member ID (hexadecimal) of Member. The snapshot is streamed only
	// when the member at Member's endpoint answers as this member.
	// +optional
	MemberID string `json:"memberID,omitempty"`

	// CommittedIndex is the leader's raft committed index, read when the backup started (after
	// startTime). Member had applied at least this index when its snapshot began, so the
	// snapshot holds every write etcd acknowledged before startTime.
	// +optional
	CommittedIndex int64 `json:"committedIndex,omitempty"`

	// Location is where the snapshot is stored: s3://bucket/key or
	// pvc://claim/path.
	// +optional
	Location string `json:"location,omitempty"`

	// Conditions: Complete (True once succeeded; False with the reason while pending,
	// running or failed); Reconciling (True while pending or running) and Stalled (True once
	// failed for good) as kstatus reads them.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdBackup is one snapshot of an EtcdCluster, stored outside the cluster and verified.
// Scheduled backups are created by the cluster's spec.backup; create one by hand for a
// one-shot backup. Deleting an EtcdBackup by hand leaves its stored object in place;
// retention deletes both.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=etcdb,categories=etcd
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EtcdBackupSpec `json:"spec"`
	// +optional
	Status EtcdBackupStatus `json:"status,omitempty"`
}

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}

// BackupStatus is the backup side of an EtcdCluster's status.
type BackupStatus struct {
	// LastSuccessfulTime is when the newest successful backup completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// LastSuccessfulName is the EtcdBackup of the newest successful backup.
	// +optional
	LastSuccessfulName string `json:"lastSuccessfulName,omitempty"`

	// LastSuccessfulRevision is the etcd revision of the newest successful backup.
	// +optional
	LastSuccessfulRevision int64 `json:"lastSuccessfulRevision,omitempty"`

	// LastScheduleTime is the last schedule time a backup was created for.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// NextScheduleTime is when the schedule creates the next backup.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
}

// Backup condition type and reasons.
const (
	// ConditionBackupReady is True while the newest scheduled backup succeeded (and, with a
	// schedule, it is not older than two schedule periods); False with the reason otherwise.
	ConditionBackupReady = "BackupReady"
	// ConditionComplete is an EtcdBackup's condition: True once it succeeded, False once it
	// failed for good.
	ConditionComplete = "Complete"

	// ReasonBackupSucceeded : the newest backup succeeded and was verified.
	ReasonBackupSucceeded = "BackupSucceeded"
	// ReasonBackupPending : no backup has completed yet.
	ReasonBackupPending = "BackupPending"
	// ReasonBackupRunning : a backup is streaming.
	ReasonBackupRunning = "BackupRunning"
	// ReasonBackupFailed : the newest backup failed; the message says why.
	ReasonBackupFailed = "BackupFailed"
	// ReasonInvalidSchedule : spec.backup.schedule or timeZone cannot be read.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonBackupSuspended : spec.backup.suspend is set.
	ReasonBackupSuspended = "BackupSuspended"
	// ReasonBackupOverdue : the newest successful backup is older than two schedule periods.
	ReasonBackupOverdue = "BackupOverdue"
	// ReasonWaitingForBackup : a minor-version upgrade waits for the backup taken before it.
	ReasonWaitingForBackup = "WaitingForBackup"

	// ReasonClusterNotFound : the EtcdBackup names a cluster that does not exist.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonNoDestination : neither the EtcdBackup nor its cluster names a destination.
	ReasonNoDestination = "NoDestination"
	// ReasonCredentialsInvalid : the credentials Secret is missing or lacks its keys.
	ReasonCredentialsInvalid = "CredentialsInvalid"
	// ReasonEndpointRefused : the operator's outbound policy refuses the destination's
	// endpoint (an address it may not reach, plain HTTP): no connection was made, and
	// trying again would be refused again. The operator's administrator decides the policy
	// (--allowed-endpoints, --allow-insecure-endpoints).
	ReasonEndpointRefused = "EndpointRefused"
	// ReasonNoHealthyMember : no member is healthy and caught up to take a snapshot from.
	ReasonNoHealthyMember = "NoHealthyMember"
	// ReasonSnapshotFailed : the member did not serve the snapshot.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonIntegrityCheckFailed : the snapshot's trailing hash did not match; nothing was
	// kept.
	ReasonIntegrityCheckFailed = "IntegrityCheckFailed"
	// ReasonUploadFailed : the destination refused the object.
	ReasonUploadFailed = "UploadFailed"
	// ReasonSnapshotStored : the snapshot is stored and verified.
	ReasonSnapshotStored = "SnapshotStored"
)

// Labels of EtcdBackups that the operator creates.
const (
	// LabelBackupSchedule marks an EtcdBackup that spec.backup's schedule created; retention
	// applies only to those.
	LabelBackupSchedule = "etcdpilot.io/scheduled"
	// LabelBackupBeforeUpgrade marks the backup taken before a minor-version upgrade; its
	// value is the version upgraded to.
	LabelBackupBeforeUpgrade = "etcdpilot.io/before-upgrade"
)

func init() {
	for r, e := range map[string]Effect{
		ReasonWaitingForBackup: EffectProgresses,
		ReasonBackupFailed:     EffectDegrades,
		ReasonInvalidSchedule:  EffectDegrades,
		ReasonBackupOverdue:    EffectDegrades,
	} {
		ReasonEffects[r] = e
	}
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootstrapSpec says how a new cluster gets its first data. Without it the founding members
// start empty.
// +kubebuilder:validation:XValidation:rule="has(self.fromBackup) != has(self.fromObject)",message="bootstrap needs exactly one of fromBackup (an EtcdBackup in this namespace) and fromObject (a snapshot object in S3)"
type BootstrapSpec struct {
	// FromBackup restores every founding member from a Succeeded EtcdBackup in this namespace
	// (of any cluster). Its etcd version and the cluster's must be a supported pair (the same
	// minor, or the cluster one minor newer); the operator checks that before anything starts.
	// +optional
	FromBackup *BackupReference `json:"fromBackup,omitempty"`

	// FromObject restores every founding member from a snapshot object in S3-compatible
	// storage, such as one an EtcdBackup stored, or one `etcdctl snapshot save` took.
	// +optional
	FromObject *SnapshotObject `json:"fromObject,omitempty"`
}

// BackupReference names an EtcdBackup in the cluster's namespace.
type BackupReference struct {
	// Name of the EtcdBackup.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SnapshotObject is one etcd snapshot in S3-compatible storage.
type SnapshotObject struct {
	// S3 is the bucket and the credentials (the destination's prefix is not used: Key is the
	// whole object name).
	S3 S3Destination `json:"s3"`

	// Key is the object's name in the bucket.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`

	// EtcdVersion is the version of etcd that took the snapshot (MAJOR.MINOR.PATCH); it must
	// be the cluster's minor or the one before it.
	// +kubebuilder:validation:XValidation:rule="self.matches('^3\\\\.(5|6|7)\\\\.[0-9]+$')",message="etcdVersion must be the etcd release that took the snapshot, such as 3.6.16 (etcd 3.5, 3.6 or 3.7)"
	EtcdVersion string `json:"etcdVersion"`

	// SHA256 is the object's expected sha256 (hex); when set, a restore refuses an object
	// whose content does not match.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +optional
	SHA256 string `json:"sha256,omitempty"`
}

// DisasterRecoveryPolicy says what the operator does when quorum is lost for good.
// +kubebuilder:validation:Enum=Manual;FromLatestBackup
type DisasterRecoveryPolicy string

const (
	// DisasterRecoveryManual: the operator stops and says exactly what to run.
	DisasterRecoveryManual DisasterRecoveryPolicy = "Manual"
	// DisasterRecoveryFromLatestBackup: the operator re-forms the cluster from the newest
	// verified backup; writes after that backup are lost.
	DisasterRecoveryFromLatestBackup DisasterRecoveryPolicy = "FromLatestBackup"
)

// DisasterRecoverySpec configures what happens when a majority of the members lost their data,
// so quorum can never come back. When members are only down (their data is intact) the
// operator never restores: it waits for them.
type DisasterRecoverySpec struct {
	// Policy is Manual (the default: stop and say what to run) or FromLatestBackup (re-form
	// the cluster from the newest Succeeded EtcdBackup of this cluster, losing the writes made
	// after it).
	// +kubebuilder:default=Manual
	// +optional
	Policy DisasterRecoveryPolicy `json:"policy,omitempty"`

	// After is how long quorum must have been lost, with a majority's data gone, before the
	// operator restores (FromLatestBackup) or reports that it must be done (Manual).
	// +kubebuilder:default="1m"
	// +optional
	After *metav1.Duration `json:"after,omitempty"`
}

// RestorePhase is where a restore stands.
type RestorePhase string

const (
	// RestoreStopping: the members are being stopped (disaster recovery).
	RestoreStopping RestorePhase = "Stopping"
	// RestoreRestoring: each founding member's data directory is being restored.
	RestoreRestoring RestorePhase = "Restoring"
	// RestoreRestored: every founding member's data was restored; the cluster forms from it.
	RestoreRestored RestorePhase = "Restored"
	// RestoreFailed: the restore cannot go on; the Degraded condition says why.
	RestoreFailed RestorePhase = "Failed"
)

// RestoreStatus is the restore of this cluster's data, from spec.bootstrap or by disaster
// recovery. It stays after the restore as a record of what was restored.
type RestoreStatus struct {
	// ID names this restore: the restored members' cluster token ends in it, so the restored
	// cluster has a new cluster ID, and data set aside by it is named after it.
	ID string `json:"id"`
	// Cause is Bootstrap or DisasterRecovery.
	Cause string `json:"cause"`
	// Phase is Stopping, Restoring, Restored or Failed.
	Phase RestorePhase `json:"phase"`
	// Backup is the EtcdBackup restored, if any.
	// +optional
	Backup string `json:"backup,omitempty"`
	// Location is the snapshot object restored.
	Location string `json:"location"`
	// SHA256 is the snapshot's expected sha256, when known.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Revision is the etcd revision of the snapshot: the backup's recorded revision while the
	// restore runs, then the exact revision the restore pods read from the snapshot.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// SnapshotTime is when the snapshot was taken, when known.
	// +optional
	SnapshotTime *metav1.Time `json:"snapshotTime,omitempty"`
	// EtcdVersion is the version of etcd that took the snapshot.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// StartTime is when the restore began.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when every founding member's data was restored.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Attempts counts restore pods that failed and were retried.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// Message says what the restore does, waits for, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// Causes of a restore.
const (
	RestoreCauseBootstrap        = "Bootstrap"
	RestoreCauseDisasterRecovery = "DisasterRecovery"
)

// Reasons of restore and disaster recovery.
const (
	// ReasonRestoring : founding members' data directories are being restored from a snapshot.
	ReasonRestoring = "Restoring"
	// ReasonRestoreFailed : a restore cannot go on (a source that cannot be read or fails its
	// checks, a version pair etcd does not support); the message says what to fix.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonDisasterRecoveryRequired : quorum is lost and cannot come back (a majority of
	// members lost their data) and the policy is Manual; the message says what to run.
	ReasonDisasterRecoveryRequired = "DisasterRecoveryRequired"
	// ReasonRecoveringFromBackup : quorum could not come back; the cluster is being re-formed
	// from the newest backup, losing the writes after it.
	ReasonRecoveringFromBackup = "RecoveringFromBackup"
	// ReasonNoBackupToRestore : quorum cannot come back and no Succeeded backup exists.
	ReasonNoBackupToRestore = "NoBackupToRestore"
	// ReasonRestored : the event of a finished restore.
	ReasonRestored = "Restored"
)

func init() {
	for r, e := range map[string]Effect{
		ReasonRestoring:                EffectProgresses,
		ReasonRecoveringFromBackup:     EffectProgresses,
		ReasonRestored:                 EffectProgresses,
		ReasonRestoreFailed:            EffectDegrades,
		ReasonDisasterRecoveryRequired: EffectDegrades,
		ReasonNoBackupToRestore:        EffectDegrades,
	} {
		ReasonEffects[r] = e
	}
}

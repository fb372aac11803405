package backup

import (
	"path"
	"strings"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Where stored snapshots are, and what reads them: the layout the backup controller writes
// and a restore reads.

// Keys of the S3 credentials Secret.
const (
	SecretKeyAccessKeyID     = "accessKeyID"
	SecretKeySecretAccessKey = "secretAccessKey"
	SecretKeySessionToken    = "sessionToken"
)

// ClaimMountPath is where a backup claim is mounted in the backup pod (and, read-only, in a
// restore pod).
const ClaimMountPath = "/backup"

// S3Prefix is the key prefix of a cluster's backups: the destination's, or
// "<namespace>/<cluster>".
func S3Prefix(ns, cluster string, d *v1alpha1.S3Destination) string {
	if d.Prefix != "" {
		return d.Prefix
	}
	return ns + "/" + cluster
}

// ObjectKey is the object key (relative to the prefix) of an EtcdBackup's snapshot.
func ObjectKey(backupName string) string { return backupName + ".db" }

// ClaimPath is the file of an EtcdBackup's snapshot on a claim destination, relative to the
// claim's root.
// The path stays under the root whatever d.Path holds: admission refuses a path with "..",
// but an object stored before that rule existed may carry one, and the snapshot must not be
// written (or a restore read) outside the claim's root.
func ClaimPath(cluster string, d *v1alpha1.PVCDestination, backupName string) string {
	dir := strings.TrimPrefix(path.Clean("/"+d.Path), "/")
	if dir == "" {
		dir = cluster
	}
	return path.Join(dir, ObjectKey(backupName))
}

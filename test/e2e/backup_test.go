package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/minio"
)

// s3Backups creates the credentials Secret for a MinIO server and returns a backup spec that
// stores there on schedule.
func s3Backups(t testing.TB, ns string, srv *minio.Server, schedule string, keep int32) *v1alpha1.BackupSpec {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		StringData: map[string]string{"accessKeyID": srv.AccessKey, "secretAccessKey": srv.SecretKey}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.BackupSpec{
		Schedule:  schedule,
		Retention: v1alpha1.BackupRetention{MaxCount: ptr.To(keep)},
		Destination: v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
			Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "etcd/" + ns,
			CredentialsSecret: v1alpha1.SecretReference{Name: sec.Name},
		}},
	}
}

func backupsOf(t testing.TB, ns string) []v1alpha1.EtcdBackup {
	t.Helper()
	list := &v1alpha1.EtcdBackupList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// verifyObject downloads an object and checks it is an intact etcd snapshot whose SHA-256 is
// the one the EtcdBackup records.
func verifyObject(t testing.TB, srv *minio.Server, key string, b v1alpha1.EtcdBackup) {
	t.Helper()
	obj, err := srv.Client(t).GetObject(context.Background(), srv.Bucket, key, miniogo.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	v := backup.NewVerifier(obj)
	if _, err := io.Copy(h, v); err != nil {
		t.Fatalf("object %s is not an intact etcd snapshot: %v", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != b.Status.SHA256 || v.Size() != b.Status.Size {
		t.Fatalf("object %s: sha256 %s, %d bytes; EtcdBackup %s records %s, %d bytes", key, got, v.Size(), b.Name, b.Status.SHA256, b.Status.Size)
	}
}

// A schedule with retention 3 under write load: every backup is a verified snapshot of a
// follower, retention leaves exactly three objects (and three EtcdBackups), each verified
// against its recorded hash, and the cluster's status shows the newest. The schedule runs
// every 10 seconds rather than every minute so the scenario takes one minute, not five; the
// path is the same.
func TestScheduledBackupsToS3KeepThreeVerified(t *testing.T) {
	srv := minio.Start(t)
	ns := namespace(t)
	c := createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)), Backup: s3Backups(t, ns, srv, "@every 10s", 3)})
	w := startWriter(t, ns, 3)
	s := startSampler(t, ns)

	var succeeded map[string]bool
	eventually(t, 3*time.Minute, "five scheduled backups succeeded and retention kept three", func() error {
		succeeded = map[string]bool{}
		var kept []string
		for _, b := range backupsOf(t, ns) {
			switch b.Status.Phase {
			case v1alpha1.BackupSucceeded:
				succeeded[b.Name] = true
				kept = append(kept, b.Name)
			case v1alpha1.BackupFailed:
				return fmt.Errorf("backup %s failed: %v", b.Name, b.Status.Conditions)
			}
		}
		st := getCluster(t, ns).Status.Backup
		if st == nil || st.LastScheduleTime == nil {
			return fmt.Errorf("status.backup %+v", st)
		}
		// Five schedule times passed since the first: at least five backups were made.
		if first := c.CreationTimestamp.Add(10 * time.Second); st.LastScheduleTime.Sub(first) < 40*time.Second {
			return fmt.Errorf("last schedule time %s", st.LastScheduleTime)
		}
		if len(kept) != 3 {
			return fmt.Errorf("%d successful backups kept: %v", len(kept), kept)
		}
		return nil
	})
	w.finish(t, ns, 3)
	s.finish(t)

	var keys []string
	for obj := range srv.Client(t).ListObjects(context.Background(), srv.Bucket, miniogo.ListObjectsOptions{Prefix: "etcd/" + ns + "/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	bs := backupsOf(t, ns)
	if len(keys) != 3 || len(bs) != 3 {
		t.Fatalf("%d objects (%v) and %d EtcdBackups remain, want 3 of each", len(keys), keys, len(bs))
	}
	for _, b := range bs {
		key := "etcd/" + ns + "/" + b.Name + ".db"
		if b.Status.Location != "s3://"+srv.Bucket+"/"+key {
			t.Errorf("%s location %q, want s3://%s/%s", b.Name, b.Status.Location, srv.Bucket, key)
		}
		verifyObject(t, srv, key, b)
		if b.Status.Revision <= 1 || !strings.HasPrefix(b.Status.EtcdVersion, "3.") || b.Status.Member == "" {
			t.Errorf("%s status %+v", b.Name, b.Status)
		}
	}
	got := getCluster(t, ns)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionBackupReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || got.Status.Backup.LastSuccessfulName == "" {
		t.Fatalf("BackupReady %+v, status.backup %+v", ready, got.Status.Backup)
	}
	t.Logf("kept %v", keys)
}

// A backup whose destination refuses the credentials fails with a clear reason, and the
// cluster's BackupReady and Degraded say so; nothing is stored.
func TestBackupWithWrongCredentialsFailsClearly(t *testing.T) {
	srv := minio.Start(t)
	ns := namespace(t)
	spec := s3Backups(t, ns, srv, "@every 10s", 3)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong"},
		StringData: map[string]string{"accessKeyID": srv.AccessKey, "secretAccessKey": "not-the-secret"}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	spec.Destination.S3.CredentialsSecret.Name = "wrong"
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(1)), Backup: spec}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "BackupReady False with BackupFailed, and Degraded", func() error {
		got := getCluster(t, ns)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionBackupReady)
		degr := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded)
		if ready == nil || ready.Reason != v1alpha1.ReasonBackupFailed || degr == nil || degr.Reason != v1alpha1.ReasonBackupFailed {
			return fmt.Errorf("BackupReady %+v, Degraded %+v", ready, degr)
		}
		if !strings.Contains(ready.Message, "UploadFailed") {
			return fmt.Errorf("BackupReady message %q does not name the failure", ready.Message)
		}
		return nil
	})
	for obj := range srv.Client(t).ListObjects(context.Background(), srv.Bucket, miniogo.ListObjectsOptions{Recursive: true}) {
		t.Errorf("object %s stored with wrong credentials", obj.Key)
	}
}

// A backup to the cloud metadata address is refused by the operator's outbound policy, which
// the suite leaves at its default there (it allows only 127.0.0.0/8 and plain HTTP, for its
// MinIO): the backup fails with EndpointRefused at once, and the cluster says so.
func TestBackupToTheMetadataAddressIsRefused(t *testing.T) {
	ns := namespace(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		StringData: map[string]string{"accessKeyID": "a", "secretAccessKey": "s"}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	spec := &v1alpha1.BackupSpec{Schedule: "@every 10s", Destination: v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
		Endpoint: "http://169.254.169.254", Bucket: "latest", CredentialsSecret: v1alpha1.SecretReference{Name: sec.Name}}}}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(1)), Backup: spec}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "BackupReady False with BackupFailed naming EndpointRefused", func() error {
		got := getCluster(t, ns)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionBackupReady)
		if ready == nil || ready.Reason != v1alpha1.ReasonBackupFailed {
			return fmt.Errorf("BackupReady %+v", ready)
		}
		if !strings.Contains(ready.Message, v1alpha1.ReasonEndpointRefused) {
			return fmt.Errorf("BackupReady message %q does not name the refusal", ready.Message)
		}
		return nil
	})
	for _, b := range backupsOf(t, ns) {
		cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionComplete)
		if b.Status.Phase == v1alpha1.BackupFailed && (cond == nil || cond.Reason != v1alpha1.ReasonEndpointRefused ||
			!strings.Contains(cond.Message, "refused by the operator's outbound policy") || b.Status.Attempts > 1) {
			t.Errorf("EtcdBackup %s: attempts %d, Complete %+v", b.Name, b.Status.Attempts, cond)
		}
	}
}

// claimFolder is the host folder of a bound claim's volume on the local cluster.
func claimFolder(t testing.TB, ns, name string) string {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	t.Fatalf("volume %s has no local folder", pv.Name)
	return ""
}

// A one-shot EtcdBackup to a volume claim, under write load: a pod of the operator's image
// mounts the claim, streams the snapshot of a follower into it and reports the result in its
// termination message; the file on the claim is an intact snapshot with the recorded hash, and
// the pod is gone afterwards.
func TestOneShotBackupToAClaim(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	w := startWriter(t, ns, 3)
	createClaim(t, ns, "backups")
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "etcd", Destination: &v1alpha1.BackupDestination{
			PersistentVolumeClaim: &v1alpha1.PVCDestination{ClaimName: "backups", Path: "snapshots"}}}}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the backup succeeded", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		switch b.Status.Phase {
		case v1alpha1.BackupSucceeded:
			return nil
		case v1alpha1.BackupFailed:
			t.Fatalf("backup failed: %+v", b.Status.Conditions)
		}
		return fmt.Errorf("phase %q: %+v", b.Status.Phase, b.Status.Conditions)
	})
	w.finish(t, ns, 3)
	if b.Status.Location != "pvc://backups/snapshots/by-hand.db" || b.Status.Revision <= 1 || b.Status.Member == "" {
		t.Fatalf("status %+v", b.Status)
	}
	f, err := os.Open(filepath.Join(claimFolder(t, ns, "backups"), "snapshots", "by-hand.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	v := backup.NewVerifier(f)
	if _, err := io.Copy(h, v); err != nil {
		t.Fatalf("the file on the claim is not an intact snapshot: %v", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != b.Status.SHA256 || v.Size() != b.Status.Size {
		t.Fatalf("file sha256 %s (%d bytes), status %s (%d bytes)", got, v.Size(), b.Status.SHA256, b.Status.Size)
	}
	eventually(t, time.Minute, "the backup pod is deleted", func() error {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"etcdpilot.io/backup": b.Name}); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d backup pods remain", len(pods.Items))
		}
		return nil
	})
}

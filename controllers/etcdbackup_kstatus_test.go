package controllers

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// TestKstatusReadsTheBackupAsTheOperatorMeansIt: an EtcdBackup is InProgress while pending or
// running, Current once stored, Failed once it failed for good.
func TestKstatusReadsTheBackupAsTheOperatorMeansIt(t *testing.T) {
	r := &EtcdBackupReconciler{}
	gvk := v1alpha1.GroupVersion.WithKind("EtcdBackup")
	for _, tc := range []struct {
		name string
		do   func(b *v1alpha1.EtcdBackup)
		want kstatus.Status
	}{
		{"created", func(*v1alpha1.EtcdBackup) {}, kstatus.CurrentStatus}, // no status yet: kstatus cannot tell
		{"pending", func(b *v1alpha1.EtcdBackup) {
			_, _ = r.pending(b, b.CreationTimestamp.Time, v1alpha1.ReasonNoHealthyMember, "no member answered")
		}, kstatus.InProgressStatus},
		{"running", func(b *v1alpha1.EtcdBackup) {
			r.running(b, b.CreationTimestamp.Time, backupplan.Source{Member: etcd.Member{ID: 1, Name: "etcd-0"}}, "s3://b/k")
		}, kstatus.InProgressStatus},
		{"retrying", func(b *v1alpha1.EtcdBackup) {
			r.running(b, b.CreationTimestamp.Time, backupplan.Source{Member: etcd.Member{ID: 1, Name: "etcd-0"}}, "s3://b/k")
			_, _ = r.retry(b, b.CreationTimestamp.Time, v1alpha1.ReasonUploadFailed, "connection reset")
		}, kstatus.InProgressStatus},
		{"failed", func(b *v1alpha1.EtcdBackup) {
			_, _ = r.fail(b, b.CreationTimestamp.Time, v1alpha1.ReasonCredentialsInvalid, "Secret ns/s3 lacks accessKeyID")
		}, kstatus.FailedStatus},
		{"succeeded", func(b *v1alpha1.EtcdBackup) {
			r.running(b, b.CreationTimestamp.Time, backupplan.Source{Member: etcd.Member{ID: 1, Name: "etcd-0"}}, "s3://b/k")
			r.succeed(b, backupReport(), &v1alpha1.EtcdCluster{})
		}, kstatus.CurrentStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Generation: 1, CreationTimestamp: metav1.Now()}}
			tc.do(b)
			if res := testutil.KStatus(t, b, gvk); res.Status != tc.want {
				t.Fatalf("kstatus %s (%s), want %s; conditions %+v", res.Status, res.Message, tc.want, b.Status.Conditions)
			}
		})
	}
}

func backupReport() backup.Report {
	return backup.Report{Size: 20480, SHA256: "ab", Revision: 42, Version: "3.6.16", Member: "etcd-0", Location: "s3://b/k"}
}

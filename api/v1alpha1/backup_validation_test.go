package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func s3Dest() v1alpha1.BackupDestination {
	return v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
		Endpoint: "https://s3.example", Bucket: "backups",
		CredentialsSecret: v1alpha1.SecretReference{Name: "s3-credentials"},
	}}
}

func TestBackupSpec(t *testing.T) {
	backup := func(edit func(*v1alpha1.BackupSpec)) func(*v1alpha1.EtcdClusterSpec) {
		return func(s *v1alpha1.EtcdClusterSpec) {
			b := &v1alpha1.BackupSpec{Schedule: "0 3 * * *", Destination: s3Dest()}
			edit(b)
			s.Backup = b
		}
	}
	schedule := []string{"spec.backup.schedule", "five cron fields"}
	runCreateCases(t, []createCase{
		{name: "daily at 3 accepted", spec: backup(func(*v1alpha1.BackupSpec) {})},
		{name: "descriptor accepted", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "@hourly" })},
		{name: "every accepted", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "@every 6h" })},
		{name: "every minute accepted", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "*/1 * * * *" })},
		{name: "claim accepted", spec: backup(func(b *v1alpha1.BackupSpec) {
			b.Destination = v1alpha1.BackupDestination{PersistentVolumeClaim: &v1alpha1.PVCDestination{ClaimName: "backups", Path: "prod/etcd"}}
		})},
		{name: "six fields refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "0 0 3 * * *" }), wantErr: schedule},
		{name: "words refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "every night" }), wantErr: schedule},
		{name: "time zone in schedule refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Schedule = "CRON_TZ=UTC 0 3 * * *" }),
			wantErr: []string{"spec.backup.schedule", "backup.timeZone"}},
		{name: "no destination refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination = v1alpha1.BackupDestination{} }),
			wantErr: []string{"spec.backup.destination", "exactly one of s3 and persistentVolumeClaim"}},
		{name: "two destinations refused", spec: backup(func(b *v1alpha1.BackupSpec) {
			b.Destination.PersistentVolumeClaim = &v1alpha1.PVCDestination{ClaimName: "backups"}
		}), wantErr: []string{"exactly one of s3 and persistentVolumeClaim"}},
		{name: "endpoint with path refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://s3.example/bucket" }),
			wantErr: []string{"spec.backup.destination.s3.endpoint", "no path"}},
		{name: "endpoint without scheme refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "s3.example:9000" }),
			wantErr: []string{"spec.backup.destination.s3.endpoint", "http:// or https://"}},
		// Admission checks the URL's form; where it may lead is the operator's outbound policy,
		// decided by its administrator at run time.
		{name: "in-cluster endpoint over http with a port accepted", spec: backup(func(b *v1alpha1.BackupSpec) {
			b.Destination.S3.Endpoint = "http://minio.storage.svc.cluster.local:9000/"
		})},
		{name: "IPv6 endpoint accepted", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://[fd00::5]:9000" })},
		{name: "IPv4 endpoint accepted", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://10.0.0.5" })},
		{name: "endpoint with a login refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://key:secret@s3.example" }),
			wantErr: []string{"spec.backup.destination.s3.endpoint", "must not carry a user name or password"}},
		{name: "endpoint with a newline refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://s3.example\n" }),
			wantErr: []string{"spec.backup.destination.s3.endpoint", "control characters or spaces"}},
		{name: "endpoint with a host that is no name refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Destination.S3.Endpoint = "https://s3.example%2F..:9000" }),
			wantErr: []string{"spec.backup.destination.s3.endpoint", "must be a DNS name or an IP address"}},
		{name: "absolute claim path refused", spec: backup(func(b *v1alpha1.BackupSpec) {
			b.Destination = v1alpha1.BackupDestination{PersistentVolumeClaim: &v1alpha1.PVCDestination{ClaimName: "backups", Path: "/etc"}}
		}), wantErr: []string{"persistentVolumeClaim.path", "relative"}},
		{name: "claim path escaping refused", spec: backup(func(b *v1alpha1.BackupSpec) {
			b.Destination = v1alpha1.BackupDestination{PersistentVolumeClaim: &v1alpha1.PVCDestination{ClaimName: "backups", Path: "a/../../b"}}
		}), wantErr: []string{"persistentVolumeClaim.path", "'..'"}},
		{name: "max count 0 refused", spec: backup(func(b *v1alpha1.BackupSpec) { b.Retention.MaxCount = ptr.To(int32(0)) }),
			wantErr: []string{"spec.backup.retention.maxCount"}},
	})
}

func TestBackupRetentionDefault(t *testing.T) {
	ns := env.Namespace(t)
	ec := newCluster(ns, "retention", func(s *v1alpha1.EtcdClusterSpec) {
		s.Backup = &v1alpha1.BackupSpec{Schedule: "@daily", Destination: s3Dest()}
	})
	if err := env.Client.Create(reqCtx(t), ec); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.EtcdCluster{}
	if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(ec), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Backup.Retention.MaxCount == nil || *got.Spec.Backup.Retention.MaxCount != 7 {
		t.Errorf("spec.backup.retention.maxCount = %v, want the default 7", ptrString(got.Spec.Backup.Retention.MaxCount))
	}
	d := got.Spec.Maintenance.Defragmentation
	if d.FragmentedPercent != 50 || d.QuotaPercent != 80 || d.MinFragmentedSize == nil || d.MinFragmentedSize.String() != "64Mi" ||
		d.Window == nil || d.Window.Duration.String() != "1h0m0s" {
		t.Errorf("spec.maintenance.defragmentation = %+v, want the defaults 50%%, 80%%, 64Mi, 1h", d)
	}
}

func TestDefragmentationSchedule(t *testing.T) {
	runCreateCases(t, []createCase{
		{name: "weekly accepted", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Maintenance.Defragmentation.Schedule = "0 3 * * 0" }},
		{name: "words refused", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Maintenance.Defragmentation.Schedule = "sundays" },
			wantErr: []string{"spec.maintenance.defragmentation.schedule", "five cron fields"}},
		{name: "100 percent fragmented refused", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Maintenance.Defragmentation.FragmentedPercent = 100 },
			wantErr: []string{"fragmentedPercent"}},
	})
}

func TestEtcdBackupSpecImmutable(t *testing.T) {
	ns := env.Namespace(t)
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one-shot"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "prod"}}
	if err := env.Client.Create(reqCtx(t), b); err != nil {
		t.Fatalf("an EtcdBackup naming only its cluster must be accepted: %v", err)
	}
	b.Spec.ClusterName = "other"
	checkAdmission(t, env.Client.Update(reqCtx(t), b), []string{"spec cannot change"})

	bad := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "prod", Destination: &v1alpha1.BackupDestination{}}}
	checkAdmission(t, env.Client.Create(reqCtx(t), bad), []string{"exactly one of s3 and persistentVolumeClaim"})
}

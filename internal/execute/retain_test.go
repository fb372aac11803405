package execute

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestRetentionThatCannotReachTheStoreHoldsNothingUp: a store retention cannot delete from
// (an endpoint the outbound policy refuses after an upgrade, or one that is down) keeps the
// expired backup and is no error of the pass: membership, restores and rollouts come after
// the backups in a pass and must not wait on a store.
func TestRetentionThatCannotReachTheStoreHoldsNothingUp(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd", UID: "u"}}
	c.Spec.Backup = &v1alpha1.BackupSpec{Destination: v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
		Endpoint: "http://minio.storage.svc:9000", Bucket: "b", CredentialsSecret: v1alpha1.SecretReference{Name: "creds"}}}}
	one := int32(1)
	c.Spec.Backup.Retention.MaxCount = &one
	var bs []v1alpha1.EtcdBackup
	for i := range 3 {
		b := v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("etcd-%d", i), UID: types.UID(fmt.Sprint("b", i)),
			Labels:            map[string]string{v1alpha1.LabelBackupSchedule: "true"},
			CreationTimestamp: metav1.Time{Time: now.Add(time.Duration(i-3) * time.Hour)}}}
		b.Spec.ClusterName = "etcd"
		b.Status.Phase = v1alpha1.BackupSucceeded
		b.Status.Location = "s3://b/" + b.Name
		done := metav1.Time{Time: b.CreationTimestamp.Add(time.Minute)}
		b.Status.CompletionTime = &done
		bs = append(bs, b)
	}
	objs := []client.Object{c}
	for i := range bs {
		objs = append(objs, &bs[i])
	}
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	x := &Executor{Client: cl, APIReader: cl, Scheme: s, Recorder: events.NewFakeRecorder(10)}
	// The default outbound policy refuses http:// endpoints: no connection, no Secret read.
	if err := x.Retain(context.Background(), c, bs, now); err != nil {
		t.Fatalf("retention that cannot reach the store: %v, want no error", err)
	}
	list := &v1alpha1.EtcdBackupList{}
	if err := cl.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d EtcdBackups left, want all 3 kept while their snapshots cannot be deleted", len(list.Items))
	}
}

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestBackupToARefusedEndpointFailsWithoutAConnection: an EtcdBackup whose S3 endpoint is the
// cloud metadata address, or a name that resolves to it, fails at once with EndpointRefused
// and the policy's words; the second is refused at the dial, after DNS. Neither is tried
// again, and the message carries nothing the address could have answered.
func TestBackupToARefusedEndpointFailsWithoutAConnection(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil)
	f := healthyEtcd(ns, 3)
	// Members that report their cluster and have applied the leader's index: a backup source.
	for url, st := range f.Statuses {
		st.ClusterID, st.AppliedIndex = f.State.ClusterID, st.RaftIndex
		f.Statuses[url] = st
	}
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionAvailable, "True/"+v1alpha1.ReasonQuorumAvailable)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{"accessKeyID": []byte("a"), "secretAccessKey": []byte("s")}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	for name, endpoint := range map[string]string{"literal": "https://169.254.169.254", "resolved": "https://" + metadataAlias} {
		b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.EtcdBackupSpec{
			ClusterName: "etcd", Destination: &v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
				Endpoint: endpoint, Bucket: "backups", CredentialsSecret: v1alpha1.SecretReference{Name: "s3"}}}}}
		if err := env.Client.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		eventually(t, timeout, "EtcdBackup "+name+" failed with EndpointRefused", func() error {
			got := &v1alpha1.EtcdBackup{}
			if err := getObject(ns, name, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionComplete)
			if got.Status.Phase != v1alpha1.BackupFailed || c == nil || c.Reason != v1alpha1.ReasonEndpointRefused {
				return fmt.Errorf("phase %s, conditions %+v", got.Status.Phase, got.Status.Conditions)
			}
			if !strings.Contains(c.Message, "refused by the operator's outbound policy") || !strings.Contains(c.Message, "link-local") {
				return fmt.Errorf("message %q", c.Message)
			}
			if got.Status.Attempts > 1 {
				return fmt.Errorf("%d attempts: a refusal is not tried again", got.Status.Attempts)
			}
			t.Logf("%s: %s", name, c.Message)
			return nil
		})
	}
}

package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
)

// TestBackupPodsAreRestricted: the pod that writes a snapshot onto a claim, over plain HTTP
// and with the operator's client certificate, passes the restricted level with no
// service-account token (the executor refuses to create one that does not).
func TestBackupPodsAreRestricted(t *testing.T) {
	r := &EtcdBackupReconciler{AgentImage: "etcd-pilot:dev", Timeout: time.Hour}
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns"}}
	d := &v1alpha1.PVCDestination{ClaimName: "backups"}
	for _, endpoint := range []string{"http://etcd-1.etcd.ns.svc:2379", "https://etcd-1.etcd.ns.svc:2379"} {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns"}}
		src := backupplan.Source{Endpoint: endpoint, Member: etcd.Member{ID: 2, Name: "etcd-1"}, Committed: 100}
		pod := r.backupPod(b, c, d, src)
		if err := podsecurity.CheckPod(pod, podsecurity.Restricted); err != nil {
			t.Errorf("%s: %v", endpoint, err)
		}
	}
}

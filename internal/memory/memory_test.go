package memory_test

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
)

func TestMemoryOfSharesNothingWithTheObject(t *testing.T) {
	c := &v1alpha1.EtcdCluster{}
	c.Status.Restore = &v1alpha1.RestoreStatus{ID: "r1"}
	c.Status.ExtraKinds = []string{"v1/ConfigMap"}
	m := memory.Of(c)
	c.Status.Restore.ID, c.Status.ExtraKinds[0] = "r2", "v1/Secret"
	if m.Restore.ID != "r1" || m.ExtraKinds[0] != "v1/ConfigMap" {
		t.Fatalf("memory changed with the status: %+v", m)
	}
}

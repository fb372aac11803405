package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestChartAloneBootstrapsACluster installs the chart with the real Helm CLI and default
// values, without an EtcdCluster: the chart stands on its own.
func TestChartAloneBootstrapsACluster(t *testing.T) {
	ns := namespace(t)
	helm := filepath.Join(root, "bin", "helm", "v3.22.0", "helm")
	if out, err := local(t, "exec", "--", helm, "install", "plain", filepath.Join(root, "charts", "etcd-cluster"), "-n", ns, "--wait=false"); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	eventually(t, availableTimeout, "3 ready members", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "plain"}, sts); err != nil {
			return err
		}
		if sts.Status.ReadyReplicas != 3 {
			return fmt.Errorf("%d ready", sts.Status.ReadyReplicas)
		}
		return nil
	})
	eps := fmt.Sprintf("http://plain-0.plain.%s.svc:2379,http://plain-1.plain.%[1]s.svc:2379,http://plain-2.plain.%[1]s.svc:2379", ns)
	out, err := etcdctl(t, "--endpoints", eps, "endpoint", "health")
	if err != nil || strings.Count(out, "is healthy") != 3 {
		t.Fatalf("endpoint health: %q %v", out, err)
	}
	// The client Service name resolves and serves, as the chart's NOTES say.
	client := fmt.Sprintf("http://plain-client.%s.svc:2379", ns)
	eventually(t, time.Minute, "a write through the client Service", func() error {
		_, err := etcdctl(t, "--endpoints", client, "put", "via-service", "ok")
		return err
	})
	if out, err := local(t, "exec", "--", helm, "uninstall", "plain", "-n", ns); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
}

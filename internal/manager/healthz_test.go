package manager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/sandboxcmd"
)

// TestHealthzFailsWhileAPassIsStuck: a pass that does not return (here a tenant's chart
// looping in a render allowed 8s, against a stuck-pass bound of 2s) makes the manager's
// /healthz fail, naming the controller, so the kubelet would restart the operator; it is
// green before and once the pass is over.
func TestHealthzFailsWhileAPassIsStuck(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	probes := freePort(t)
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", ProbeAddr: probes, EtcdTimeout: time.Second, SkipNameValidation: true,
		ChartBudget: charts.Budget{Time: 8 * time.Second, Command: sandboxcmd.MustCommand(t)}, StuckPassAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	healthz := func(path string) (int, string) {
		resp, err := http.Get("http://" + probes + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testutil.Eventually(t, 30*time.Second, "/healthz answers 200", func() error {
		if code, body := healthz("/healthz"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	ns := env.Namespace(t)
	archive := testutil.PackageChart(t, filepath.Join("..", "..", "charts", charts.ChartDir), "etcd-cluster",
		map[string][]byte{"templates/loop.yaml": []byte(testutil.EndlessLoopTemplate)})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chart", Namespace: ns}, BinaryData: map[string][]byte{"chart.tgz": archive}}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Chart: v1alpha1.ChartSpec{Source: &v1alpha1.ChartSource{ConfigMap: &v1alpha1.ChartConfigMapSource{Name: "chart"}}}}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "/healthz fails on the stuck pass", func() error {
		if code, body := healthz("/healthz"); code != http.StatusInternalServerError {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if code, body := healthz("/healthz/passes"); code != http.StatusInternalServerError || !strings.Contains(body, "etcdcluster controller") {
		t.Fatalf("/healthz/passes: %d %q, want the controller named", code, body)
	}
	testutil.Eventually(t, 30*time.Second, "/healthz green once the render is stopped", func() error {
		if code, body := healthz("/healthz"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

package controllers_test

import (
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestMetricsOfAFormedCluster: once a cluster is Ready, the registry serves what the alert
// rules read for it (charts/etcd-pilot/files/alerts.yaml): its members and quorum, the
// space quota, its conditions, and the steps the executor ran to form it.
func TestMetricsOfAFormedCluster(t *testing.T) {
	ns := env.Namespace(t)
	healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	eventually(t, timeout, "the cluster's metrics", func() error {
		series := clusterSeries(t, ns)
		for name, want := range map[string]float64{
			"etcdpilot_cluster_members": 3, "etcdpilot_cluster_voters": 3, "etcdpilot_cluster_healthy_voters": 3,
			"etcdpilot_cluster_quorum": 2, "etcdpilot_cluster_desired_members": 3, "etcdpilot_cluster_has_leader": 1,
			"etcdpilot_cluster_learners": 0, "etcdpilot_cluster_db_quota_bytes": 2 << 30,
			`etcdpilot_cluster_db_size_bytes{member="etcd-0"}`:                       20480,
			`etcdpilot_cluster_condition{reason="Ready",status="True",type="Ready"}`: 1,
		} {
			if got, ok := series[name]; !ok || got != want {
				return fmt.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
			}
		}
		steps := 0.0
		for name, v := range series {
			if strings.HasPrefix(name, "etcdpilot_steps_total{") {
				steps += v
			}
		}
		if steps == 0 {
			return fmt.Errorf("no step counted in etcdpilot_steps_total")
		}
		return nil
	})
}

// clusterSeries gathers the etcdpilot series of the cluster "etcd" in ns, by name and the
// labels beyond namespace and name.
func clusterSeries(t *testing.T, ns string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			if labelValue(m, "namespace") != ns || labelValue(m, "name") != "etcd" {
				continue
			}
			key, rest := mf.GetName(), ""
			for _, l := range m.GetLabel() {
				if l.GetName() != "namespace" && l.GetName() != "name" {
					if rest != "" {
						rest += ","
					}
					rest += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
				}
			}
			if rest != "" {
				key += "{" + rest + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

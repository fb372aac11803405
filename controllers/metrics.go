package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Metrics of the clusters the operator runs, served on the manager's metrics endpoint. Every
// series carries the EtcdCluster's namespace and name; they are dropped when it is deleted.
var (
	metricLeaderChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdpilot_cluster_leader_changes_total",
		Help: "Leader changes the operator observed in the etcd cluster (including its own hand-overs).",
	}, []string{"namespace", "name"})
	metricLeaderMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdpilot_cluster_leader_moves_total",
		Help: "Leadership hand-overs (MoveLeader) the operator made before disturbing a leader.",
	}, []string{"namespace", "name"})
	metricHasLeader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_has_leader",
		Help: "1 when the members agree on a leader, else 0.",
	}, []string{"namespace", "name"})
	metricMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_members",
		Help: "Members in etcd's member list.",
	}, []string{"namespace", "name"})
	metricHealthyMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_healthy_members",
		Help: "Members that answered the operator and report no alarm.",
	}, []string{"namespace", "name"})
	metricUpgradePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_rollout_pending_members",
		Help: "Members still running an older pod template (0 when no rollout runs).",
	}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(metricLeaderChanges, metricLeaderMoves, metricHasLeader, metricMembers, metricHealthyMembers, metricUpgradePending)
}

// recordMetrics sets the gauges from a status.
func recordMetrics(c *v1alpha1.EtcdCluster) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	hasLeader, healthy := 0.0, 0.0
	for _, m := range c.Status.Members {
		if m.Leader {
			hasLeader = 1
		}
		if m.Healthy {
			healthy++
		}
	}
	metricHasLeader.With(l).Set(hasLeader)
	metricMembers.With(l).Set(float64(len(c.Status.Members)))
	metricHealthyMembers.With(l).Set(healthy)
	pending := 0.0
	if u := c.Status.Upgrade; u != nil {
		pending = float64(u.PendingMembers)
	}
	metricUpgradePending.With(l).Set(pending)
	// The counter exists from the first pass, so a rate over it has a start.
	metricLeaderChanges.With(l)
	metricLeaderMoves.With(l)
}

// forgetMetrics drops a deleted cluster's series.
func forgetMetrics(c *v1alpha1.EtcdCluster) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	for _, v := range []*prometheus.MetricVec{metricLeaderChanges.MetricVec, metricLeaderMoves.MetricVec, metricHasLeader.MetricVec,
		metricMembers.MetricVec, metricHealthyMembers.MetricVec, metricUpgradePending.MetricVec} {
		v.Delete(l)
	}
}

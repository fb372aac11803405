package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// Metrics of the clusters the operator runs, served on the manager's metrics endpoint. Every
// series carries the EtcdCluster's namespace and name; they are dropped when it is deleted.
var (
	metricLeaderChanges = counter("etcdpilot_cluster_leader_changes_total",
		"Leader changes the operator observed in the etcd cluster (including its own hand-overs).")
	metricLeaderMoves = counter("etcdpilot_cluster_leader_moves_total",
		"Leadership hand-overs (MoveLeader) the operator made before disturbing a leader.")
	metricHasLeader      = gauge("etcdpilot_cluster_has_leader", "1 when the members agree on a leader, else 0.")
	metricMembers        = gauge("etcdpilot_cluster_members", "Members in etcd's member list.")
	metricHealthyMembers = gauge("etcdpilot_cluster_healthy_members", "Members that answered the operator and report no alarm.")
	metricUpgradePending = gauge("etcdpilot_cluster_rollout_pending_members",
		"Members still running an older pod template (0 when no rollout runs).")
)

// metricCertificateExpiry is when each certificate of spec.tls expires, by Secret.
var metricCertificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "etcdpilot_certificate_expiry_timestamp_seconds",
	Help: "When a certificate of the cluster's TLS expires (Unix time), by the Secret that holds it.",
}, []string{"namespace", "name", "secret"})

// clusterLabels label every series with the EtcdCluster's namespace and name.
var clusterLabels = []string{"namespace", "name"}

func counter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, clusterLabels)
}

func gauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, clusterLabels)
}

func init() {
	metrics.Registry.MustRegister(metricLeaderChanges, metricLeaderMoves, metricHasLeader, metricMembers, metricHealthyMembers, metricUpgradePending, metricCertificateExpiry)
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
	metricCertificateExpiry.DeletePartialMatch(l)
	for _, cs := range c.Status.Certificates {
		metricCertificateExpiry.WithLabelValues(c.Namespace, c.Name, cs.Secret).Set(float64(cs.NotAfter.Unix()))
	}
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
	metricCertificateExpiry.DeletePartialMatch(l)
}

package controllers

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/maintenance"
)

// Metrics of the clusters the operator runs, served on the manager's metrics endpoint. Every
// series carries the EtcdCluster's namespace and name; they are dropped when it is deleted.
// The alert rules (charts/etcd-pilot/files/alerts.yaml) and the dashboard
// (docs/dashboards/etcd-pilot.json) use these names; test/promrules reads the
// "etcdpilot_..." string literals of this file to check that they name only metrics that
// exist, so every metric name stays a literal here.
//
// Label values are bounded: namespace and name by the EtcdClusters, member by the
// StatefulSet's pods, secret by spec.tls, type and reason by the condition constants of
// api/v1alpha1, kind by the step kinds of internal/plan.
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
	metricDesiredMembers = gauge("etcdpilot_cluster_desired_members", "The members the spec asks for (spec.replicas).")
	metricLearners       = gauge("etcdpilot_cluster_learners", "Non-voting members (learners) in etcd's member list.")
	metricVoters         = gauge("etcdpilot_cluster_voters", "Voting members in etcd's member list.")
	metricHealthyVoters  = gauge("etcdpilot_cluster_healthy_voters", "Voting members that answered the operator and report no alarm.")
	metricQuorum         = gauge("etcdpilot_cluster_quorum",
		"Voting members a quorum needs: voters/2+1 (0 while etcd has listed no member).")
	metricDBQuota = gauge("etcdpilot_cluster_db_quota_bytes",
		"The members' space quota: spec.etcd.quotaBackendBytes, or etcd's default 2 GiB when unset or 0 (absent when negative: no quota).")
	metricBackupLastSuccess = gauge("etcdpilot_cluster_backup_last_success_timestamp_seconds",
		"When the newest successful backup of the cluster completed (Unix time; absent before the first).")
	metricBackupLastSucceeded = gauge("etcdpilot_cluster_backup_last_succeeded",
		"1 when the newest finished EtcdBackup of the cluster succeeded, 0 when it failed (absent before any finished).")
)

// metricCertificateExpiry is when each certificate of spec.tls expires, by Secret.
var metricCertificateExpiry = series(prometheus.GaugeOpts{
	Name: "etcdpilot_certificate_expiry_timestamp_seconds",
	Help: "When a certificate of the cluster's TLS expires (Unix time), by the Secret that holds it.",
}, "secret")

// The database sizes each member reported, by member (the pod name).
var (
	metricDBSize = series(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_db_size_bytes",
		Help: "The size of a member's database file (what etcd counts against the quota), by member.",
	}, "member")
	metricDBSizeInUse = series(prometheus.GaugeOpts{
		Name: "etcdpilot_cluster_db_size_in_use_bytes",
		Help: "The part of a member's database file that holds data (what a defragmentation cannot free), by member.",
	}, "member")
)

// metricCondition is the cluster's conditions: one series per condition type, of value 1, with
// the condition's status and reason as labels.
var metricCondition = series(prometheus.GaugeOpts{
	Name: "etcdpilot_cluster_condition",
	Help: "The EtcdCluster's conditions (Available, Progressing, Degraded, Ready, BackupReady, ...): 1 for each type, labelled with its status and reason.",
}, "type", "status", "reason")

// metricSteps counts the steps the executor carried out, by kind and result.
var metricSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "etcdpilot_steps_total",
	Help: "Steps the executor carried out after the safety gate let them pass, by kind and result (succeeded, failed).",
}, []string{"namespace", "name", "kind", "result"})

// clusterLabels label every series with the EtcdCluster's namespace and name.
var clusterLabels = []string{"namespace", "name"}

func counter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, clusterLabels)
}

func gauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, clusterLabels)
}

func init() {
	metrics.Registry.MustRegister(metricLeaderChanges, metricLeaderMoves, metricHasLeader, metricMembers, metricHealthyMembers,
		metricUpgradePending, metricDesiredMembers, metricLearners, metricVoters, metricHealthyVoters, metricQuorum, metricDBQuota,
		metricBackupLastSuccess, metricBackupLastSucceeded, metricCertificateExpiry, metricDBSize, metricDBSizeInUse,
		metricCondition, metricSteps)
}

// clusterSeries is a gauge with labels beyond namespace and name (a member, a Secret, a
// condition) whose series of one cluster are replaced as a whole on every pass: the series
// of this pass are set first, then those of the last pass that are gone are deleted, so a
// scrape never finds the cluster without them in between (an alert's "for" would start over).
type clusterSeries struct {
	*prometheus.GaugeVec
	mu   sync.Mutex
	last map[string]map[string][]string // by namespace/name: the label values set last, by their join
}

func series(opts prometheus.GaugeOpts, labels ...string) *clusterSeries {
	return &clusterSeries{GaugeVec: prometheus.NewGaugeVec(opts, append(append([]string{}, clusterLabels...), labels...)),
		last: map[string]map[string][]string{}}
}

// sample is one series of a clusterSeries: the values of its labels after namespace and name.
type sample struct {
	labels []string
	value  float64
}

// set makes samples the cluster's series.
func (s *clusterSeries) set(c *v1alpha1.EtcdCluster, samples []sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := c.Namespace + "/" + c.Name
	now := map[string][]string{}
	for _, sm := range samples {
		lv := append([]string{c.Namespace, c.Name}, sm.labels...)
		s.WithLabelValues(lv...).Set(sm.value)
		now[strings.Join(lv, "\xff")] = lv
	}
	for k, lv := range s.last[key] {
		if _, ok := now[k]; !ok {
			s.DeleteLabelValues(lv...)
		}
	}
	if len(now) == 0 {
		delete(s.last, key)
	} else {
		s.last[key] = now
	}
}

// forget drops every series of the cluster.
func (s *clusterSeries) forget(c *v1alpha1.EtcdCluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.DeletePartialMatch(prometheus.Labels{"namespace": c.Namespace, "name": c.Name})
	delete(s.last, c.Namespace+"/"+c.Name)
}

// recordMetrics sets the gauges from a status (and the quota from the spec).
func recordMetrics(c *v1alpha1.EtcdCluster) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	hasLeader, healthy, learners, voters, healthyVoters := 0.0, 0.0, 0.0, 0.0, 0.0
	var sizes []sample
	inTable := map[string]bool{}
	for _, m := range c.Status.Members {
		inTable[m.Name] = true
		if m.Leader {
			hasLeader = 1
		}
		if m.Healthy {
			healthy++
		}
		if m.Learner {
			learners++
		} else {
			voters++
			if m.Healthy {
				healthyVoters++
			}
		}
		if m.DBSizeBytes > 0 {
			sizes = append(sizes, sample{labels: []string{m.Name}, value: float64(m.DBSizeBytes)})
		}
	}
	metricHasLeader.With(l).Set(hasLeader)
	metricMembers.With(l).Set(float64(len(c.Status.Members)))
	metricDesiredMembers.With(l).Set(float64(specReplicas(c)))
	metricHealthyMembers.With(l).Set(healthy)
	metricLearners.With(l).Set(learners)
	metricVoters.With(l).Set(voters)
	metricHealthyVoters.With(l).Set(healthyVoters)
	metricQuorum.With(l).Set(quorum(voters))
	metricDBSize.set(c, sizes)
	// A member that left the member list loses its in-use series too (it is set from the
	// pass's observation, see recordObservedMetrics).
	metricDBSizeInUse.retain(c, func(lv []string) bool { return inTable[lv[0]] })
	if q := quotaBytes(c); q > 0 {
		metricDBQuota.With(l).Set(float64(q))
	} else {
		metricDBQuota.Delete(l)
	}
	pending := 0.0
	if u := c.Status.Upgrade; u != nil {
		pending = float64(u.PendingMembers)
	}
	metricUpgradePending.With(l).Set(pending)
	certs := make([]sample, 0, len(c.Status.Certificates))
	for _, cs := range c.Status.Certificates {
		certs = append(certs, sample{labels: []string{cs.Secret}, value: float64(cs.NotAfter.Unix())})
	}
	metricCertificateExpiry.set(c, certs)
	if b := c.Status.Backup; b != nil && b.LastSuccessfulTime != nil {
		metricBackupLastSuccess.With(l).Set(float64(b.LastSuccessfulTime.Unix()))
	} else {
		metricBackupLastSuccess.Delete(l)
	}
	conds := make([]sample, 0, len(c.Status.Conditions))
	for _, cond := range c.Status.Conditions {
		conds = append(conds, sample{labels: []string{cond.Type, string(cond.Status), cond.Reason}, value: 1})
	}
	metricCondition.set(c, conds)
	// The counter exists from the first pass, so a rate over it has a start.
	metricLeaderChanges.With(l)
	metricLeaderMoves.With(l)
}

// quorum is the number of voting members a quorum of voters needs.
func quorum(voters float64) float64 {
	if voters == 0 {
		return 0
	}
	return float64(int(voters)/2 + 1)
}

// quotaBytes is the members' space quota: spec.etcd.quotaBackendBytes, or etcd's default when
// it is unset or 0; negative when the quota is off (etcd takes a negative value so).
func quotaBytes(c *v1alpha1.EtcdCluster) int64 {
	if q := c.Spec.Etcd.QuotaBackendBytes; q != nil && q.Value() != 0 {
		return q.Value()
	}
	return maintenance.DefaultQuotaBytes
}

// retain deletes the cluster's series whose labels (after namespace and name) keep refuses.
func (s *clusterSeries) retain(c *v1alpha1.EtcdCluster, keep func(labels []string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := c.Namespace + "/" + c.Name
	for k, lv := range s.last[key] {
		if !keep(lv[2:]) {
			s.DeleteLabelValues(lv...)
			delete(s.last[key], k)
		}
	}
}

// recordObservedMetrics sets what the pass observed but status does not hold: the part of each
// member's database in use (when etcd answered), and the result of the newest finished backup
// (when the backups were listed, backupErr nil).
func recordObservedMetrics(c *v1alpha1.EtcdCluster, o observation, backupErr error) {
	if o.etcd != nil {
		metricDBSizeInUse.set(c, inUse(*o.etcd))
	}
	if backupErr != nil {
		return
	}
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	var newest *v1alpha1.EtcdBackup
	for i := range o.backups {
		b := &o.backups[i]
		if (b.Status.Phase != v1alpha1.BackupSucceeded && b.Status.Phase != v1alpha1.BackupFailed) || b.Status.CompletionTime == nil {
			continue
		}
		if newest == nil || !b.Status.CompletionTime.Before(newest.Status.CompletionTime) {
			newest = b
		}
	}
	switch {
	case newest == nil:
		metricBackupLastSucceeded.Delete(l)
	case newest.Status.Phase == v1alpha1.BackupSucceeded:
		metricBackupLastSucceeded.With(l).Set(1)
	default:
		metricBackupLastSucceeded.With(l).Set(0)
	}
}

// inUse is the in-use size each answering member reported, by member name (as in the status's
// member table); 0 (etcd before 3.4) is unknown and left out.
func inUse(o etcd.Observed) []sample {
	var out []sample
	for _, m := range o.Cluster.Members {
		st, ok := o.Status[m.ID]
		if !ok || st.DBSizeInUse <= 0 || m.Name == "" {
			continue
		}
		out = append(out, sample{labels: []string{m.Name}, value: float64(st.DBSizeInUse)})
	}
	return out
}

// countStep counts a step the executor carried out; err is its outcome.
func countStep(c *v1alpha1.EtcdCluster, kind plan.Kind, err error) {
	result := "succeeded"
	if err != nil {
		result = "failed"
	}
	metricSteps.WithLabelValues(c.Namespace, c.Name, string(kind), result).Inc()
}

// forgetMetrics drops a deleted cluster's series.
func forgetMetrics(c *v1alpha1.EtcdCluster) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	for _, v := range []*prometheus.MetricVec{metricLeaderChanges.MetricVec, metricLeaderMoves.MetricVec, metricHasLeader.MetricVec,
		metricMembers.MetricVec, metricHealthyMembers.MetricVec, metricUpgradePending.MetricVec, metricDesiredMembers.MetricVec, metricLearners.MetricVec,
		metricVoters.MetricVec, metricHealthyVoters.MetricVec, metricQuorum.MetricVec, metricDBQuota.MetricVec,
		metricBackupLastSuccess.MetricVec, metricBackupLastSucceeded.MetricVec} {
		v.Delete(l)
	}
	for _, s := range []*clusterSeries{metricCertificateExpiry, metricDBSize, metricDBSizeInUse, metricCondition} {
		s.forget(c)
	}
	metricSteps.DeletePartialMatch(l)
}

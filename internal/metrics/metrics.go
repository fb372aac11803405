// Package metrics exports what the operator knows of every cluster as Prometheus series, with a
// collector that costs a cluster its values rather than a series object per label set.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/maintenance"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
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
var metricCertificateExpiry = gauge("etcdpilot_certificate_expiry_timestamp_seconds",
	"When a certificate of the cluster's TLS expires (Unix time), by the Secret that holds it.", "secret")

// The database sizes each member reported, by member (the pod name).
var (
	metricDBSize = gauge("etcdpilot_cluster_db_size_bytes",
		"The size of a member's database file (what etcd counts against the quota), by member.", "member")
	metricDBSizeInUse = gauge("etcdpilot_cluster_db_size_in_use_bytes",
		"The part of a member's database file that holds data (what a defragmentation cannot free), by member.", "member")
)

// metricCondition is the cluster's conditions: one series per condition type, of value 1, with
// the condition's status and reason as labels.
var metricCondition = gauge("etcdpilot_cluster_condition",
	"The EtcdCluster's conditions (Available, Progressing, Degraded, Ready, BackupReady, ...): 1 for each type, labelled with its status and reason.",
	"type", "status", "reason")

// metricSteps counts the steps the executor carried out, by kind and result.
var metricSteps = counter("etcdpilot_steps_total",
	"Steps the executor carried out (membership, rollout, maintenance, auth, restore and certificate steps), by kind and result (succeeded, failed).", "kind", "result")

// metricDesc is one metric: every series carries the EtcdCluster's namespace and name, then
// the metric's own labels.
type metricDesc struct {
	*prometheus.Desc
	typ prometheus.ValueType
}

func counter(name, help string, labels ...string) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, append([]string{"namespace", "name"}, labels...), nil), prometheus.CounterValue}
}

func gauge(name, help string, labels ...string) metricDesc {
	return metricDesc{prometheus.NewDesc(name, help, append([]string{"namespace", "name"}, labels...), nil), prometheus.GaugeValue}
}

func init() {
	ctrlmetrics.Registry.MustRegister(clusterMetrics)
}

// clusterMetrics holds what the operator exports of every cluster and makes the series at
// each scrape. Client_golang's metric vectors keep every series as an object with its label
// pairs (about 600 bytes each, twenty-some per cluster: 12 MiB of the operator's heap at a
// thousand clusters); here a cluster costs its values and the label values of its labelled
// series. A cluster's series change together under one lock, so a scrape never finds it half
// updated (an alert's "for" would start over), and a deleted cluster's go at once.
var clusterMetrics = &metricsCollector{clusters: map[types.NamespacedName]*clusterValues{}}

type metricsCollector struct {
	mu       sync.Mutex
	clusters map[types.NamespacedName]*clusterValues
}

// clusterValues is one cluster's series.
type clusterValues struct {
	// status is set by recordMetrics: the gauges below exist from its first call.
	status                                                                         bool
	hasLeader, members, healthy, pending, desired, learners, voters, healthyVoters float64
	quota, backupLastSuccess, backupLastSucceeded                                  optional
	leaderChanges, leaderMoves                                                     float64
	certs, dbSize, dbInUse, conditions                                             []sample
	steps                                                                          []sample // labels kind, result
}

// optional is a gauge that may be absent.
type optional struct {
	set   bool
	value float64
}

// sample is one series of a labelled metric: the values of its labels after namespace and
// name.
type sample struct {
	labels []string
	value  float64
}

// update runs f on the cluster's values (made on first use) under the lock.
func (m *metricsCollector) update(c *v1alpha1.EtcdCluster, f func(v *clusterValues)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	v := m.clusters[key]
	if v == nil {
		v = &clusterValues{}
		m.clusters[key] = v
	}
	f(v)
}

func (m *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allMetrics() {
		ch <- d.Desc
	}
}

// allMetrics lists every metric of this file.
func allMetrics() []metricDesc {
	return []metricDesc{metricLeaderChanges, metricLeaderMoves, metricHasLeader, metricMembers, metricHealthyMembers,
		metricUpgradePending, metricDesiredMembers, metricLearners, metricVoters, metricHealthyVoters, metricQuorum, metricDBQuota,
		metricBackupLastSuccess, metricBackupLastSucceeded, metricCertificateExpiry, metricDBSize, metricDBSizeInUse,
		metricCondition, metricSteps}
}

func (m *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, v := range m.clusters {
		one := func(d metricDesc, value float64) {
			ch <- prometheus.MustNewConstMetric(d.Desc, d.typ, value, key.Namespace, key.Name)
		}
		each := func(d metricDesc, samples []sample) {
			for _, s := range samples {
				ch <- prometheus.MustNewConstMetric(d.Desc, d.typ, s.value, append([]string{key.Namespace, key.Name}, s.labels...)...)
			}
		}
		maybe := func(d metricDesc, o optional) {
			if o.set {
				one(d, o.value)
			}
		}
		if v.status {
			one(metricHasLeader, v.hasLeader)
			one(metricMembers, v.members)
			one(metricDesiredMembers, v.desired)
			one(metricHealthyMembers, v.healthy)
			one(metricLearners, v.learners)
			one(metricVoters, v.voters)
			one(metricHealthyVoters, v.healthyVoters)
			one(metricQuorum, quorum(v.voters))
			one(metricUpgradePending, v.pending)
			// The counters exist from the first pass, so a rate over them has a start.
			one(metricLeaderChanges, v.leaderChanges)
			one(metricLeaderMoves, v.leaderMoves)
		} else {
			if v.leaderChanges > 0 {
				one(metricLeaderChanges, v.leaderChanges)
			}
			if v.leaderMoves > 0 {
				one(metricLeaderMoves, v.leaderMoves)
			}
		}
		maybe(metricDBQuota, v.quota)
		maybe(metricBackupLastSuccess, v.backupLastSuccess)
		maybe(metricBackupLastSucceeded, v.backupLastSucceeded)
		each(metricCertificateExpiry, v.certs)
		each(metricDBSize, v.dbSize)
		each(metricDBSizeInUse, v.dbInUse)
		each(metricCondition, v.conditions)
		each(metricSteps, v.steps)
	}
}

// Record sets the gauges from a status (and the quota from the spec).
func Record(c *v1alpha1.EtcdCluster) {
	var x clusterValues
	var sizes []sample
	inTable := map[string]bool{}
	for _, m := range c.Status.Members {
		inTable[m.Name] = true
		if m.Leader {
			x.hasLeader = 1
		}
		if m.Healthy {
			x.healthy++
		}
		if m.Learner {
			x.learners++
		} else {
			x.voters++
			if m.Healthy {
				x.healthyVoters++
			}
		}
		if m.DBSizeBytes > 0 {
			sizes = append(sizes, sample{labels: []string{m.Name}, value: float64(m.DBSizeBytes)})
		}
	}
	if q := quotaBytes(c); q > 0 {
		x.quota = optional{true, float64(q)}
	}
	if u := c.Status.Upgrade; u != nil {
		x.pending = float64(u.PendingMembers)
	}
	certs := make([]sample, 0, len(c.Status.Certificates))
	for _, cs := range c.Status.Certificates {
		certs = append(certs, sample{labels: []string{cs.Secret}, value: float64(cs.NotAfter.Unix())})
	}
	if b := c.Status.Backup; b != nil && b.LastSuccessfulTime != nil {
		x.backupLastSuccess = optional{true, float64(b.LastSuccessfulTime.Unix())}
	}
	conds := make([]sample, 0, len(c.Status.Conditions))
	for _, cond := range c.Status.Conditions {
		conds = append(conds, sample{labels: []string{cond.Type, string(cond.Status), cond.Reason}, value: 1})
	}
	clusterMetrics.update(c, func(v *clusterValues) {
		v.status = true
		v.hasLeader, v.members, v.desired, v.healthy = x.hasLeader, float64(len(c.Status.Members)), float64(render.SpecReplicas(c)), x.healthy
		v.learners, v.voters, v.healthyVoters, v.pending = x.learners, x.voters, x.healthyVoters, x.pending
		v.quota, v.backupLastSuccess = x.quota, x.backupLastSuccess
		v.dbSize, v.certs, v.conditions = nilIfEmpty(sizes), nilIfEmpty(certs), nilIfEmpty(conds)
		// A member that left the member list loses its in-use series too (it is set from the
		// pass's observation, see recordObservedMetrics).
		kept := v.dbInUse[:0]
		for _, s := range v.dbInUse {
			if inTable[s.labels[0]] {
				kept = append(kept, s)
			}
		}
		v.dbInUse = nilIfEmpty(kept)
	})
}

// nilIfEmpty keeps no backing array for an empty list.
func nilIfEmpty(s []sample) []sample {
	if len(s) == 0 {
		return nil
	}
	return s
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

// RecordObserved sets what the pass observed but status does not hold: the part of each
// member's database in use (when etcd answered), and the result of the newest finished backup
// (when the backups were listed, backupErr nil).
func RecordObserved(c *v1alpha1.EtcdCluster, o observe.Observation, backupErr error) {
	var newest *v1alpha1.EtcdBackup
	for i := range o.Backups {
		b := &o.Backups[i]
		if (b.Status.Phase != v1alpha1.BackupSucceeded && b.Status.Phase != v1alpha1.BackupFailed) || b.Status.CompletionTime == nil {
			continue
		}
		if newest == nil || !b.Status.CompletionTime.Before(newest.Status.CompletionTime) {
			newest = b
		}
	}
	var last optional
	switch {
	case newest == nil:
	case newest.Status.Phase == v1alpha1.BackupSucceeded:
		last = optional{true, 1}
	default:
		last = optional{true, 0}
	}
	var sizes []sample
	if o.Etcd != nil {
		sizes = inUse(*o.Etcd)
	}
	clusterMetrics.update(c, func(v *clusterValues) {
		if o.Etcd != nil {
			v.dbInUse = sizes
		}
		if backupErr == nil {
			v.backupLastSucceeded = last
		}
	})
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

// CountStep counts a step the executor carried out; err is its outcome.
func CountStep(c *v1alpha1.EtcdCluster, kind plan.Kind, err error) {
	result := "succeeded"
	if err != nil {
		result = "failed"
	}
	clusterMetrics.update(c, func(v *clusterValues) {
		for i := range v.steps {
			if v.steps[i].labels[0] == string(kind) && v.steps[i].labels[1] == result {
				v.steps[i].value++
				return
			}
		}
		v.steps = append(v.steps, sample{labels: []string{string(kind), result}, value: 1})
	})
}

// CountLeaderChanges adds n leader changes the operator observed.
func CountLeaderChanges(c *v1alpha1.EtcdCluster, n int64) {
	clusterMetrics.update(c, func(v *clusterValues) { v.leaderChanges += float64(n) })
}

// CountLeaderMove counts a hand-over the operator made.
func CountLeaderMove(c *v1alpha1.EtcdCluster) {
	clusterMetrics.update(c, func(v *clusterValues) { v.leaderMoves++ })
}

// Forget drops a deleted cluster's series.
func Forget(c *v1alpha1.EtcdCluster) {
	clusterMetrics.mu.Lock()
	defer clusterMetrics.mu.Unlock()
	delete(clusterMetrics.clusters, types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
}

package metrics

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

func TestCertificateExpiryMetric(t *testing.T) {
	at := time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "e"}}
	c.Status.Certificates = []v1alpha1.CertificateStatus{{Secret: "e-peer-tls", NotAfter: metav1.NewTime(at)}, {Secret: "e-ca", NotAfter: metav1.NewTime(at.Add(time.Hour))}}
	Record(c)
	if got := seriesOf(t, "etcdpilot_certificate_expiry_timestamp_seconds", "m", "e"); got["secret=e-peer-tls"] != float64(at.Unix()) || len(got) != 2 {
		t.Fatalf("expiry: %v", got)
	}
	// A certificate no longer in status (TLS turned off, a Secret renamed) loses its series.
	c.Status.Certificates = c.Status.Certificates[1:]
	Record(c)
	if got := seriesOf(t, "etcdpilot_certificate_expiry_timestamp_seconds", "m", "e"); len(got) != 1 || got["secret=e-ca"] == 0 {
		t.Fatalf("the series of a certificate that left status is still there: %v", got)
	}
	Forget(c)
	if got := seriesOf(t, "etcdpilot_certificate_expiry_timestamp_seconds", "m", "e"); len(got) != 0 {
		t.Fatalf("a deleted cluster's certificate series is still there: %v", got)
	}
}

// seriesOf gathers the registry's series of metric for the cluster ns/name: each series' labels
// beyond namespace and name, joined with ",", mapped to its value.
func seriesOf(t *testing.T, metric, ns, name string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			var rest []string
			var gotNS, gotName string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					gotNS = l.GetValue()
				case "name":
					gotName = l.GetValue()
				default:
					rest = append(rest, l.GetName()+"="+l.GetValue())
				}
			}
			if gotNS != ns || gotName != name {
				continue
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[strings.Join(rest, ",")] = v
		}
	}
	return out
}

// TestClusterMetrics: the member counts, quorum, database sizes, quota, backup time and
// conditions follow the status (and the quota the spec), and a series whose member, condition
// reason or certificate left the status goes.
func TestClusterMetrics(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "gauges"}}
	c.Status.Members = []v1alpha1.MemberStatus{
		{Name: "gauges-0", Healthy: true, Leader: true, DBSizeBytes: 4096},
		{Name: "gauges-1", Healthy: true, DBSizeBytes: 8192},
		{Name: "gauges-2", Healthy: false},
		{Name: "gauges-3", Healthy: true, Learner: true, DBSizeBytes: 2048},
	}
	last := metav1.NewTime(time.Date(2026, 5, 1, 3, 0, 0, 0, time.UTC))
	c.Status.Backup = &v1alpha1.BackupStatus{LastSuccessfulTime: &last}
	c.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonQuorumAvailable},
		{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonUpgradeStalled},
	}
	Record(c)
	one := func(metric string, want float64) {
		t.Helper()
		got := seriesOf(t, metric, "m", "gauges")
		if len(got) != 1 || got[""] != want {
			t.Errorf("%s: %v, want %v", metric, got, want)
		}
	}
	one("etcdpilot_cluster_members", 4)
	one("etcdpilot_cluster_healthy_members", 3)
	one("etcdpilot_cluster_learners", 1)
	one("etcdpilot_cluster_desired_members", 3)
	one("etcdpilot_cluster_voters", 3)
	one("etcdpilot_cluster_healthy_voters", 2)
	one("etcdpilot_cluster_quorum", 2)
	one("etcdpilot_cluster_has_leader", 1)
	one("etcdpilot_cluster_db_quota_bytes", 2<<30)
	one("etcdpilot_cluster_backup_last_success_timestamp_seconds", float64(last.Unix()))
	if got, want := seriesOf(t, "etcdpilot_cluster_db_size_bytes", "m", "gauges"),
		map[string]float64{"member=gauges-0": 4096, "member=gauges-1": 8192, "member=gauges-3": 2048}; !maps.Equal(got, want) {
		t.Errorf("db sizes %v, want %v (a member that did not answer has none)", got, want)
	}
	if got, want := seriesOf(t, "etcdpilot_cluster_condition", "m", "gauges"), map[string]float64{
		"reason=QuorumAvailable,status=True,type=Available": 1, "reason=UpgradeStalled,status=True,type=Degraded": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("conditions %v, want %v", got, want)
	}

	// The stall ends, a member leaves, the quota is raised, backups are turned off.
	c.Status.Members = c.Status.Members[:3]
	c.Status.Conditions[1] = metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected}
	c.Status.Backup = nil
	q := resource.MustParse("8Gi")
	c.Spec.Etcd.QuotaBackendBytes = &q
	Record(c)
	one("etcdpilot_cluster_learners", 0)
	one("etcdpilot_cluster_db_quota_bytes", 8<<30)
	if got := seriesOf(t, "etcdpilot_cluster_db_size_bytes", "m", "gauges"); len(got) != 2 {
		t.Errorf("db sizes after gauges-3 left: %v", got)
	}
	if got, want := seriesOf(t, "etcdpilot_cluster_condition", "m", "gauges"), map[string]float64{
		"reason=QuorumAvailable,status=True,type=Available": 1, "reason=AsExpected,status=False,type=Degraded": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("conditions %v, want %v (one series per type)", got, want)
	}
	if got := seriesOf(t, "etcdpilot_cluster_backup_last_success_timestamp_seconds", "m", "gauges"); len(got) != 0 {
		t.Errorf("backup time without status.backup: %v", got)
	}

	// A negative quota turns etcd's quota off: no quota series, so no ratio alert.
	q = resource.MustParse("-1")
	c.Spec.Etcd.QuotaBackendBytes = &q
	Record(c)
	if got := seriesOf(t, "etcdpilot_cluster_db_quota_bytes", "m", "gauges"); len(got) != 0 {
		t.Errorf("quota series with the quota off: %v", got)
	}

	// Before etcd listed any member: no quorum to speak of.
	c.Status.Members = nil
	Record(c)
	one("etcdpilot_cluster_quorum", 0)
}

// TestQuorum: voters/2+1.
func TestQuorum(t *testing.T) {
	for voters, want := range map[float64]float64{0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 7: 4} {
		if got := quorum(voters); got != want {
			t.Errorf("quorum(%v) = %v, want %v", voters, got, want)
		}
	}
}

// TestObservedMetrics: the in-use sizes come from what etcd answered, and follow the member
// table; the last backup result is the newest finished EtcdBackup's, and is kept when the
// backups could not be listed.
func TestObservedMetrics(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "observed"}}
	c.Status.Members = []v1alpha1.MemberStatus{{Name: "observed-0", Healthy: true}, {Name: "observed-1", Healthy: true}}
	at := func(min int) *metav1.Time {
		t := metav1.NewTime(time.Date(2026, 5, 1, 3, min, 0, 0, time.UTC))
		return &t
	}
	backup := func(phase v1alpha1.BackupPhase, done *metav1.Time) v1alpha1.EtcdBackup {
		return v1alpha1.EtcdBackup{Status: v1alpha1.EtcdBackupStatus{Phase: phase, CompletionTime: done}}
	}
	o := observe.Observation{
		Etcd: &etcd.Observed{
			Cluster: etcd.Cluster{Members: []etcd.Member{{ID: 1, Name: "observed-0"}, {ID: 2, Name: "observed-1"}, {ID: 3}}},
			Status:  map[uint64]etcd.MemberStatus{1: {ID: 1, DBSize: 100, DBSizeInUse: 60}, 2: {ID: 2, DBSize: 100}},
		},
		// The newest to finish is a failure, although a success was created later and runs.
		Backups: []v1alpha1.EtcdBackup{backup(v1alpha1.BackupSucceeded, at(1)), backup(v1alpha1.BackupFailed, at(5)), backup(v1alpha1.BackupRunning, nil)},
	}
	RecordObserved(c, o, nil)
	Record(c)
	if got, want := seriesOf(t, "etcdpilot_cluster_db_size_in_use_bytes", "m", "observed"), map[string]float64{"member=observed-0": 60}; !maps.Equal(got, want) {
		t.Errorf("in use %v, want %v (etcd before 3.4 reports none)", got, want)
	}
	if got := seriesOf(t, "etcdpilot_cluster_backup_last_succeeded", "m", "observed"); got[""] != 0 || len(got) != 1 {
		t.Errorf("last backup result %v, want 0", got)
	}
	// The backups could not be listed: the result stands. etcd did not answer: the sizes stand.
	RecordObserved(c, observe.Observation{}, errors.New("boom"))
	if got := seriesOf(t, "etcdpilot_cluster_backup_last_succeeded", "m", "observed"); got[""] != 0 || len(got) != 1 {
		t.Errorf("last backup result after a failed list %v, want 0", got)
	}
	if got := seriesOf(t, "etcdpilot_cluster_db_size_in_use_bytes", "m", "observed"); len(got) != 1 {
		t.Errorf("in use after etcd did not answer: %v", got)
	}
	o.Backups = append(o.Backups, backup(v1alpha1.BackupSucceeded, at(9)))
	RecordObserved(c, o, nil)
	if got := seriesOf(t, "etcdpilot_cluster_backup_last_succeeded", "m", "observed"); got[""] != 1 {
		t.Errorf("last backup result %v, want 1", got)
	}
	// A member that left the member table loses its in-use series with the status.
	c.Status.Members = c.Status.Members[1:]
	Record(c)
	if got := seriesOf(t, "etcdpilot_cluster_db_size_in_use_bytes", "m", "observed"); len(got) != 0 {
		t.Errorf("in use of a member that left: %v", got)
	}
	RecordObserved(c, observe.Observation{}, nil)
	if got := seriesOf(t, "etcdpilot_cluster_backup_last_succeeded", "m", "observed"); len(got) != 0 {
		t.Errorf("last backup result without backups: %v", got)
	}
}

// TestStepsAndForget: steps are counted by kind and result, and a deleted cluster leaves no
// series of any etcdpilot metric behind.
func TestStepsAndForget(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "steps"}}
	c.Status.Members = []v1alpha1.MemberStatus{{Name: "steps-0", Healthy: true, Leader: true, DBSizeBytes: 1}}
	c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady}}
	c.Status.Certificates = []v1alpha1.CertificateStatus{{Secret: "steps-ca", NotAfter: metav1.Now()}}
	last := metav1.Now()
	c.Status.Backup = &v1alpha1.BackupStatus{LastSuccessfulTime: &last}
	CountStep(c, plan.AddLearner, nil)
	CountStep(c, plan.AddLearner, nil)
	CountStep(c, plan.PromoteLearner, errors.New("learner not caught up"))
	if got, want := seriesOf(t, "etcdpilot_steps_total", "m", "steps"), map[string]float64{
		"kind=AddLearner,result=succeeded": 2, "kind=PromoteLearner,result=failed": 1,
	}; !maps.Equal(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	Record(c)
	RecordObserved(c, observe.Observation{
		Etcd:    &etcd.Observed{Cluster: etcd.Cluster{Members: []etcd.Member{{ID: 1, Name: "steps-0"}}}, Status: map[uint64]etcd.MemberStatus{1: {ID: 1, DBSizeInUse: 1}}},
		Backups: []v1alpha1.EtcdBackup{{Status: v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, CompletionTime: &last}}},
	}, nil)
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Every etcdpilot metric (a family is gathered once any cluster has a series of it) has
	// a series of this cluster.
	ours := 0
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "etcdpilot_") {
			continue
		}
		ours++
		if len(seriesOf(t, mf.GetName(), "m", "steps")) == 0 {
			t.Errorf("%s: no series of the cluster", mf.GetName())
		}
	}
	if ours != 19 {
		t.Errorf("%d etcdpilot metrics gathered, want the 19 of metrics.go", ours)
	}
	Forget(c)
	for _, mf := range families {
		if got := seriesOf(t, mf.GetName(), "m", "steps"); strings.HasPrefix(mf.GetName(), "etcdpilot_") && len(got) > 0 {
			t.Errorf("%s of a deleted cluster: %v", mf.GetName(), got)
		}
	}
}

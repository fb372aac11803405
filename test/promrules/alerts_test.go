package promrules

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

const (
	alertsFile  = repo + "/charts/etcd-pilot/files/alerts.yaml"
	runbooksDoc = repo + "/docs/runbooks.md"
	runbookURL  = "https://github.com/etcd-pilot/etcd-pilot/blob/main/docs/runbooks.md#"
)

// loadRules parses the alerts file as Prometheus does, unknown fields refused.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, newParser(), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

// TestAlertRulesAreWellFormed: the file parses; every rule is an alert with a severity, a
// summary, a description and a runbook URL whose anchor is a section of docs/runbooks.md;
// every section there is an alert's; every metric named exists.
func TestAlertRulesAreWellFormed(t *testing.T) {
	groups := loadRules(t)
	doc, err := os.ReadFile(runbooksDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (EtcdPilot\w+)\s*$`).FindAllSubmatch(doc, -1) {
		sections[string(m[1])] = true
	}
	ours := operatorMetrics(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: rule %q is not an alert", g.Name, r.Record)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if got, want := r.Annotations["runbook_url"], runbookURL+strings.ToLower(r.Alert); got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !sections[r.Alert] {
				t.Errorf("%s: docs/runbooks.md has no section \"## %s\"", r.Alert, r.Alert)
			}
			expr, err := newParser().ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			checkNames(t, r.Alert, expr, ours)
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/runbooks.md has a section for %s, which is no alert", s)
		}
	}
	if len(alerts) < 10 {
		t.Fatalf("only %d alerts", len(alerts))
	}
}

// alertCase is one history of series and the alerts it must leave firing.
type alertCase struct {
	alert string
	what  string
	// load is the series, in promqltest's notation, one sample a minute from time 0
	// ("3x10" is 3 for 11 minutes, "0+1x60" counts up by one a minute).
	load string
	// at is when the alert's state is read; the rule is evaluated every minute up to it.
	at time.Duration
	// firing are the firing alerts' labels (severity and alertname left out), in
	// labels.Labels' String form; empty for none.
	firing []string
}

// cl is the labels of an alert about the cluster ns/name.
func cl(ns, name string) string { return fmt.Sprintf(`{name="%s", namespace="%s"}`, name, ns) }

var alertCases = []alertCase{
	{alert: "EtcdPilotNoLeader", what: "no leader for minutes, reported by two operator replicas in turn", at: 6 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_has_leader{namespace="ns", name="a", pod="op-0"} 0x3
		etcdpilot_cluster_has_leader{namespace="ns", name="a", pod="op-1"} _x3 0x10
		etcdpilot_cluster_members{namespace="ns", name="a", pod="op-1"} 3x10
		etcdpilot_cluster_has_leader{namespace="ns", name="b"} 1x10
		etcdpilot_cluster_members{namespace="ns", name="b"} 3x10`},
	{alert: "EtcdPilotNoLeader", what: "an election shorter than a minute", at: 6 * time.Minute, load: `
		etcdpilot_cluster_has_leader{namespace="ns", name="a"} 1 0 1x8
		etcdpilot_cluster_members{namespace="ns", name="a"} 3x10`},
	{alert: "EtcdPilotNoLeader", what: "a cluster still forming (etcd listed no member)", at: 6 * time.Minute, load: `
		etcdpilot_cluster_has_leader{namespace="ns", name="a"} 0x10
		etcdpilot_cluster_members{namespace="ns", name="a"} 0x10`},

	{alert: "EtcdPilotQuorumLost", what: "one of three voters healthy", at: 3 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 1x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 2x10`},
	{alert: "EtcdPilotQuorumLost", what: "two of three voters healthy", at: 3 * time.Minute, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 2x10`},
	{alert: "EtcdPilotQuorumLost", what: "a cluster not formed yet", at: 3 * time.Minute, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 0x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 0x10`},

	{alert: "EtcdPilotQuorumAtRisk", what: "two of three voters healthy for 6 minutes", at: 6 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_desired_members{namespace="ns", name="a"} 3x10`},
	{alert: "EtcdPilotQuorumAtRisk", what: "a lost member removed for its replacement: two voters of two, three wanted", at: 6 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_desired_members{namespace="ns", name="a"} 3x10`},
	{alert: "EtcdPilotQuorumAtRisk", what: "a member restarting for two minutes (a rollout)", at: 8 * time.Minute, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 3 3 2 2 3x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 2x10
		etcdpilot_cluster_desired_members{namespace="ns", name="a"} 3x10`},
	{alert: "EtcdPilotQuorumAtRisk", what: "a one-member cluster, which tolerates no loss by design", at: 8 * time.Minute, load: `
		etcdpilot_cluster_healthy_voters{namespace="ns", name="a"} 1x10
		etcdpilot_cluster_quorum{namespace="ns", name="a"} 1x10
		etcdpilot_cluster_desired_members{namespace="ns", name="a"} 1x10`},

	{alert: "EtcdPilotMembersDown", what: "one member unhealthy for 11 minutes", at: 11 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_members{namespace="ns", name="a"} 3x15
		etcdpilot_cluster_healthy_members{namespace="ns", name="a"} 2x15`},
	{alert: "EtcdPilotMembersDown", what: "every member healthy", at: 11 * time.Minute, load: `
		etcdpilot_cluster_members{namespace="ns", name="a"} 3x15
		etcdpilot_cluster_healthy_members{namespace="ns", name="a"} 3x15`},

	{alert: "EtcdPilotFrequentLeaderChanges", what: "a leader change a minute", at: 30 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_leader_changes_total{namespace="ns", name="a"} 0+1x60
		etcdpilot_cluster_leader_moves_total{namespace="ns", name="a"} 0x60`},
	{alert: "EtcdPilotFrequentLeaderChanges", what: "the operator's own hand-overs (a rollout)", at: 30 * time.Minute, load: `
		etcdpilot_cluster_leader_changes_total{namespace="ns", name="a"} 0+1x60
		etcdpilot_cluster_leader_moves_total{namespace="ns", name="a"} 0+1x60`},
	{alert: "EtcdPilotFrequentLeaderChanges", what: "two changes in an hour", at: 30 * time.Minute, load: `
		etcdpilot_cluster_leader_changes_total{namespace="ns", name="a"} 0x10 1x10 2x40
		etcdpilot_cluster_leader_moves_total{namespace="ns", name="a"} 0x60`},

	{alert: "EtcdPilotDatabaseNearQuota", what: "a member's data at 84% of the default quota", at: 15 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_db_size_in_use_bytes{namespace="ns", name="a", member="a-0"} 1800000000x20
		etcdpilot_cluster_db_size_in_use_bytes{namespace="ns", name="a", member="a-1"} 1000000000x20
		etcdpilot_cluster_db_quota_bytes{namespace="ns", name="a"} 2147483648x20`},
	{alert: "EtcdPilotDatabaseNearQuota", what: "a large file, mostly free pages (the operator defragments it)", at: 15 * time.Minute, load: `
		etcdpilot_cluster_db_size_bytes{namespace="ns", name="a", member="a-0"} 1900000000x20
		etcdpilot_cluster_db_size_in_use_bytes{namespace="ns", name="a", member="a-0"} 500000000x20
		etcdpilot_cluster_db_quota_bytes{namespace="ns", name="a"} 2147483648x20`},

	{alert: "EtcdPilotDatabaseAtQuota", what: "a member's file at 98% of the quota", at: 10 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_db_size_bytes{namespace="ns", name="a", member="a-2"} 2100000000x20
		etcdpilot_cluster_db_quota_bytes{namespace="ns", name="a"} 2147483648x20`},
	{alert: "EtcdPilotDatabaseAtQuota", what: "files at 84% of the quota", at: 10 * time.Minute, load: `
		etcdpilot_cluster_db_size_bytes{namespace="ns", name="a", member="a-2"} 1800000000x20
		etcdpilot_cluster_db_quota_bytes{namespace="ns", name="a"} 2147483648x20`},
	{alert: "EtcdPilotDatabaseAtQuota", what: "no quota (spec.etcd.quotaBackendBytes negative)", at: 10 * time.Minute, load: `
		etcdpilot_cluster_db_size_bytes{namespace="ns", name="a", member="a-2"} 9000000000x20`},

	{alert: "EtcdPilotNoSpaceAlarm", what: "the operator waits on a NOSPACE alarm", at: 8 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="True", reason="NoSpaceAlarm"} 1x10`},
	{alert: "EtcdPilotNoSpaceAlarm", what: "the operator compacts to recover", at: 8 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Progressing", status="True", reason="Compacting"} 1x10
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="False", reason="AsExpected"} 1x10`},

	{alert: "EtcdPilotCorruptAlarm", what: "a CORRUPT alarm", at: 3 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="True", reason="CorruptAlarm"} 1x10`},
	{alert: "EtcdPilotCorruptAlarm", what: "nothing degraded", at: 3 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="False", reason="AsExpected"} 1x10`},

	{alert: "EtcdPilotBackupFailed", what: "the newest backup failed", at: 8 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_backup_last_succeeded{namespace="ns", name="a"} 0x10`},
	{alert: "EtcdPilotBackupFailed", what: "a failure followed by a success", at: 8 * time.Minute, load: `
		etcdpilot_cluster_backup_last_succeeded{namespace="ns", name="a"} 0x3 1x7`},

	{alert: "EtcdPilotBackupOverdue", what: "the schedule's backups are overdue", at: 15 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="BackupReady", status="False", reason="BackupOverdue"} 1x20`},
	{alert: "EtcdPilotBackupOverdue", what: "the newest backup succeeded", at: 15 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="BackupReady", status="True", reason="BackupSucceeded"} 1x20`},

	{alert: "EtcdPilotCertificateNearExpiry", what: "a certificate expiring in 3 days", at: 20 * time.Minute,
		firing: []string{`{name="a", namespace="ns", secret="a-peer-tls"}`}, load: `
		etcdpilot_certificate_expiry_timestamp_seconds{namespace="ns", name="a", secret="a-peer-tls"} 259200x30
		etcdpilot_certificate_expiry_timestamp_seconds{namespace="ns", name="a", secret="a-ca"} 315360000x30`},
	{alert: "EtcdPilotCertificateNearExpiry", what: "certificates of 30 days and more", at: 20 * time.Minute, load: `
		etcdpilot_certificate_expiry_timestamp_seconds{namespace="ns", name="a", secret="a-peer-tls"} 2592000x30`},

	{alert: "EtcdPilotCertificateExpiryImminent", what: "a certificate expiring in 12 hours", at: 20 * time.Minute,
		firing: []string{`{name="a", namespace="ns", secret="a-server-tls"}`}, load: `
		etcdpilot_certificate_expiry_timestamp_seconds{namespace="ns", name="a", secret="a-server-tls"} 43200x30`},
	{alert: "EtcdPilotCertificateExpiryImminent", what: "a certificate expiring in 3 days", at: 20 * time.Minute, load: `
		etcdpilot_certificate_expiry_timestamp_seconds{namespace="ns", name="a", secret="a-server-tls"} 259200x30`},

	{alert: "EtcdPilotUpgradeStalled", what: "a rollout stalled", at: 3 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="True", reason="UpgradeStalled"} 1x10`},
	{alert: "EtcdPilotUpgradeStalled", what: "a member restarting in a rollout", at: 3 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Progressing", status="True", reason="MemberRestarting"} 1x10
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="False", reason="AsExpected"} 1x10`},

	{alert: "EtcdPilotClusterDegraded", what: "a stale volume blocks a scale-out", at: 20 * time.Minute,
		firing: []string{`{name="a", namespace="ns", reason="StaleVolume"}`}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="True", reason="StaleVolume"} 1x30`},
	{alert: "EtcdPilotClusterDegraded", what: "a reason with an alert of its own", at: 20 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="True", reason="UpgradeStalled"} 1x30`},
	{alert: "EtcdPilotClusterDegraded", what: "nothing degraded", at: 20 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Degraded", status="False", reason="AsExpected"} 1x30`},

	{alert: "EtcdPilotClusterNotFormed", what: "no member list for 20 minutes", at: 20 * time.Minute, firing: []string{cl("ns", "a")}, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Available", status="False", reason="QuorumNotReady"} 1x30
		etcdpilot_cluster_members{namespace="ns", name="a"} 0x30`},
	{alert: "EtcdPilotClusterNotFormed", what: "a formed cluster that lost quorum (its own alerts)", at: 20 * time.Minute, load: `
		etcdpilot_cluster_condition{namespace="ns", name="a", type="Available", status="False", reason="QuorumNotReady"} 1x30
		etcdpilot_cluster_members{namespace="ns", name="a"} 3x30`},

	{alert: "EtcdPilotEtcdMemberNoLeader", what: "a member without a leader", at: 3 * time.Minute,
		firing: []string{`{namespace="ns", pod="a-1"}`}, load: `
		etcd_server_has_leader{namespace="ns", pod="a-0", instance="10.0.0.1:2381"} 1x10
		etcd_server_has_leader{namespace="ns", pod="a-1", instance="10.0.0.2:2381"} 0x10`},
	{alert: "EtcdPilotEtcdMemberNoLeader", what: "every member with a leader", at: 3 * time.Minute, load: `
		etcd_server_has_leader{namespace="ns", pod="a-0"} 1x10`},

	{alert: "EtcdPilotEtcdHighFsyncDurations", what: "every fsync between 0.5 and 1s", at: 20 * time.Minute,
		firing: []string{`{namespace="ns", pod="a-0"}`}, load: `
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.008"} 0x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.512"} 0x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="1.024"} 0+60x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="+Inf"} 0+60x30`},
	{alert: "EtcdPilotEtcdHighFsyncDurations", what: "every fsync under 8ms", at: 20 * time.Minute, load: `
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.008"} 0+60x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.512"} 0+60x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="1.024"} 0+60x30
		etcd_disk_wal_fsync_duration_seconds_bucket{namespace="ns", pod="a-0", le="+Inf"} 0+60x30`},

	{alert: "EtcdPilotEtcdHighCommitDurations", what: "every commit between 0.25 and 0.5s", at: 20 * time.Minute,
		firing: []string{`{namespace="ns", pod="a-0"}`}, load: `
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.016"} 0x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.256"} 0x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.512"} 0+60x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="+Inf"} 0+60x30`},
	{alert: "EtcdPilotEtcdHighCommitDurations", what: "every commit under 16ms", at: 20 * time.Minute, load: `
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.016"} 0+60x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.256"} 0+60x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="0.512"} 0+60x30
		etcd_disk_backend_commit_duration_seconds_bucket{namespace="ns", pod="a-0", le="+Inf"} 0+60x30`},
}

// TestAlertsFire evaluates each alert, as a rule group would every minute, over the series of
// each case, and compares the alerts firing at its end. Every alert needs a case that fires
// it and one that does not.
func TestAlertsFire(t *testing.T) {
	groups := loadRules(t)
	byName := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			byName[r.Alert] = r
		}
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	engine := promqltest.NewTestEngine(t, false, 0, 1e6)
	for _, c := range alertCases {
		r, ok := byName[c.alert]
		if !ok {
			t.Errorf("case %q: no alert %s in %s", c.what, c.alert, alertsFile)
			continue
		}
		if len(c.firing) > 0 {
			fires[c.alert] = true
		} else {
			quiet[c.alert] = true
		}
		t.Run(c.alert+"/"+c.what, func(t *testing.T) {
			storage := promqltest.LoadedStorage(t, "load 1m\n"+strings.TrimLeft(c.load, "\n"))
			got := evalAlert(t, engine, storage, r, c.at)
			want := append([]string{}, c.firing...)
			sort.Strings(want)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("firing at %v: %v, want %v", c.at, got, want)
			}
		})
	}
	for name := range byName {
		if !fires[name] {
			t.Errorf("%s: no case fires it", name)
		}
		if !quiet[name] {
			t.Errorf("%s: no case leaves it quiet", name)
		}
	}
}

// evalAlert evaluates r every minute from time 0 to at, and returns the labels of the alerts
// firing then (without alertname and severity), sorted. It fails on an annotation or label
// template that does not expand.
func evalAlert(t *testing.T, engine *promql.Engine, storage storage.Queryable, r rulefmt.Rule, at time.Duration) []string {
	t.Helper()
	expr, err := newParser().ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
	query := rules.EngineQueryFunc(engine, storage)
	for ts := time.Duration(0); ts <= at; ts += time.Minute {
		if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(ts), query, nil, 0); err != nil {
			t.Fatalf("evaluating %s at %v: %v", r.Alert, ts, err)
		}
	}
	var out []string
	for _, a := range rule.ActiveAlerts() {
		a.Annotations.Range(func(l labels.Label) {
			if strings.Contains(l.Value, "error expanding template") || strings.Contains(l.Value, "<no value>") {
				t.Errorf("%s: annotation %s: %s", r.Alert, l.Name, l.Value)
			}
		})
		if a.State != rules.StateFiring {
			continue
		}
		out = append(out, labels.NewBuilder(a.Labels).Del(labels.AlertName, "severity").Labels().String())
	}
	sort.Strings(out)
	return out
}

package restore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

var (
	now      = time.Date(2025, 3, 1, 12, 0, 0, 400_000_000, time.UTC)
	snapTime = time.Date(2025, 3, 1, 3, 0, 0, 700_000_000, time.UTC)
	lateTime = time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC)

	bootSrc = Source{Backup: "nightly", Location: "s3://bucket/etcd/nightly.db", SHA256: strings.Repeat("ab", 32),
		Revision: 4711, Time: snapTime, EtcdVersion: "3.6.16"}
	latestSrc = Source{Backup: "hourly", Location: "s3://bucket/etcd/hourly.db", SHA256: strings.Repeat("cd", 32),
		Revision: 9000, Time: lateTime, EtcdVersion: "3.6.16"}

	bootDesc   = "backup nightly (s3://bucket/etcd/nightly.db), revision 4711, taken 2025-03-01T03:00:00Z"
	latestDesc = "backup hourly (s3://bucket/etcd/hourly.db), revision 9000, taken 2025-03-01T11:00:00Z"
	patchCmd   = `kubectl -n db patch etcdcluster main --type merge -p '{"spec":{"disasterRecovery":{"policy":"FromLatestBackup"}}}'`
)

// founders returns n founders etcd-0..etcd-<n-1>, each with its claim and no pods.
func founders(n int) []Founder {
	fs := make([]Founder, n)
	for i := range fs {
		fs[i] = Founder{Name: fmt.Sprintf("etcd-%d", i), ClaimExists: true}
	}
	return fs
}

// base is a formed three-member cluster with quorum, no bootstrap and no restore record.
func base() Observation {
	return Observation{ClusterUID: "uid-1", Name: "main", Namespace: "db", Formed: true, Policy: v1alpha1.DisasterRecoveryManual,
		After: time.Minute, Founders: founders(3), MaxAttempts: 3, Now: now}
}

// record is a restore record in phase p of the given cause, restoring from the matching source.
func record(cause string, p v1alpha1.RestorePhase) *v1alpha1.RestoreStatus {
	s := bootSrc
	if cause == v1alpha1.RestoreCauseDisasterRecovery {
		s = latestSrc
	}
	return &v1alpha1.RestoreStatus{ID: "0123456789", Cause: cause, Phase: p, Backup: s.Backup, Location: s.Location,
		SHA256: s.SHA256, Revision: s.Revision, EtcdVersion: s.EtcdVersion, StartTime: metav1.NewTime(now.Add(-time.Hour).Truncate(time.Second))}
}

// restoring is a bootstrap (not formed) restore in phase Restoring with the given founders.
func restoring(fs ...Founder) Observation {
	o := base()
	o.Formed = false
	o.Bootstrap = &bootSrc
	o.Record = record(v1alpha1.RestoreCauseBootstrap, v1alpha1.RestoreRestoring)
	o.Founders = fs
	return o
}

func pod(phase, msg string) PodState { return PodState{Exists: true, Phase: phase, Message: msg} }

// disaster is a formed cluster of three voters that lost quorum 5m ago, two of them with their
// data gone, with a latest backup and policy p.
func disaster(p v1alpha1.DisasterRecoveryPolicy) Observation {
	o := base()
	o.Policy = p
	o.QuorumLost, o.QuorumLostSince = true, now.Add(-5*time.Minute)
	o.Voters = 3
	o.DataGone, o.DataKept = []string{"etcd-0", "etcd-1"}, []string{"etcd-2"}
	o.Latest = &latestSrc
	o.StsReplicas = 3
	for i := range o.Founders {
		o.Founders[i].MemberPodExists = true
	}
	o.Founders[0].ClaimExists, o.Founders[1].ClaimExists = false, true
	return o
}

func mtime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t.Truncate(time.Second))
	return &m
}

// recWant is what a row expects of Action.Record; nil in a row means no record.
type recWant struct {
	phase    v1alpha1.RestorePhase
	cause    string
	id       string // checked when set
	attempts int32
	msgs     []string
	check    func(t *testing.T, r *v1alpha1.RestoreStatus)
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		o        Observation
		kind     plan.Kind
		member   string
		reason   string
		msgs     []string
		notMsgs  []string
		replicas int32
		requeue  time.Duration
		rec      *recWant
		skip     string
	}{
		// No restore wanted.
		{name: "no bootstrap, formed, quorum fine: None", o: base(), kind: plan.None},
		{name: "no bootstrap, not formed, no record: None (founders start empty)", o: func() Observation {
			o := base()
			o.Formed = false
			return o
		}(), kind: plan.None},

		// Bootstrap.
		{name: "bootstrap, not formed, no record: BeginRestore (Bootstrap, Restoring)", o: func() Observation {
			o := base()
			o.Formed, o.Bootstrap = false, &bootSrc
			return o
		}(), kind: BeginRestore, reason: v1alpha1.ReasonRestoring,
			msgs: []string{"restoring the 3 founding members from " + bootDesc + " before etcd first starts"},
			rec: &recWant{phase: v1alpha1.RestoreRestoring, cause: v1alpha1.RestoreCauseBootstrap,
				id:   ID("uid-1", v1alpha1.RestoreCauseBootstrap, bootSrc.Location, ""),
				msgs: []string{"restoring the 3 founding members from " + bootDesc},
				check: func(t *testing.T, r *v1alpha1.RestoreStatus) {
					if r.Backup != "nightly" || r.Location != bootSrc.Location || r.SHA256 != bootSrc.SHA256 ||
						r.Revision != 4711 || r.EtcdVersion != "3.6.16" {
						t.Errorf("record does not copy the source: %+v", r)
					}
					if r.SnapshotTime == nil || !r.SnapshotTime.Equal(mtime(snapTime)) {
						t.Errorf("SnapshotTime %v, want %v", r.SnapshotTime, mtime(snapTime))
					}
					if !r.StartTime.Equal(mtime(now)) || r.CompletionTime != nil {
						t.Errorf("StartTime %v CompletionTime %v, want %v and nil", r.StartTime, r.CompletionTime, mtime(now))
					}
				}}},
		{name: "bootstrap from an object without time or revision: no SnapshotTime", o: func() Observation {
			o := base()
			o.Formed, o.Bootstrap = false, &Source{Location: "s3://bucket/raw.db", EtcdVersion: "3.5.21"}
			return o
		}(), kind: BeginRestore, reason: v1alpha1.ReasonRestoring,
			msgs: []string{"from s3://bucket/raw.db before etcd first starts"}, notMsgs: []string{"revision", "taken", "backup "},
			rec: &recWant{phase: v1alpha1.RestoreRestoring, cause: v1alpha1.RestoreCauseBootstrap,
				check: func(t *testing.T, r *v1alpha1.RestoreStatus) {
					if r.SnapshotTime != nil || r.Revision != 0 || r.Backup != "" {
						t.Errorf("record invents snapshot facts: %+v", r)
					}
				}}},
		{name: "bootstrap with a problem: Wait RestoreFailed with the problem", o: func() Observation {
			o := base()
			o.Formed, o.Bootstrap = false, &bootSrc
			o.BootstrapProblem = "EtcdBackup nightly is not Succeeded (Failed)"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoreFailed, msgs: []string{"EtcdBackup nightly is not Succeeded (Failed)"}},
		{name: "bootstrap from a backup still running: Wait Restoring (nothing is wrong)", o: func() Observation {
			o := base()
			o.Formed, o.Bootstrap = false, &bootSrc
			o.BootstrapWaiting = "EtcdBackup nightly is Running, not Succeeded yet"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoring, msgs: []string{"nightly is Running"}},
		{name: "bootstrap on a formed cluster: None (spec.bootstrap acts only before the first start)", o: func() Observation {
			o := base()
			o.Bootstrap = &bootSrc
			return o
		}(), kind: plan.None},

		// Restoring.
		{name: "Restoring, a founder's member pod exists: Wait", o: func() Observation {
			fs := founders(3)
			fs[1].MemberPodExists = true
			return restoring(fs...)
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoring, msgs: []string{"waiting for the member pod etcd-1 to go before its data is restored"}},
		{name: "Restoring after a disaster, a member pod exists: Wait RecoveringFromBackup", o: func() Observation {
			o := restoring(founders(3)...)
			o.Record, o.Formed = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreRestoring), true
			o.Founders[2].MemberPodExists = true
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRecoveringFromBackup, msgs: []string{"waiting for the member pod etcd-2 to go"}},
		{name: "Restoring, claims missing: CreateClaim for the first such founder", o: func() Observation {
			fs := founders(3)
			fs[1].ClaimExists, fs[2].ClaimExists = false, false
			return restoring(fs...)
		}(), kind: CreateClaim, member: "etcd-1", reason: v1alpha1.ReasonRestoring, msgs: []string{"creating the data claim of etcd-1 to restore into"}},
		{name: "Restoring, restore pods missing: RunRestorePod for the lowest pending", o: func() Observation {
			fs := founders(3)
			fs[0].Pod = pod("Succeeded", "")
			return restoring(fs...)
		}(), kind: RunRestorePod, member: "etcd-1", reason: v1alpha1.ReasonRestoring, msgs: []string{"restoring the data of etcd-1 from s3://bucket/etcd/nightly.db"}},
		{name: "Restoring in parallel, one pod running: RunRestorePod for the next", o: func() Observation {
			fs := founders(3)
			fs[0].Pod = pod("Running", "")
			return restoring(fs...)
		}(), kind: RunRestorePod, member: "etcd-1", reason: v1alpha1.ReasonRestoring},
		{name: "Restoring sequentially, one pod running: Wait", o: func() Observation {
			fs := founders(3)
			fs[0].Pod = pod("Running", "")
			o := restoring(fs...)
			o.SequentialPods = true
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoring, msgs: []string{"restoring the data of etcd-0, etcd-1, etcd-2 from s3://bucket/etcd/nightly.db"}},
		{name: "Restoring sequentially, a failed pod still being deleted counts as running: Wait", o: func() Observation {
			fs := founders(3)
			fs[0].Pod = PodState{Exists: true, Deleting: true, Phase: "Failed"}
			o := restoring(fs...)
			o.SequentialPods = true
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoring, msgs: []string{"restoring the data of etcd-0, etcd-1, etcd-2"}},
		{name: "Restoring sequentially, none running: RunRestorePod for the lowest pending", o: func() Observation {
			fs := founders(3)
			fs[0].Pod = pod("Succeeded", "")
			o := restoring(fs...)
			o.SequentialPods = true
			return o
		}(), kind: RunRestorePod, member: "etcd-1", reason: v1alpha1.ReasonRestoring},
		{name: "Restoring, every pod running or pending: Wait naming them", o: func() Observation {
			fs := founders(3)
			fs[0].Pod, fs[1].Pod, fs[2].Pod = pod("Running", ""), pod("Pending", ""), pod("Succeeded", "")
			return restoring(fs...)
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoring, msgs: []string{"restoring the data of etcd-0, etcd-1 from"}, notMsgs: []string{"etcd-2"}},
		{name: "Restoring, a pod failed: DeleteRestorePod, Attempts+1", o: func() Observation {
			fs := founders(3)
			fs[0].Pod, fs[1].Pod = pod("Succeeded", ""), pod("Failed", "sha256 mismatch")
			return restoring(fs...)
		}(), kind: DeleteRestorePod, member: "etcd-1", reason: v1alpha1.ReasonRestoring,
			msgs: []string{"the restore pod of etcd-1 failed (sha256 mismatch); running it again"},
			rec:  &recWant{phase: v1alpha1.RestoreRestoring, cause: v1alpha1.RestoreCauseBootstrap, id: "0123456789", attempts: 1}},
		{name: "Restoring, a pod failed once more than MaxAttempts allows: FinishRestore Failed", o: func() Observation {
			fs := founders(3)
			fs[2].Pod = pod("Failed", "sha256 mismatch")
			o := restoring(fs...)
			o.Record.Attempts = 2
			return o
		}(), kind: FinishRestore, member: "etcd-2", reason: v1alpha1.ReasonRestoreFailed,
			msgs: []string{"restoring etcd-2 failed 3 times; last: sha256 mismatch", "delete and re-create the EtcdCluster"},
			rec: &recWant{phase: v1alpha1.RestoreFailed, cause: v1alpha1.RestoreCauseBootstrap, id: "0123456789", attempts: 3,
				msgs: []string{"restoring etcd-2 failed 3 times; last: sha256 mismatch"}}},
		{name: "Restoring (bootstrap), every pod Succeeded: FinishRestore Restored", o: func() Observation {
			fs := founders(3)
			for i := range fs {
				fs[i].Pod = pod("Succeeded", "")
			}
			return restoring(fs...)
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestored,
			msgs:    []string{"every founding member's data was restored from s3://bucket/etcd/nightly.db (revision 4711)"},
			notMsgs: []string{"writes after"},
			rec: &recWant{phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseBootstrap, id: "0123456789",
				msgs: []string{"(revision 4711)"},
				check: func(t *testing.T, r *v1alpha1.RestoreStatus) {
					if r.CompletionTime == nil || !r.CompletionTime.Equal(mtime(now)) {
						t.Errorf("CompletionTime %v, want %v", r.CompletionTime, mtime(now))
					}
				}}},
		{name: "Restoring (disaster recovery), every pod Succeeded: FinishRestore Restored, later writes lost", o: func() Observation {
			fs := founders(3)
			for i := range fs {
				fs[i].Pod = pod("Succeeded", "")
			}
			o := restoring(fs...)
			o.Record, o.Formed, o.Bootstrap = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreRestoring), true, nil
			o.QuorumLost = true
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestored,
			msgs: []string{"restored from s3://bucket/etcd/hourly.db (revision 9000); writes after that backup are lost"},
			rec: &recWant{phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseDisasterRecovery, id: "0123456789",
				msgs: []string{"(revision 9000)", "writes after that backup are lost"},
				check: func(t *testing.T, r *v1alpha1.RestoreStatus) {
					if r.CompletionTime == nil || !r.CompletionTime.Equal(mtime(now)) {
						t.Errorf("CompletionTime %v, want %v", r.CompletionTime, mtime(now))
					}
				}}},
		{name: "Restoring, snapshot revision unknown: the message names no revision", o: func() Observation {
			fs := founders(1)
			fs[0].Pod = pod("Succeeded", "")
			o := restoring(fs...)
			o.Record.Revision = 0
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestored, msgs: []string{"restored from s3://bucket/etcd/nightly.db"},
			notMsgs: []string{"revision"}, rec: &recWant{phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseBootstrap}},
		{name: "a restore under way wins over a quorum loss: no second BeginRestore", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreRestoring)
			o.StsReplicas = 0
			for i := range o.Founders {
				o.Founders[i].MemberPodExists = false
			}
			return o
		}(), kind: CreateClaim, member: "etcd-0", reason: v1alpha1.ReasonRecoveringFromBackup},

		// Restored.
		{name: "Restored and formed, restore pods present: CleanUp the first not already deleting", o: func() Observation {
			o := base()
			o.Record = record(v1alpha1.RestoreCauseBootstrap, v1alpha1.RestoreRestored)
			o.Founders[0].Pod = PodState{Exists: true, Deleting: true, Phase: "Succeeded"}
			o.Founders[2].Pod = pod("Succeeded", "")
			return o
		}(), kind: CleanUp, member: "etcd-2", reason: v1alpha1.ReasonRestored, msgs: []string{"deleting the restore pods"}},
		{name: "Restored and formed, no restore pods: None", o: func() Observation {
			o := base()
			o.Record = record(v1alpha1.RestoreCauseBootstrap, v1alpha1.RestoreRestored)
			return o
		}(), kind: plan.None},
		{name: "Restored and formed, restore pods all deleting: None", o: func() Observation {
			o := base()
			o.Record = record(v1alpha1.RestoreCauseBootstrap, v1alpha1.RestoreRestored)
			o.Founders[1].Pod = PodState{Exists: true, Deleting: true, Phase: "Succeeded"}
			return o
		}(), kind: plan.None},
		{name: "Restored, not formed yet: None (restore pods stay until the cluster formed)", o: func() Observation {
			o := restoring(founders(3)...)
			o.Record.Phase = v1alpha1.RestoreRestored
			o.Founders[0].Pod = pod("Succeeded", "")
			return o
		}(), kind: plan.None},

		// Failed.
		{name: "Failed record, not formed: Wait RestoreFailed with its message", o: func() Observation {
			o := restoring(founders(3)...)
			o.Record.Phase, o.Record.Message = v1alpha1.RestoreFailed, "restoring etcd-0 failed 3 times; last: no such key"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoreFailed, msgs: []string{"restoring etcd-0 failed 3 times; last: no such key"}},
		{name: "Failed record, formed, quorum fine: None", o: func() Observation {
			o := base()
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreFailed)
			return o
		}(), kind: plan.None},
		{name: "Failed disaster recovery, the lost cluster still formed and quorum still lost: Wait RestoreFailed", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreFailed)
			o.Record.Message = "restoring etcd-0 failed 3 times; last: sha256 mismatch"
			o.StsReplicas = 0
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoreFailed, msgs: []string{"restoring etcd-0 failed 3 times"}},

		// Disaster.
		{name: "quorum lost, Voters 3, DataKept 2: None (members only down: never restore)", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.DataGone, o.DataKept = []string{"etcd-0"}, []string{"etcd-1", "etcd-2"}
			o.QuorumLostSince = now.Add(-time.Hour)
			return o
		}(), kind: plan.None},
		{name: "quorum not known to be lost, a majority's data gone, FromLatestBackup: Wait EtcdUnreachable, no restore", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.QuorumLost, o.QuorumUnknown = false, "etcd-1: its etcd container runs but did not answer the operator"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonEtcdUnreachable,
			msgs: []string{"2 of 3 voting members lost their data", "quorum is not known to be lost (etcd-1: its etcd container runs", "restores nothing"}},
		{name: "quorum not known to be lost, Manual: None (membership reports)", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryManual)
			o.QuorumLost, o.QuorumUnknown = false, "no member list read with a quorum is recorded"
			return o
		}(), kind: plan.None},
		{name: "quorum lost, DataKept 1, but a voter set of the change in flight keeps a quorum: None", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.DataMayReturn = "a membership change was in flight, and with it 2 of 3 voting members keep their data"
			o.QuorumLostSince = now.Add(-time.Hour)
			return o
		}(), kind: plan.None},
		{name: "Stopping, nothing stopped, quorum not known to be lost: Wait, neither stopped nor abandoned", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.QuorumLost, o.QuorumUnknown = false, "etcd-2: its etcd container runs but did not answer the operator"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRecoveringFromBackup, msgs: []string{"no member is stopped while quorum is not known to be lost"}},
		{name: "Stopping, nothing stopped, a change in flight keeps a quorum's data: abandoned", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.DataMayReturn = "a membership change was in flight"
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestoreFailed, msgs: []string{"abandoned before any member was stopped", "a quorum of members has its data again"}},
		{name: "quorum lost, Voters 0 (unknown): None", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Voters = 0
			return o
		}(), kind: plan.None},
		{name: "quorum lost, no data known gone (claims unknown): no restore", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.DataGone, o.DataKept = nil, nil
			return o
		}(), kind: plan.None},
		{name: "quorum lost, DataKept 1, lost for less than After: Wait QuorumLost with RequeueAfter", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.QuorumLostSince = now.Add(-20 * time.Second)
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonQuorumLost, requeue: 40 * time.Second,
			msgs: []string{"2 of 3 voting members lost their data (etcd-0, etcd-1): quorum cannot come back",
				"Disaster recovery (FromLatestBackup) starts once this has lasted 1m0s"}},
		{name: "quorum lost, DataKept 1, QuorumLostSince unset: Wait QuorumLost with a positive RequeueAfter", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.QuorumLostSince = time.Time{}
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonQuorumLost, requeue: time.Minute},
		{name: "quorum lost, DataKept 1, past After, no backup: Wait NoBackupToRestore", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Latest = nil
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonNoBackupToRestore,
			msgs: []string{"quorum is lost and cannot come back: 2 of 3 voting members lost their data (etcd-0, etcd-1)",
				"the data of etcd-2 is kept and set aside", "No Succeeded EtcdBackup of this cluster exists", "spec.bootstrap.fromObject"}},
		{name: "quorum lost, every voter's data gone, no backup: the message keeps nothing", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryManual)
			o.DataGone, o.DataKept, o.Latest = []string{"etcd-0", "etcd-1", "etcd-2"}, nil, nil
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonNoBackupToRestore,
			msgs: []string{"3 of 3 voting members lost their data (etcd-0, etcd-1, etcd-2)"}, notMsgs: []string{"is kept"}},
		{name: "quorum lost, Manual, a backup: Wait DisasterRecoveryRequired with the command", o: disaster(v1alpha1.DisasterRecoveryManual),
			kind: plan.Wait, reason: v1alpha1.ReasonDisasterRecoveryRequired,
			msgs: []string{"The newest verified backup is " + latestDesc + "; writes after it would be lost",
				"policy is Manual, so the operator changes nothing", "run: " + patchCmd + " (see the README"}},
		{name: "quorum lost, policy unset, a backup: as Manual", o: disaster(""),
			kind: plan.Wait, reason: v1alpha1.ReasonDisasterRecoveryRequired, msgs: []string{patchCmd}},
		{name: "quorum lost, FromLatestBackup: BeginRestore (DisasterRecovery, Stopping)", o: disaster(v1alpha1.DisasterRecoveryFromLatestBackup),
			kind: BeginRestore, reason: v1alpha1.ReasonRecoveringFromBackup,
			msgs: []string{"quorum is lost and cannot come back: 2 of 3", "Re-forming the cluster from " + latestDesc + ": writes after that backup are lost"},
			rec: &recWant{phase: v1alpha1.RestoreStopping, cause: v1alpha1.RestoreCauseDisasterRecovery,
				id: ID("uid-1", v1alpha1.RestoreCauseDisasterRecovery, latestSrc.Location, ""), msgs: []string{"Re-forming the cluster from " + latestDesc},
				check: func(t *testing.T, r *v1alpha1.RestoreStatus) {
					if r.Backup != "hourly" || r.Location != latestSrc.Location || r.Revision != 9000 || r.SHA256 != latestSrc.SHA256 ||
						r.SnapshotTime == nil || !r.SnapshotTime.Equal(mtime(lateTime)) || !r.StartTime.Equal(mtime(now)) {
						t.Errorf("record does not copy the backup: %+v", r)
					}
				}}},
		{name: "quorum lost again after an earlier restore: BeginRestore with an ID chained to the previous", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseBootstrap, v1alpha1.RestoreRestored)
			return o
		}(), kind: BeginRestore, reason: v1alpha1.ReasonRecoveringFromBackup,
			rec: &recWant{phase: v1alpha1.RestoreStopping, cause: v1alpha1.RestoreCauseDisasterRecovery,
				id: ID("uid-1", v1alpha1.RestoreCauseDisasterRecovery, latestSrc.Location, "0123456789")}},

		// Stopping.
		{name: "Stopping, StatefulSet has replicas: ScaleStatefulSet 0", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			return o
		}(), kind: plan.ScaleStatefulSet, reason: v1alpha1.ReasonRecoveringFromBackup, replicas: 0,
			msgs: []string{"stopping every member before the cluster is re-formed from s3://bucket/etcd/hourly.db"}},
		{name: "Stopping, replicas 0, member pods still there: Wait", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.StsReplicas = 0
			o.Founders[1].MemberPodExists = false
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRecoveringFromBackup, msgs: []string{"waiting for the member pods to stop: etcd-0, etcd-2"}},
		{name: "Stopping, replicas 0, a member pod stuck Terminating on a NotReady node: Wait naming the node and the manual step", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.StsReplicas = 0
			o.Founders[0].MemberPodExists, o.Founders[1].MemberPodExists = false, false
			o.Founders[2].MemberPodStuck = "Terminating on node n3, which is not ready; delete the pod: kubectl -n db delete pod etcd-2 --force --grace-period=0"
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRecoveringFromBackup,
			msgs: []string{"waiting for the member pods to stop: etcd-2 (Terminating on node n3, which is not ready; delete the pod: kubectl -n db delete pod etcd-2 --force"}},
		{name: "Stopping, every member pod gone: ResetMembership, Record Restoring", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.StsReplicas = 0
			for i := range o.Founders {
				o.Founders[i].MemberPodExists = false
			}
			return o
		}(), kind: ResetMembership, reason: v1alpha1.ReasonRecoveringFromBackup,
			msgs: []string{"every member stopped; dropping the lost cluster's membership record"},
			rec: &recWant{phase: v1alpha1.RestoreRestoring, cause: v1alpha1.RestoreCauseDisasterRecovery, id: "0123456789",
				msgs: []string{"restoring every member's data from s3://bucket/etcd/hourly.db"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip != "" {
				t.Skip(tt.skip)
			}
			before := fmt.Sprintf("%+v", tt.o.Record)
			a := Decide(tt.o)
			if a.Kind != tt.kind || a.Member != tt.member || a.Reason != tt.reason {
				t.Fatalf("got %s %q %q (%s), want %s %q %q", a.Kind, a.Member, a.Reason, a.Message, tt.kind, tt.member, tt.reason)
			}
			for _, m := range tt.msgs {
				if !strings.Contains(a.Message, m) {
					t.Errorf("message %q\nlacks %q", a.Message, m)
				}
			}
			for _, m := range tt.notMsgs {
				if strings.Contains(a.Message, m) {
					t.Errorf("message %q\nmentions %q", a.Message, m)
				}
			}
			if a.Replicas != tt.replicas {
				t.Errorf("Replicas %d, want %d", a.Replicas, tt.replicas)
			}
			if a.RequeueAfter != tt.requeue {
				t.Errorf("RequeueAfter %v, want %v", a.RequeueAfter, tt.requeue)
			}
			if after := fmt.Sprintf("%+v", tt.o.Record); after != before {
				t.Errorf("Decide changed the observed record:\n%s\n%s", before, after)
			}
			if tt.rec == nil {
				if a.Record != nil {
					t.Fatalf("unexpected record %+v", a.Record)
				}
				return
			}
			r := a.Record
			if r == nil {
				t.Fatal("no record")
			}
			if r.Phase != tt.rec.phase || r.Cause != tt.rec.cause || r.Attempts != tt.rec.attempts {
				t.Errorf("record phase %s cause %s attempts %d, want %s %s %d", r.Phase, r.Cause, r.Attempts, tt.rec.phase, tt.rec.cause, tt.rec.attempts)
			}
			if tt.rec.id != "" && r.ID != tt.rec.id {
				t.Errorf("record ID %q, want %q", r.ID, tt.rec.id)
			}
			for _, m := range tt.rec.msgs {
				if !strings.Contains(r.Message, m) {
					t.Errorf("record message %q\nlacks %q", r.Message, m)
				}
			}
			if tt.rec.check != nil {
				tt.rec.check(t, r)
			}
		})
	}
}

// TestRestoreIDIsDeterministic: a pass that repeats BeginRestore (its status write was lost)
// picks the same ID; another cluster, cause, snapshot or previous restore picks another.
func TestRestoreIDIsDeterministic(t *testing.T) {
	o := base()
	o.Formed, o.Bootstrap = false, &bootSrc
	a, b := Decide(o), Decide(o)
	if a.Record == nil || b.Record == nil || a.Record.ID != b.Record.ID {
		t.Fatalf("same inputs, different IDs: %+v %+v", a.Record, b.Record)
	}
	if len(a.Record.ID) != 10 {
		t.Errorf("ID %q is not 10 characters", a.Record.ID)
	}
	o.Now = o.Now.Add(time.Hour)
	if c := Decide(o); c.Record.ID != a.Record.ID {
		t.Errorf("the ID depends on the time of the pass: %q %q", c.Record.ID, a.Record.ID)
	}
	o.ClusterUID = "uid-2"
	if c := Decide(o); c.Record.ID == a.Record.ID {
		t.Errorf("another cluster, same ID %q", a.Record.ID)
	}

	d := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
	first := Decide(d).Record
	d.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreRestored)
	d.Record.ID = "aaaaaaaaaa"
	second := Decide(d).Record
	d.Record.ID = "bbbbbbbbbb"
	third := Decide(d).Record
	if first.ID == second.ID || second.ID == third.ID || first.ID == third.ID {
		t.Errorf("a different previous ID must give another ID: %q %q %q", first.ID, second.ID, third.ID)
	}
	ids := map[string]bool{}
	for _, id := range []string{
		ID("u", "Bootstrap", "s3://x", ""), ID("u", "DisasterRecovery", "s3://x", ""),
		ID("u", "Bootstrap", "s3://y", ""), ID("u", "Bootstrap", "s3://x", "p"), ID("v", "Bootstrap", "s3://x", ""),
	} {
		ids[id] = true
	}
	if len(ids) != 5 {
		t.Errorf("IDs collide: %v", ids)
	}
	if got := Token("etcd-main", "0123456789"); got != "etcd-main-restore-0123456789" {
		t.Errorf("Token %q", got)
	}
}

func TestActiveAndHoldStatefulSet(t *testing.T) {
	for _, tt := range []struct {
		name              string
		r                 *v1alpha1.RestoreStatus
		bootstrap, formed bool
		active, hold      bool
	}{
		{name: "no record, bootstrap, not formed", bootstrap: true, hold: true},
		{name: "no record, no bootstrap"},
		{name: "no record, bootstrap, formed", bootstrap: true, formed: true},
		{name: "Stopping", r: &v1alpha1.RestoreStatus{Phase: v1alpha1.RestoreStopping}, formed: true, active: true},
		{name: "Restoring, bootstrap", r: &v1alpha1.RestoreStatus{Phase: v1alpha1.RestoreRestoring}, bootstrap: true, active: true, hold: true},
		{name: "Restored, bootstrap, not formed", r: &v1alpha1.RestoreStatus{Phase: v1alpha1.RestoreRestored}, bootstrap: true},
		{name: "Failed, bootstrap, not formed", r: &v1alpha1.RestoreStatus{Phase: v1alpha1.RestoreFailed}, bootstrap: true, hold: true},
	} {
		if got := Active(tt.r); got != tt.active {
			t.Errorf("%s: Active %v, want %v", tt.name, got, tt.active)
		}
		if got := HoldStatefulSet(tt.bootstrap, tt.formed, tt.r); got != tt.hold {
			t.Errorf("%s: HoldStatefulSet %v, want %v", tt.name, got, tt.hold)
		}
	}
}

// world is a small in-memory cluster the simulation applies steps to.
type world struct {
	o Observation
	// failures is how many times each member's restore pod fails before it succeeds.
	failures map[string]int
	// fresh marks restore pods created in this pass: they finish in the next.
	fresh map[string]bool
	// stopping counts the passes until the member pods are gone after a scale to 0: they
	// take a pass to terminate.
	stopping int
}

// apply carries out a step the way the executor would, without failures of its own.
func (w *world) apply(t *testing.T, a Action) {
	t.Helper()
	f := func() *Founder {
		for i := range w.o.Founders {
			if w.o.Founders[i].Name == a.Member {
				return &w.o.Founders[i]
			}
		}
		t.Fatalf("%s for unknown member %q", a.Kind, a.Member)
		return nil
	}
	switch a.Kind {
	case plan.None, plan.Wait:
	case BeginRestore, ResetMembership, FinishRestore:
		if a.Record == nil {
			t.Fatalf("%s without a record", a.Kind)
		}
		w.o.Record = a.Record
		if a.Kind == FinishRestore && a.Record.Phase == v1alpha1.RestoreRestored {
			// The StatefulSet is applied (and scaled back), the members start on their
			// restored data and the cluster forms.
			w.o.StsReplicas = int32(len(w.o.Founders))
			for i := range w.o.Founders {
				w.o.Founders[i].MemberPodExists = true
			}
			w.o.Formed, w.o.QuorumLost = true, false
			w.o.DataGone, w.o.DataKept = nil, nil
		}
	case plan.ScaleStatefulSet:
		w.o.StsReplicas = a.Replicas
		if a.Replicas == 0 {
			w.stopping = 2
		}
	case CreateClaim:
		f().ClaimExists = true
	case RunRestorePod:
		p := f()
		if p.Pod.Exists {
			t.Fatalf("RunRestorePod for %s, whose restore pod exists", p.Name)
		}
		p.Pod = PodState{Exists: true, Phase: "Running"}
		w.fresh[p.Name] = true
	case DeleteRestorePod, CleanUp:
		if a.Kind == DeleteRestorePod {
			if a.Record == nil {
				t.Fatal("DeleteRestorePod without a record")
			}
			w.o.Record = a.Record
		}
		f().Pod.Deleting = true
	default:
		t.Fatalf("unexpected step %s", a.Kind)
	}
}

// tick is the world moving between passes: terminating pods go, restore pods finish.
func (w *world) tick() {
	w.o.Now = w.o.Now.Add(10 * time.Second)
	for i := range w.o.Founders {
		f := &w.o.Founders[i]
		if w.stopping == 1 {
			f.MemberPodExists = false
		}
		switch {
		case f.Pod.Deleting:
			f.Pod = PodState{}
		case w.fresh[f.Name]:
			delete(w.fresh, f.Name)
		case f.Pod.Exists && f.Pod.Phase == "Running":
			if w.failures[f.Name] > 0 {
				w.failures[f.Name]--
				f.Pod.Phase, f.Pod.Message = "Failed", "snapshot sha256 mismatch"
			} else {
				f.Pod.Phase = "Succeeded"
			}
		}
	}
	if w.stopping > 0 {
		w.stopping--
	}
}

// run drives Decide until it returns None (or a RestoreFailed wait), checking the invariants
// on every step, and returns the kinds of the steps taken.
func run(t *testing.T, w *world) []plan.Kind {
	t.Helper()
	var kinds []plan.Kind
	for i := 0; i < 60; i++ {
		a := Decide(w.o)
		kinds = append(kinds, a.Kind)
		running := 0
		for _, f := range w.o.Founders {
			if f.Pod.Exists && (f.Pod.Deleting || f.Pod.Phase == "Running") {
				running++
			}
		}
		switch a.Kind {
		case RunRestorePod, CreateClaim, ResetMembership:
			for _, f := range w.o.Founders {
				if f.MemberPodExists {
					t.Fatalf("pass %d: %s %s while the member pod %s exists", i, a.Kind, a.Member, f.Name)
				}
			}
			if a.Kind == RunRestorePod && w.o.SequentialPods && running > 0 {
				t.Fatalf("pass %d: RunRestorePod %s while %d restore pods run, with SequentialPods", i, a.Member, running)
			}
			if a.Kind == RunRestorePod && !w.o.Founders[ordinal(t, a.Member)].ClaimExists {
				t.Fatalf("pass %d: RunRestorePod %s without its claim", i, a.Member)
			}
		case BeginRestore:
			if w.o.Record != nil && Active(w.o.Record) {
				t.Fatalf("pass %d: BeginRestore while a restore is under way", i)
			}
		}
		if a.Kind == plan.None || (a.Kind == plan.Wait && a.Reason == v1alpha1.ReasonRestoreFailed) {
			return kinds
		}
		w.apply(t, a)
		w.tick()
	}
	t.Fatalf("no end after 60 passes: %v", kinds)
	return nil
}

func ordinal(t *testing.T, name string) int {
	t.Helper()
	n, ok := plan.Ordinal("etcd", name)
	if !ok {
		t.Fatalf("bad member name %q", name)
	}
	return int(n)
}

func count(kinds []plan.Kind, k plan.Kind) int {
	n := 0
	for _, x := range kinds {
		if x == k {
			n++
		}
	}
	return n
}

func TestSimulateRestore(t *testing.T) {
	bootstrap := func(sequential bool) *world {
		o := base()
		o.Formed, o.Bootstrap, o.SequentialPods = false, &bootSrc, sequential
		for i := range o.Founders {
			o.Founders[i].ClaimExists = false
		}
		return &world{o: o, failures: map[string]int{}, fresh: map[string]bool{}}
	}
	recovery := func(sequential bool) *world {
		o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
		o.SequentialPods = sequential
		return &world{o: o, failures: map[string]int{}, fresh: map[string]bool{}}
	}
	tests := []struct {
		name     string
		w        *world
		fail     map[string]int
		phase    v1alpha1.RestorePhase
		attempts int32
		cause    string
		maxSteps int
	}{
		{name: "bootstrap", w: bootstrap(false), phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseBootstrap, maxSteps: 20},
		{name: "bootstrap, sequential pods", w: bootstrap(true), phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseBootstrap, maxSteps: 25},
		{name: "bootstrap, one restore pod fails once", w: bootstrap(false), fail: map[string]int{"etcd-1": 1},
			phase: v1alpha1.RestoreRestored, attempts: 1, cause: v1alpha1.RestoreCauseBootstrap, maxSteps: 25},
		{name: "bootstrap, one restore pod always fails: Failed after MaxAttempts", w: bootstrap(true), fail: map[string]int{"etcd-2": 100},
			phase: v1alpha1.RestoreFailed, attempts: 3, cause: v1alpha1.RestoreCauseBootstrap, maxSteps: 40},
		{name: "disaster recovery", w: recovery(false), phase: v1alpha1.RestoreRestored, cause: v1alpha1.RestoreCauseDisasterRecovery, maxSteps: 25},
		{name: "disaster recovery, sequential pods, one restore pod fails once", w: recovery(true), fail: map[string]int{"etcd-0": 1},
			phase: v1alpha1.RestoreRestored, attempts: 1, cause: v1alpha1.RestoreCauseDisasterRecovery, maxSteps: 35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.fail {
				tt.w.failures[k] = v
			}
			kinds := run(t, tt.w)
			r := tt.w.o.Record
			if r == nil || r.Phase != tt.phase || r.Attempts != tt.attempts || r.Cause != tt.cause {
				t.Fatalf("ended with record %+v, want phase %s attempts %d cause %s; steps %v", r, tt.phase, tt.attempts, tt.cause, kinds)
			}
			if len(kinds) > tt.maxSteps {
				t.Errorf("%d steps, want at most %d: %v", len(kinds), tt.maxSteps, kinds)
			}
			if n := count(kinds, BeginRestore); n != 1 {
				t.Errorf("%d BeginRestore, want 1: %v", n, kinds)
			}
			if tt.phase == v1alpha1.RestoreFailed {
				if count(kinds, DeleteRestorePod) != int(tt.attempts)-1 || !strings.Contains(r.Message, "snapshot sha256 mismatch") {
					t.Errorf("failed restore: steps %v, message %q", kinds, r.Message)
				}
				return
			}
			if n := count(kinds, RunRestorePod); n != len(tt.w.o.Founders)+int(tt.attempts) {
				t.Errorf("%d RunRestorePod, want %d: %v", n, len(tt.w.o.Founders)+int(tt.attempts), kinds)
			}
			if n := count(kinds, DeleteRestorePod); n != int(tt.attempts) {
				t.Errorf("%d DeleteRestorePod, want %d: %v", n, tt.attempts, kinds)
			}
			if r.CompletionTime == nil {
				t.Error("Restored without CompletionTime")
			}
			for _, f := range tt.w.o.Founders {
				if f.Pod.Exists || !f.ClaimExists {
					t.Errorf("founder %s at the end: %+v", f.Name, f)
				}
			}
			if tt.cause == v1alpha1.RestoreCauseDisasterRecovery {
				if count(kinds, plan.ScaleStatefulSet) != 1 || count(kinds, ResetMembership) != 1 {
					t.Errorf("disaster recovery without one scale to 0 and one ResetMembership: %v", kinds)
				}
				if !strings.Contains(r.Message, "writes after that backup are lost") {
					t.Errorf("message %q", r.Message)
				}
			}
		})
	}
}

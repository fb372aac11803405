package restore

import (
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// Rows for the review's safety findings: a bootstrap never restores over a member's data, an
// emptyDir cluster is never re-formed automatically, a recovery no longer wanted or needed is
// dropped before any member stops, and a source gone mid-restore fails the restore.
func TestRestoreSafetyRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Observation
		kind   plan.Kind
		reason string
		msg    string
		nilRec bool
	}{
		{name: "bootstrap onto a claim an etcd member ran on", o: func() Observation {
			o := base()
			o.Formed, o.Bootstrap = false, &bootSrc
			o.Founders[1].ClaimStamped = true
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonRestoreFailed, msg: "claim data-etcd-1 holds the data of an etcd member"},
		{name: "emptyDir cluster without quorum for good", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Ephemeral = true
			return o
		}(), kind: plan.Wait, reason: v1alpha1.ReasonDisasterRecoveryRequired, msg: "never re-forms a cluster itself"},
		{name: "stopping, but the policy went back to Manual", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryManual)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestoreFailed, msg: "no longer FromLatestBackup", nilRec: true},
		{name: "stopping, but quorum is back", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			o.QuorumLost = false
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestoreFailed, msg: "quorum is back", nilRec: true},
		{name: "stopping, still wanted and needed", o: func() Observation {
			o := disaster(v1alpha1.DisasterRecoveryFromLatestBackup)
			o.Record = record(v1alpha1.RestoreCauseDisasterRecovery, v1alpha1.RestoreStopping)
			return o
		}(), kind: plan.ScaleStatefulSet, reason: v1alpha1.ReasonRecoveringFromBackup, msg: "stopping every member"},
		{name: "the backup was deleted before every pod ran", o: func() Observation {
			o := restoring(Founder{Name: "etcd-0", ClaimExists: true, Pod: pod("Succeeded", "")}, Founder{Name: "etcd-1", ClaimExists: true})
			o.SourceProblem = "its EtcdBackup nightly was deleted during the restore"
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestoreFailed, msg: "etcd-1 cannot be restored: its EtcdBackup nightly was deleted"},
		{name: "the backup was deleted after every pod ran", o: func() Observation {
			o := restoring(Founder{Name: "etcd-0", ClaimExists: true, Pod: pod("Succeeded", "")})
			o.SourceProblem = "its EtcdBackup nightly was deleted during the restore"
			return o
		}(), kind: FinishRestore, reason: v1alpha1.ReasonRestored, msg: "every founding member's data was restored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Decide(tc.o)
			if a.Kind != tc.kind || a.Reason != tc.reason || !strings.Contains(a.Message, tc.msg) {
				t.Fatalf("Decide = %s %s %q, want %s %s containing %q", a.Kind, a.Reason, a.Message, tc.kind, tc.reason, tc.msg)
			}
			if tc.nilRec && a.Record != nil {
				t.Fatalf("record %+v, want it dropped", a.Record)
			}
		})
	}
}

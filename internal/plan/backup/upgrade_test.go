package backup

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// TestBeforeUpgrade: with spec.backup set, a rollout step of a minor upgrade waits for the
// backup taken before it, which it asks to create when there is none; a patch upgrade, a
// backup that succeeded, or no spec.backup lets the step through.
func TestBeforeUpgrade(t *testing.T) {
	restart := plan.Step{Kind: plan.DeletePod, Member: "etcd-2", Reason: v1alpha1.ReasonRollingOut}
	backup := func(version string, phase v1alpha1.BackupPhase) v1alpha1.EtcdBackup {
		b := v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "etcd-before-" + strings.ReplaceAll(version, ".", "-"),
			Labels: map[string]string{v1alpha1.LabelBackupBeforeUpgrade: version}}}
		b.Status.Phase = phase
		return b
	}
	tests := []struct {
		name      string
		backupSet bool
		s         plan.Step
		step, run string
		backups   []v1alpha1.EtcdBackup
		kind      plan.Kind
		reason    string
		create    string
	}{
		{"no spec.backup", false, restart, "3.6.0", "3.5.17", nil, plan.DeletePod, "", ""},
		{"a wait stands as it is", true, plan.Step{Kind: plan.Wait}, "3.6.0", "3.5.17", nil, plan.Wait, "", ""},
		{"running version unknown", true, restart, "3.6.0", "", nil, plan.DeletePod, "", ""},
		{"a patch upgrade", true, restart, "3.5.18", "3.5.17", nil, plan.DeletePod, "", ""},
		{"a minor upgrade without its backup: create it, wait", true, restart, "3.6.0", "3.5.17", nil, plan.Wait, v1alpha1.ReasonWaitingForBackup, "etcd-before-3-6-0"},
		{"another version's backup does not count", true, restart, "3.6.0", "3.5.17", []v1alpha1.EtcdBackup{backup("3.5.0", v1alpha1.BackupSucceeded)},
			plan.Wait, v1alpha1.ReasonWaitingForBackup, "etcd-before-3-6-0"},
		{"its backup runs", true, restart, "3.6.0", "3.5.17", []v1alpha1.EtcdBackup{backup("3.6.0", v1alpha1.BackupRunning)}, plan.Wait, v1alpha1.ReasonWaitingForBackup, ""},
		{"its backup failed", true, restart, "3.6.0", "3.5.17", []v1alpha1.EtcdBackup{backup("3.6.0", v1alpha1.BackupFailed)}, plan.Wait, v1alpha1.ReasonBackupFailed, ""},
		{"its backup succeeded", true, restart, "3.6.0", "3.5.17", []v1alpha1.EtcdBackup{backup("3.6.0", v1alpha1.BackupSucceeded)}, plan.DeletePod, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BeforeUpgrade("etcd", tt.backupSet, tt.s, tt.step, tt.run, tt.backups)
			if got.Kind != tt.kind || (tt.reason != "" && got.Reason != tt.reason) {
				t.Fatalf("step %+v, want %s %s", got, tt.kind, tt.reason)
			}
			create := got.Backup
			switch {
			case tt.create == "" && create != nil:
				t.Fatalf("creates %+v", create)
			case tt.create != "" && (create == nil || create.Name != tt.create || create.Labels[v1alpha1.LabelBackupBeforeUpgrade] != tt.step):
				t.Fatalf("creates %+v, want %s", create, tt.create)
			}
		})
	}
}

package backup

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// BeforeUpgrade holds a rollout step s that disrupts a member until the backup taken before a
// minor-version upgrade (from running to stepVersion) succeeded, when spec.backup is set
// (backupSet). backups are the cluster's EtcdBackups. It returns the step to take instead (a
// wait), or s unchanged. When that backup does not exist yet, the wait carries it (Backup):
// the executor creates it when the wait is the pass's step.
func BeforeUpgrade(cluster string, backupSet bool, s plan.Step, stepVersion, running string, backups []v1alpha1.EtcdBackup) plan.Step {
	if !backupSet || s.Kind == plan.None || s.Kind == plan.Wait || running == "" || stepVersion == "" {
		return s
	}
	if !minorUpgrade(running, stepVersion) {
		return s
	}
	var found *v1alpha1.EtcdBackup
	for i := range backups {
		if backups[i].Labels[v1alpha1.LabelBackupBeforeUpgrade] == stepVersion {
			found = &backups[i]
		}
	}
	name := fmt.Sprintf("%s-before-%s", cluster, strings.ReplaceAll(stepVersion, ".", "-"))
	switch {
	case found == nil:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonWaitingForBackup,
			Message: fmt.Sprintf("upgrading from %s to %s: taking backup %s first", running, stepVersion, name), RequeueAfter: 2 * time.Second,
			Backup: &plan.BackupRequest{Name: name, Labels: map[string]string{v1alpha1.LabelBackupBeforeUpgrade: stepVersion}}}
	case found.Status.Phase == v1alpha1.BackupSucceeded:
		return s
	case found.Status.Phase == v1alpha1.BackupFailed:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonBackupFailed,
			Message: fmt.Sprintf("the upgrade to %s waits for backup %s, which failed (%s); fix the destination and delete EtcdBackup %s to take it again",
				stepVersion, found.Name, CompleteMessage(found), found.Name)}
	}
	return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonWaitingForBackup,
		Message: fmt.Sprintf("upgrading from %s to %s: waiting for backup %s (%s)", running, stepVersion, found.Name, strings.ToLower(string(found.Status.Phase))), RequeueAfter: 2 * time.Second}
}

// minorUpgrade reports whether going from version a to b raises the minor version.
func minorUpgrade(a, b string) bool {
	va, err1 := versions.Parse(a)
	vb, err2 := versions.Parse(b)
	return err1 == nil && err2 == nil && va.Less(vb) && va.MinorString() != vb.MinorString()
}

// CompleteMessage is what backup b's Complete condition says ("no reason recorded" without
// one).
func CompleteMessage(b *v1alpha1.EtcdBackup) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionComplete); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "no reason recorded"
}

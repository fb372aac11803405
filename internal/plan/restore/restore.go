// Package restore is the restore planner: it re-creates a cluster's data from a snapshot, for
// spec.bootstrap (before the founding members first start) and for disaster recovery (when
// quorum is lost and cannot come back because a majority of the members lost their data). It
// is pure: one observation in, at most one step out. The controller carries the step out,
// behind the safety gate.
//
// Flows, one step per pass:
//
//   - bootstrap: BeginRestore → (per founder) CreateClaim → RunRestorePod → FinishRestore; the
//     controller applies the StatefulSet only once the restore finished, so no founder ever
//     starts on an empty volume; the membership planner then forms the cluster.
//   - disaster recovery: BeginRestore (phase Stopping) → ScaleStatefulSet(0) → ResetMembership
//     (the membership record of the lost cluster is dropped: claims' member stamps, the intent,
//     the founding list; phase Restoring) → the bootstrap flow from CreateClaim on.
//
// A restore pod fetches and checks the snapshot, sets aside whatever data the claim held (never
// deletes it), and restores with etcdutl of the cluster's etcd version. Every founder is
// restored with the same member list and a cluster token that ends in the restore's ID, so the
// restored members form one new cluster with a new cluster ID.
package restore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// Step kinds of the restore planner.
const (
	// BeginRestore records the restore (status.restore) with Record.
	BeginRestore plan.Kind = "BeginRestore"
	// ResetMembership drops the lost cluster's membership record (claims' member stamps, the
	// intent, the membership ConfigMap) and moves the restore to Restoring.
	ResetMembership plan.Kind = "ResetMembership"
	// CreateClaim creates the data claim of founder Member from the StatefulSet's template.
	CreateClaim plan.Kind = "CreateClaim"
	// RunRestorePod creates the restore pod of founder Member.
	RunRestorePod plan.Kind = "RunRestorePod"
	// DeleteRestorePod deletes a failed restore pod of Member, so it is run again.
	DeleteRestorePod plan.Kind = "DeleteRestorePod"
	// FinishRestore marks the restore Restored (or Failed, with Message, when Failed is set).
	FinishRestore plan.Kind = "FinishRestore"
	// CleanUp deletes the restore pods once the restored cluster formed.
	CleanUp plan.Kind = "CleanUpRestore"
)

// Source is a snapshot that can be restored.
type Source struct {
	// Backup is the EtcdBackup's name, when the snapshot is one.
	Backup string
	// Location is the snapshot object, as status shows it (s3://bucket/key or claim:path).
	Location string
	// SHA256 is the expected sha256 of the object, when known.
	SHA256 string
	// Revision is the snapshot's etcd revision, when known.
	Revision int64
	// Time is when the snapshot was taken, when known.
	Time time.Time
	// EtcdVersion is the version of etcd that took the snapshot.
	EtcdVersion string
}

// PodState is what the controller knows of one founder's restore pod.
type PodState struct {
	Exists   bool
	Deleting bool
	// Phase is the pod's phase (Pending, Running, Succeeded, Failed).
	Phase string
	// Message is the restore pod's report (its termination message), or why it failed.
	Message string
	// Revision is the snapshot's revision the restore pod read from it, 0 when unknown.
	Revision int64
}

// Founder is one founding member of the restore.
type Founder struct {
	// Name is the pod (and member) name.
	Name string
	// ClaimExists is true when its data claim exists.
	ClaimExists bool
	// Pod is its restore pod.
	Pod PodState
	// MemberPodExists is true when the member's own pod (the StatefulSet's) exists.
	MemberPodExists bool
	// MemberPodStuck says why the member's pod may never go by itself (it is being deleted on
	// a node that is not ready, so no kubelet confirms that its containers stopped), naming
	// the node and the manual step; empty otherwise.
	MemberPodStuck string
	// ClaimStamped is true when its claim carries a member stamp: an etcd member ran on it,
	// so it holds data a bootstrap restore must not replace.
	ClaimStamped bool
}

// Observation is one pass's view for the restore planner. The caller must guarantee that
// QuorumLost comes from etcd in this pass, and DataGone from the claims of this pass.
type Observation struct {
	// ClusterUID is the EtcdCluster's UID: restore IDs derive from it.
	ClusterUID string
	// Name and Namespace of the EtcdCluster, for the commands messages name.
	Name, Namespace string
	// Record is status.restore, nil when the cluster was never restored.
	Record *v1alpha1.RestoreStatus
	// Formed is true when the cluster has formed (status.clusterID is set).
	Formed bool
	// Bootstrap is spec.bootstrap's snapshot, nil without spec.bootstrap; BootstrapProblem
	// says why it cannot be restored (a backup not found or not Succeeded, a version pair etcd
	// does not support), empty when it can.
	Bootstrap        *Source
	BootstrapProblem string
	// BootstrapWaiting says why spec.bootstrap's snapshot is not ready yet (a backup still
	// running): the founders wait, and nothing is wrong.
	BootstrapWaiting string
	// Policy and After are spec.disasterRecovery.
	Policy v1alpha1.DisasterRecoveryPolicy
	After  time.Duration
	// QuorumLost is true when this pass proves that etcd has no quorum (plan.JudgeQuorum:
	// members answered without a leader or do not run etcd at all, too few to make a quorum in
	// any voter set etcd may have).
	QuorumLost bool
	// QuorumUnknown says why this pass can prove neither that quorum serves nor that it is
	// lost (members whose etcd runs do not answer the operator, no member list is recorded);
	// empty otherwise. Nothing irreversible is done while it is set.
	QuorumUnknown string
	// QuorumLostSince is since when this process has seen quorum lost.
	QuorumLostSince time.Time
	// Voters is the number of voting members the lost cluster had, from the member list last
	// read with a quorum (plan.MemberRecord).
	Voters int32
	// DataGone names the voting members whose data is gone (their claim deleted or replaced
	// by an empty one); DataKept those whose data is still there.
	DataGone, DataKept []string
	// DataMayReturn says why a quorum may still hold its data although DataKept is short of
	// one (a membership change in flight gives etcd another voter set, or no member list is
	// recorded); empty otherwise (plan.JudgeData).
	DataMayReturn string
	// Latest is the newest Succeeded backup of this cluster, nil when none.
	Latest *Source
	// StsReplicas is the StatefulSet's .spec.replicas (0 when it does not exist).
	StsReplicas int32
	// Founders are the members the restore forms, in ordinal order.
	Founders []Founder
	// Ephemeral is true under emptyDir storage: stopping the members deletes their data, and
	// there is no claim to restore into, so disaster recovery is never automatic.
	Ephemeral bool
	// SourceProblem says why the snapshot of the restore under way cannot be read any more
	// (its EtcdBackup deleted): restore pods that still have to run cannot.
	SourceProblem string
	// MaxAttempts is how many failed restore pods end the restore (Failed).
	MaxAttempts int32
	// SequentialPods runs one restore pod at a time (the snapshot is on a claim that only one
	// pod may mount at once).
	SequentialPods bool
	// Now is the time of the observation.
	Now time.Time
}

// Action is the planner's answer: a step, and when it is BeginRestore or FinishRestore, the
// record to store.
type Action struct {
	plan.Step
	// Record is the new status.restore for BeginRestore, FinishRestore and ResetMembership.
	Record *v1alpha1.RestoreStatus
}

// Active reports whether a restore is under way: the membership planner and the rollout must
// not act while it is.
func Active(r *v1alpha1.RestoreStatus) bool {
	return r != nil && (r.Phase == v1alpha1.RestoreStopping || r.Phase == v1alpha1.RestoreRestoring)
}

// HoldStatefulSet reports whether the StatefulSet must not be applied yet: a bootstrap restore
// has not finished, so founders would start on empty volumes.
func HoldStatefulSet(bootstrap bool, formed bool, r *v1alpha1.RestoreStatus) bool {
	return bootstrap && !formed && (r == nil || r.Phase != v1alpha1.RestoreRestored)
}

// ID derives a restore's ID from the cluster, the cause, the snapshot and the restore before
// it, so a pass that repeats BeginRestore (its status write was lost) picks the same ID.
func ID(clusterUID, cause, location, previous string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{clusterUID, cause, location, previous}, "\x00")))
	return hex.EncodeToString(h[:])[:10]
}

// Token is the cluster token of a restore: the restored cluster's ID derives from it, so it
// differs from the lost cluster's.
func Token(base, id string) string { return base + "-restore-" + id }

// PodName names founder k's restore pod of restore id.
func PodName(cluster, id string, k int32) string {
	return fmt.Sprintf("%s-restore-%s-%d", cluster, id[:min(len(id), 6)], k)
}

func wait(reason, msg string) Action {
	return Action{Step: plan.Step{Kind: plan.Wait, Reason: reason, Message: msg}}
}

func step(kind plan.Kind, member, reason, msg string) Action {
	return Action{Step: plan.Step{Kind: kind, Member: member, Reason: reason, Message: msg}}
}

// Decide returns the one next restore step, None when no restore is wanted or under way.
func Decide(o Observation) Action {
	r := o.Record
	switch {
	case r != nil && r.Phase == v1alpha1.RestoreFailed && (!o.Formed || o.QuorumLost):
		// A failed restore waits for the user; it never starts another by itself. Only a
		// cluster that formed and serves again leaves it behind.
		return wait(v1alpha1.ReasonRestoreFailed, r.Message)
	case Active(r):
		return o.continueRestore()
	case r != nil && r.Phase == v1alpha1.RestoreRestored && o.Formed:
		for _, f := range o.Founders {
			if f.Pod.Exists && !f.Pod.Deleting {
				return step(CleanUp, f.Name, v1alpha1.ReasonRestored, "the restored cluster formed; deleting the restore pods")
			}
		}
	}
	if o.Bootstrap != nil && !o.Formed && r == nil {
		if o.BootstrapProblem != "" {
			return wait(v1alpha1.ReasonRestoreFailed, o.BootstrapProblem)
		}
		if o.BootstrapWaiting != "" {
			return wait(v1alpha1.ReasonRestoring, o.BootstrapWaiting)
		}
		for _, f := range o.Founders {
			if f.ClaimStamped {
				return wait(v1alpha1.ReasonRestoreFailed, fmt.Sprintf("claim data-%s holds the data of an etcd member that ran on it (an earlier cluster of this name): "+
					"spec.bootstrap never replaces it. Re-create the cluster without spec.bootstrap to run on that data, or delete the claims to restore", f.Name))
			}
		}
		return o.begin(v1alpha1.RestoreCauseBootstrap, *o.Bootstrap, v1alpha1.RestoreRestoring,
			fmt.Sprintf("restoring the %d founding members from %s before etcd first starts", len(o.Founders), describe(*o.Bootstrap)))
	}
	if o.Formed && o.QuorumLost {
		return o.disaster()
	}
	if o.Formed && o.QuorumUnknown != "" && o.hopeless() && o.Policy == v1alpha1.DisasterRecoveryFromLatestBackup {
		// Disaster recovery would start if quorum were known to be lost: say what keeps it.
		return wait(v1alpha1.ReasonEtcdUnreachable, fmt.Sprintf("%d of %d voting members lost their data (%s), but disaster recovery does not start: "+
			"quorum is not known to be lost (%s). The operator restores nothing while members may still serve: "+
			"check that it can reach them (DNS, NetworkPolicy, its client certificate), or that the pods of members that are gone are deleted",
			len(o.DataGone), o.Voters, strings.Join(o.DataGone, ", "), o.QuorumUnknown))
	}
	return Action{Step: plan.Step{Kind: plan.None}}
}

// hopeless reports whether fewer voting members than quorum needs keep their data, in every
// voter set etcd may have, and every recorded voter's data holder was accounted for.
func (o Observation) hopeless() bool {
	return o.Voters > 0 && len(o.DataKept) < int(plan.Quorum(o.Voters)) && len(o.DataKept)+len(o.DataGone) == int(o.Voters) && o.DataMayReturn == ""
}

func describe(s Source) string {
	d := s.Location
	if s.Backup != "" {
		d = "backup " + s.Backup + " (" + s.Location + ")"
	}
	if s.Revision > 0 {
		d += fmt.Sprintf(", revision %d", s.Revision)
	}
	if !s.Time.IsZero() {
		d += ", taken " + s.Time.UTC().Format(time.RFC3339)
	}
	return d
}

func (o Observation) begin(cause string, s Source, phase v1alpha1.RestorePhase, msg string) Action {
	prev := ""
	if o.Record != nil {
		prev = o.Record.ID
	}
	rec := &v1alpha1.RestoreStatus{
		ID: ID(o.ClusterUID, cause, s.Location, prev), Cause: cause, Phase: phase,
		Backup: s.Backup, Location: s.Location, SHA256: s.SHA256, Revision: s.Revision, EtcdVersion: s.EtcdVersion,
		Message: msg,
	}
	if !s.Time.IsZero() {
		t := s.Time
		rec.SnapshotTime = metaTime(t)
	}
	rec.StartTime = *metaTime(o.Now)
	reason := v1alpha1.ReasonRestoring
	if cause == v1alpha1.RestoreCauseDisasterRecovery {
		reason = v1alpha1.ReasonRecoveringFromBackup
	}
	return Action{Step: plan.Step{Kind: BeginRestore, Reason: reason, Message: msg}, Record: rec}
}

// disaster decides on a quorum loss of a formed cluster.
func (o Observation) disaster() Action {
	if !o.hopeless() {
		// The members are only down (their data can bring quorum back), or not every voter's
		// data holder was accounted for: never restore then.
		return Action{Step: plan.Step{Kind: plan.None}}
	}
	lost := o.Now.Sub(o.QuorumLostSince)
	if o.QuorumLostSince.IsZero() || lost < o.After {
		left := o.After
		if !o.QuorumLostSince.IsZero() && lost > 0 {
			left = o.After - lost
		}
		return Action{Step: plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonQuorumLost, RequeueAfter: left,
			Message: fmt.Sprintf("quorum is lost and %d of %d voting members lost their data (%s): quorum cannot come back. "+
				"Disaster recovery (%s) starts once this has lasted %s", len(o.DataGone), o.Voters, strings.Join(o.DataGone, ", "), o.Policy, o.After)}}
	}
	if o.Ephemeral {
		return wait(v1alpha1.ReasonDisasterRecoveryRequired, fmt.Sprintf("quorum is lost and cannot come back: %d of %d voting members lost their emptyDir data (%s). "+
			"Under storage.ephemeral the operator never re-forms a cluster itself (stopping the members would delete the data that is left): "+
			"create a new EtcdCluster with spec.bootstrap from the newest backup (see the README, Disaster recovery)", len(o.DataGone), o.Voters, strings.Join(o.DataGone, ", ")))
	}
	gone := fmt.Sprintf("quorum is lost and cannot come back: %d of %d voting members lost their data (%s)", len(o.DataGone), o.Voters, strings.Join(o.DataGone, ", "))
	if len(o.DataKept) > 0 {
		gone += fmt.Sprintf("; the data of %s is kept and set aside on its claim (data.before-restore-<id>) when the cluster is re-formed", strings.Join(o.DataKept, ", "))
	}
	if o.Latest == nil {
		return wait(v1alpha1.ReasonNoBackupToRestore, gone+". No Succeeded EtcdBackup of this cluster exists to re-form it from. "+
			"Restore by hand from a snapshot you hold: create a new EtcdCluster with spec.bootstrap.fromObject (see the README, Disaster recovery)")
	}
	if o.Policy != v1alpha1.DisasterRecoveryFromLatestBackup {
		return wait(v1alpha1.ReasonDisasterRecoveryRequired, gone+fmt.Sprintf(". The newest verified backup is %s; writes after it would be lost. "+
			"spec.disasterRecovery.policy is Manual, so the operator changes nothing. To re-form the cluster from that backup, run: "+
			"kubectl -n %s patch etcdcluster %s --type merge -p '{\"spec\":{\"disasterRecovery\":{\"policy\":\"FromLatestBackup\"}}}' "+
			"(see the README, Disaster recovery)", describe(*o.Latest), o.Namespace, o.Name))
	}
	return o.begin(v1alpha1.RestoreCauseDisasterRecovery, *o.Latest, v1alpha1.RestoreStopping,
		gone+fmt.Sprintf(". Re-forming the cluster from %s: writes after that backup are lost", describe(*o.Latest)))
}

// stuckNote is what a message adds to the name of a member pod that may never go by itself.
func stuckNote(f Founder) string {
	if f.MemberPodStuck == "" {
		return ""
	}
	return " (" + f.MemberPodStuck + ")"
}

// continueRestore is the next step of a restore under way.
func (o Observation) continueRestore() Action {
	r := o.Record
	reason := v1alpha1.ReasonRestoring
	if r.Cause == v1alpha1.RestoreCauseDisasterRecovery {
		reason = v1alpha1.ReasonRecoveringFromBackup
	}
	if r.Phase == v1alpha1.RestoreStopping {
		if o.StsReplicas > 0 {
			// Nothing is stopped yet: the recovery goes on only while it is still wanted and
			// still needed; otherwise its record is dropped and the cluster is judged afresh.
			// Stopping the members is irreversible: it needs proof in this pass that quorum is
			// lost, and waits while that is not known.
			if o.Policy == v1alpha1.DisasterRecoveryFromLatestBackup && o.QuorumUnknown != "" {
				return wait(reason, "no member is stopped while quorum is not known to be lost: "+o.QuorumUnknown)
			}
			if why := ""; o.Policy != v1alpha1.DisasterRecoveryFromLatestBackup || !o.QuorumLost || !o.hopeless() {
				switch {
				case o.Policy != v1alpha1.DisasterRecoveryFromLatestBackup:
					why = "spec.disasterRecovery.policy is no longer FromLatestBackup"
				case !o.QuorumLost:
					why = "quorum is back"
				default:
					why = "a quorum of members has its data again"
				}
				return Action{Step: plan.Step{Kind: FinishRestore, Reason: v1alpha1.ReasonRestoreFailed,
					Message: "the disaster recovery from " + r.Location + " is abandoned before any member was stopped: " + why}}
			}
			a := step(plan.ScaleStatefulSet, "", reason, "stopping every member before the cluster is re-formed from "+r.Location)
			a.Replicas = 0
			return a
		}
		var running []string
		for _, f := range o.Founders {
			if f.MemberPodExists {
				running = append(running, f.Name+stuckNote(f))
			}
		}
		if len(running) > 0 {
			return wait(reason, "waiting for the member pods to stop: "+strings.Join(running, ", "))
		}
		next := *r
		next.Phase, next.Message = v1alpha1.RestoreRestoring, "restoring every member's data from "+r.Location
		return Action{Step: plan.Step{Kind: ResetMembership, Reason: reason,
			Message: "every member stopped; dropping the lost cluster's membership record"}, Record: &next}
	}
	if len(o.Founders) == 0 {
		return wait(reason, "waiting for the founding member list")
	}
	var pending, running []string
	for _, f := range o.Founders {
		switch {
		case f.MemberPodExists:
			// A member pod would start etcd on the claim while it is restored.
			return wait(reason, "waiting for the member pod "+f.Name+stuckNote(f)+" to go before its data is restored")
		case !f.ClaimExists:
			return step(CreateClaim, f.Name, reason, "creating the data claim of "+f.Name+" to restore into")
		case f.Pod.Deleting:
			running = append(running, f.Name)
		case !f.Pod.Exists:
			pending = append(pending, f.Name)
		case f.Pod.Phase == "Failed":
			if r.Attempts+1 >= o.MaxAttempts {
				next := *r
				next.Phase = v1alpha1.RestoreFailed
				next.Attempts++
				next.Message = fmt.Sprintf("restoring %s failed %d times; last: %s. Fix the cause, then delete and re-create the EtcdCluster "+
					"(its claims keep any data set aside)", f.Name, next.Attempts, f.Pod.Message)
				return Action{Step: plan.Step{Kind: FinishRestore, Member: f.Name, Reason: v1alpha1.ReasonRestoreFailed, Message: next.Message}, Record: &next}
			}
			next := *r
			next.Attempts++
			a := step(DeleteRestorePod, f.Name, reason, fmt.Sprintf("the restore pod of %s failed (%s); running it again", f.Name, f.Pod.Message))
			a.Record = &next
			return a
		case f.Pod.Phase != "Succeeded":
			running = append(running, f.Name)
		}
	}
	// pending is in ordinal order (Founders is).
	if len(pending) > 0 && o.SourceProblem != "" {
		next := *r
		next.Phase = v1alpha1.RestoreFailed
		next.Message = fmt.Sprintf("the data of %s cannot be restored: %s", strings.Join(pending, ", "), o.SourceProblem)
		return Action{Step: plan.Step{Kind: FinishRestore, Reason: v1alpha1.ReasonRestoreFailed, Message: next.Message}, Record: &next}
	}
	if len(pending) > 0 && (!o.SequentialPods || len(running) == 0) {
		return step(RunRestorePod, pending[0], reason, "restoring the data of "+pending[0]+" from "+r.Location)
	}
	if len(running) > 0 || len(pending) > 0 {
		return wait(reason, "restoring the data of "+strings.Join(append(running, pending...), ", ")+" from "+r.Location)
	}
	next := *r
	next.Phase, next.CompletionTime = v1alpha1.RestoreRestored, metaTime(o.Now)
	// The revision read from the snapshot itself is exact; a backup records the revision of
	// the member when the snapshot was requested, which may be lower.
	for _, f := range o.Founders {
		next.Revision = max(next.Revision, f.Pod.Revision)
	}
	next.Message = fmt.Sprintf("every founding member's data was restored from %s", r.Location)
	if next.Revision > 0 {
		next.Message += fmt.Sprintf(" (revision %d)", next.Revision)
	}
	if r.Cause == v1alpha1.RestoreCauseDisasterRecovery {
		next.Message += "; writes after that backup are lost"
	}
	return Action{Step: plan.Step{Kind: FinishRestore, Reason: v1alpha1.ReasonRestored, Message: next.Message}, Record: &next}
}

// VersionPairProblem says why a snapshot of etcd version from cannot be restored into etcd
// version to: etcd restores a snapshot into the same minor or the next one.
func VersionPairProblem(from, to string) string {
	if from == "" {
		return ""
	}
	f, ferr := versions.Parse(from)
	t, terr := versions.Parse(to)
	if ferr != nil || terr != nil {
		return fmt.Sprintf("the snapshot's etcd version %q or the cluster's %q is not a release version", from, to)
	}
	if f.Major == t.Major && (t.Minor == f.Minor || t.Minor == f.Minor+1) {
		return ""
	}
	return fmt.Sprintf("a snapshot of etcd %s cannot be restored into etcd %s: etcd supports restoring into the same minor version or the next one; "+
		"restore into %s and upgrade step by step", from, to, f.MinorString())
}

// Package plan holds what every planner and the executor share: the Step a planner proposes,
// the evidence a pass gathered (Evidence, Pod), the membership Intent that survives a crash,
// and the safety gate (Check) that every proposed step passes before it runs, whatever planner
// proposed it. It is pure: no I/O, no clock.
package plan

import "time"

// Pod is what the controller knows of one ordinal of the StatefulSet: its pod and its
// data volume claim. The controller passes one podInfo for every ordinal that has a pod or a
// claim, whatever the StatefulSet's replicas; an ordinal missing from the list has neither.
type Pod struct {
	// Name is the pod's name, "<statefulset>-<ordinal>"; it is also the etcd member's name.
	Name    string
	Ordinal int32

	// Exists is true when the pod object exists; the fields below about the pod are
	// meaningful only then.
	Exists bool
	// Deleting is true when the pod has a deletion timestamp.
	Deleting bool
	// Running is true when the etcd container is running.
	Running bool
	// Started is true when the etcd container runs and passed its startup probe: its
	// listeners are up, so etcd can be asked (a client waits its whole timeout, reconnecting
	// with back-off, for a listener that is not up yet).
	Started bool
	// Ready is true when the etcd container reports ready (the pod's Ready condition needs
	// every container, sidecars included). It is false on a node that is not ready: no
	// kubelet reports there, and the container's last report is no evidence.
	Ready bool
	// NodeReady is false when the pod's node reports Ready False or Unknown. A pod not
	// scheduled yet counts as on a ready node.
	NodeReady bool
	// NodeNotReadySince is the last transition time of the node's Ready condition when
	// NodeReady is false.
	NodeNotReadySince time.Time
	// CrashLooping is true when the etcd container waits in CrashLoopBackOff.
	CrashLooping bool
	// CreatedAt is the pod's creation time.
	CreatedAt time.Time
	// LastExitAt is when the etcd container last finished (its current or last termination
	// state); zero when it never ended. LastExitRunAt is when that run had started.
	LastExitAt, LastExitRunAt time.Time
	// RunAt is when the etcd container's latest run started (the one running, else the one
	// that ended last); zero when it never ran.
	RunAt time.Time
	// FailingSince is when the pod last stopped being Ready (the Ready condition's last
	// transition time), or its creation time when it never was.
	FailingSince time.Time
	// RestartCount of the etcd container, for messages.
	RestartCount int32
	// Revision is the StatefulSet template revision the pod runs (controller-revision-hash).
	Revision string
	// Problem says why the etcd container does not run (waiting reason and message, last exit),
	// for messages; empty when it runs.
	Problem string

	// PVCExists is true when the ordinal's data claim exists (terminating or not).
	PVCExists bool
	// PVCUID is the claim's UID: an intent remembers the claim that held old data, so a later
	// pass can tell it from a claim created since.
	PVCUID string
	// PVCDeleting is true when the claim has a deletion timestamp (kept by the
	// pvc-protection finalizer while a pod uses it).
	PVCDeleting bool
	// PVCHeld is true when the ordinal's pod, which mounts the claim, exists and has not
	// terminated: the pvc-protection finalizer keeps a claim being deleted, and its data,
	// while it does.
	PVCHeld bool
	// DataStamp is the member ID (hexadecimal) stamped on the ordinal's data holder (its
	// claim, or its pod under emptyDir storage) once that member ran on it; "" when none.
	// The disaster recovery's evidence reads it, and the executor stamps only holders without
	// one.
	DataStamp string
	// MissingSince is, for an ordinal whose started member has no pod, since when the
	// operator has seen it missing (zero when the pod exists or nothing is known).
	MissingSince time.Time
	// Ephemeral is true when the member keeps its data in an emptyDir: then the pod plays the
	// claim (PVCExists is Exists, PVCUID is the pod's UID) and no claim may be deleted.
	Ephemeral bool
	// UID is the pod's UID, for the delete precondition.
	UID string

	// PVCFresh is true when the claim is not known to hold the data of the started member
	// etcd lists under this name. The controller must decide it from a record that survives
	// an operator restart, such as the member ID it writes on the claim (an annotation). It
	// may record a learner's claim whenever it sees the learner run on it (a learner's data is
	// disposable, and a learner may move to a fresh claim), but a voting member's claim only
	// when that member cannot have restarted on it empty: a record written for a voting
	// member that restarted on a new volume would hide that its data is gone. For a voting
	// member, true means its data is gone and it is replaced; for a learner, true holds its
	// promotion until the claim is recorded.
	PVCFresh bool
}

package plan

import "time"

// Kind is the kind of a step.
type Kind string

const (
	// None: the membership matches the spec; nothing to do.
	None Kind = "None"
	// Wait: nothing can be done safely now; Reason and Message say what is awaited.
	// RequeueAfter, when set, is when the situation changes by itself (a timeout).
	Wait Kind = "Wait"
	// RecordIntent: store Intent before the next step.
	RecordIntent Kind = "RecordIntent"
	// ClearIntent: the change is finished (or abandoned); remove the stored intent.
	ClearIntent Kind = "ClearIntent"
	// AddLearner: add a learner with PeerURL for Member.
	AddLearner Kind = "AddLearner"
	// PromoteLearner: promote the learner ID.
	PromoteLearner Kind = "PromoteLearner"
	// MoveLeader: ask the leader ID (named Member) to hand leadership to Target.
	MoveLeader Kind = "MoveLeader"
	// RemoveMember: remove member ID; a member already gone is success.
	RemoveMember Kind = "RemoveMember"
	// ScaleStatefulSet: set the StatefulSet's .spec.replicas to Replicas.
	ScaleStatefulSet Kind = "ScaleStatefulSet"
	// DeletePVC: delete the data claim of the pod Member.
	DeletePVC Kind = "DeletePVC"
	// DeletePod: delete the pod Member (with grace period 0 when Force: its node is not
	// ready, so the kubelet will never confirm). Membership returns it only for a pod whose
	// member is not a voting member, so a zombie process cannot harm the cluster; the rollout
	// returns it to restart one member at a time onto a new pod template, with quorum intact.
	DeletePod Kind = "DeletePod"
	// AdvanceLog appends Entries raft entries that change no key (lease grant/revoke), so
	// every member snapshots past the log entries etcd 3.7 cannot replay.
	AdvanceLog Kind = "AdvanceLog"
	// Defragment: defragment the member ID (named Member), on its own client URL. The member
	// serves no reads or writes while it runs and may miss heartbeats, so the gate treats it
	// as taking a voting member down, and refuses it for the leader of several voters.
	Defragment Kind = "Defragment"
	// Compact: compact the keyspace to Revision (the history before it is discarded). A
	// revision already compacted is success.
	Compact Kind = "Compact"
	// DisarmAlarm: disarm the alarm Alarm of member ID (named Member, when it has a name). The
	// gate allows only AlarmNoSpace; a CORRUPT alarm is never disarmed by the operator.
	DisarmAlarm Kind = "DisarmAlarm"
	// EnsureRootUser: create the etcd user User if it does not exist (root with the password
	// from its Secret; the operator's user without a password: it authenticates by its client
	// certificate's common name) and grant it the root role.
	EnsureRootUser Kind = "EnsureRootUser"
	// AdoptOperatorUser: issue the operator's client certificate (Operator source) again with
	// the common name User, the cluster's own; the certificate keeps that name from then on.
	// The planner asks for it only once that user has the root role in etcd, or
	// authentication is off; the gate checks the same in this pass's reading.
	AdoptOperatorUser Kind = "AdoptOperatorUser"
	// RemoveUser: delete the etcd user User (the operator's former one); a user that does not
	// exist is success.
	RemoveUser Kind = "RemoveUser"
	// EnableAuth turns etcd's authentication on; DisableAuth turns it off.
	EnableAuth  Kind = "EnableAuth"
	DisableAuth Kind = "DisableAuth"
	// UpdatePeerURL: set member ID's (named Member) peer URLs to PeerURL alone, a step of a
	// switch of the peer side between plain and TLS (internal/plan/peerswitch). The gate lets
	// it pass only when every voter is healthy and the member answered at PeerURL in this
	// pass, as a member of this cluster.
	UpdatePeerURL Kind = "UpdatePeerURL"
	// ExpandClaim: set the data claim of the pod Member to ask for Size (it only grows). The
	// storage grows the volume; the member keeps running.
	ExpandClaim Kind = "ExpandClaim"
	// RecreateStatefulSet: delete the StatefulSet while orphaning its pods (and their claims),
	// so that the next apply creates it with the claim template's new size; the operator
	// creates it with the replicas that keep every member pod.
	RecreateStatefulSet Kind = "RecreateStatefulSet"
)

// Alarm types etcd raises, as etcd names them (etcdserverpb.AlarmType).
const (
	// AlarmNoSpace: a member's database reached --quota-backend-bytes; the cluster refuses
	// writes until space is freed and the alarm disarmed.
	AlarmNoSpace = "NOSPACE"
	// AlarmCorrupt: a member's data differs from the others'.
	AlarmCorrupt = "CORRUPT"
)

// Step is the one next step.
type Step struct {
	Kind Kind
	// Member is the pod (and member) name the step is about; for MoveLeader, the leader.
	Member string
	// ID is the member ID (PromoteLearner, RemoveMember, Defragment, DisarmAlarm; MoveLeader:
	// the current leader).
	ID uint64
	// PeerURL is the peer URL of the learner to add (AddLearner), or a member's new peer URL
	// (UpdatePeerURL).
	PeerURL string
	// Replicas is the StatefulSet's new .spec.replicas (ScaleStatefulSet).
	Replicas int32
	// Target is the transferee of MoveLeader.
	Target uint64
	// Entries is the number of raft entries AdvanceLog appends.
	Entries int
	// Size is the storage ExpandClaim asks for (a resource quantity).
	Size string
	// Revision is the revision Compact compacts the keyspace to.
	Revision int64
	// Alarm is the alarm type DisarmAlarm disarms (AlarmNoSpace).
	Alarm string
	// User is the etcd user EnsureRootUser creates, RemoveUser deletes, or AdoptOperatorUser
	// gives the operator's certificate the name of.
	User string
	// Force asks DeletePod for grace period 0.
	Force bool
	// Intent is the intent to store (RecordIntent), or to store before the call (AddLearner:
	// the intent with RunBeforeAdd set).
	Intent *Intent
	// Backup, on a Wait, is the EtcdBackup the executor creates for the wait to end (the backup
	// taken before a minor-version upgrade); nil for none.
	Backup *BackupRequest
	// RequeueAfter is a hint for Wait: when the situation changes by itself.
	RequeueAfter time.Duration
	// Reason is a CamelCase reason for conditions and events.
	Reason string
	// Message says what is done and why, or what is awaited.
	Message string
}

// BackupRequest is an EtcdBackup a Wait has the executor create: its name and labels.
type BackupRequest struct {
	Name   string
	Labels map[string]string
}

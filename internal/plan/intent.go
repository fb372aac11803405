package plan

import (
	"encoding/json"
	"fmt"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// IntentOp is the kind of membership change an intent records.
type IntentOp string

const (
	// IntentAdd: a learner is added for Member (scale-out, a pod without a member, or an
	// adopted learner), then promoted.
	IntentAdd IntentOp = "add"
	// IntentRemove: the member ID is removed; the StatefulSet then shrinks when the ordinal
	// is no longer wanted.
	IntentRemove IntentOp = "remove"
	// IntentReplace: the member ID is removed, then a learner is added for the same pod on a
	// fresh volume and promoted.
	IntentReplace IntentOp = "replace"
)

// Intent is a membership change in progress. The controller stores it (in an
// annotation of the EtcdCluster) before the first irreversible etcd call of a change, keeps
// it until decideMembership returns ClearIntent, and hands it back in every observation. It
// is what makes a crash between two steps converge.
type Intent struct {
	Op IntentOp `json:"op"`
	// Member is the pod (and member) name the change is about.
	Member string `json:"member"`
	// ID is the etcd member ID to remove (remove, replace); 0 for add. JSON carries it in
	// hexadecimal, as etcdctl prints it.
	ID uint64 `json:"-"`
	// PeerURL is the member's peer URL; a learner added for this intent is found by it.
	PeerURL string `json:"peerURL"`
	// ClaimUID is the UID of the claim at Member's ordinal when the intent was recorded, if
	// that claim must not be reused (it holds data of another member, or no member at all
	// is known to have written it). Empty when any claim there may be used.
	ClaimUID string `json:"claimUID,omitempty"`
	// Reason is the reason of the change (ScaleOut, ScaleIn, ReplaceMember, ReaddPod,
	// AdoptLearner); every step of the change reports it.
	Reason string `json:"reason"`
	// StartedAt is when the change began, for messages.
	StartedAt time.Time `json:"startedAt"`
	// RunBeforeAdd is the latest run of the learner's pod's etcd as seen in a pass that asked
	// etcd to add the learner, stored before etcd is called: that run started before the
	// learner existed, with an initial cluster that did not name it, so it cannot start and
	// exits. A pod that waits in the crash-loop back-off after exactly that run (the same pod
	// and run start) fails for no reason left, and is re-created at once instead of after
	// the back-off. This is the order of what the operator saw and did, not a comparison of
	// clocks: the run's times come from the node, whose clock may differ from the operator's.
	RunBeforeAdd *PodRun `json:"runBeforeAdd,omitempty"`
}

// PodRun names one run of a pod's etcd container: the pod and when the run started.
type PodRun struct {
	PodUID    string    `json:"podUID"`
	StartedAt time.Time `json:"startedAt"`
}

// Ended reports whether r names the run of the etcd container of p that ended last.
func (r *PodRun) Ended(p Pod) bool {
	return r != nil && p.Exists && p.UID == r.PodUID && !p.LastExitAt.IsZero() &&
		!p.LastExitRunAt.IsZero() && p.LastExitRunAt.Equal(r.StartedAt)
}

// Latest reports whether r names the latest run of the etcd container of p.
func (r *PodRun) Latest(p Pod) bool {
	return r != nil && p.Exists && p.UID == r.PodUID && !p.RunAt.IsZero() && p.RunAt.Equal(r.StartedAt)
}

// intentJSON is Intent as stored: the ID in hexadecimal.
type intentJSON struct {
	Op           IntentOp  `json:"op"`
	Member       string    `json:"member"`
	ID           string    `json:"id,omitempty"`
	PeerURL      string    `json:"peerURL"`
	ClaimUID     string    `json:"claimUID,omitempty"`
	Reason       string    `json:"reason"`
	StartedAt    time.Time `json:"startedAt"`
	RunBeforeAdd *PodRun   `json:"runBeforeAdd,omitempty"`
}

// MarshalJSON writes the intent with its member ID in hexadecimal.
func (in Intent) MarshalJSON() ([]byte, error) {
	j := intentJSON{Op: in.Op, Member: in.Member, PeerURL: in.PeerURL, ClaimUID: in.ClaimUID, Reason: in.Reason, StartedAt: in.StartedAt, RunBeforeAdd: in.RunBeforeAdd}
	if in.ID != 0 {
		j.ID = etcd.FormatID(in.ID)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (in *Intent) UnmarshalJSON(b []byte) error {
	var j intentJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("failed to parse membership intent: %w", err)
	}
	*in = Intent{Op: j.Op, Member: j.Member, PeerURL: j.PeerURL, ClaimUID: j.ClaimUID, Reason: j.Reason, StartedAt: j.StartedAt, RunBeforeAdd: j.RunBeforeAdd}
	if j.ID != "" {
		id, err := etcd.ParseID(j.ID)
		if err != nil {
			return fmt.Errorf("failed to parse member ID %q of membership intent: %w", j.ID, err)
		}
		in.ID = id
	}
	return nil
}

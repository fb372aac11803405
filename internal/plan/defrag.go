package plan

import (
	"encoding/json"
	"fmt"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// Defragmentation is the record of a defragmentation the operator started. The executor
// stores it (in an annotation of the EtcdCluster) before it calls etcd's Defragment, and
// removes it when the call returns successfully, or when a later pass shows the member done
// (DefragmentationOver). While it stands, the member counts as disrupted: etcd serves no
// reads or writes on it, and its apply loop (so its raft loop, once entries wait to be
// applied) is blocked, whatever its committed index says. An operator restart or a call
// that outlives its client deadline leaves it standing, so the next pass cannot take a
// second voter down meanwhile.
type Defragmentation struct {
	// Member is the pod (and member) name; ID its etcd member ID (hexadecimal in JSON).
	Member string
	ID     uint64
	// Since is when the operator recorded it, just before the call.
	Since time.Time
	// AppliedIndex, RaftIndex and DBSize are what the member reported in the pass that
	// started it: the index it must move past, and the file a finished defragmentation
	// shrinks.
	AppliedIndex uint64
	RaftIndex    uint64
	DBSize       int64
	// Unreadable is set (and the rest empty) when the stored record could not be parsed: it
	// is not mistaken for none.
	Unreadable string
}

type defragJSON struct {
	Member       string    `json:"member"`
	ID           string    `json:"id"`
	Since        time.Time `json:"since"`
	AppliedIndex uint64    `json:"appliedIndex"`
	RaftIndex    uint64    `json:"raftIndex"`
	DBSize       int64     `json:"dbSize"`
}

// MarshalJSON writes the record with its member ID in hexadecimal, as etcdctl prints it.
func (d Defragmentation) MarshalJSON() ([]byte, error) {
	return json.Marshal(defragJSON{Member: d.Member, ID: etcd.FormatID(d.ID), Since: d.Since,
		AppliedIndex: d.AppliedIndex, RaftIndex: d.RaftIndex, DBSize: d.DBSize})
}

// ParseDefragmentation reads a stored record. A record it cannot read comes back with
// Unreadable set, never as nil: an unreadable record still means a member may be busy.
func ParseDefragmentation(raw string) *Defragmentation {
	var j defragJSON
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return &Defragmentation{Unreadable: err.Error()}
	}
	id, err := etcd.ParseID(j.ID)
	if err != nil || id == 0 {
		return &Defragmentation{Unreadable: fmt.Sprintf("member ID %q: %v", j.ID, err)}
	}
	return &Defragmentation{Member: j.Member, ID: id, Since: j.Since, AppliedIndex: j.AppliedIndex, RaftIndex: j.RaftIndex, DBSize: j.DBSize}
}

// DefragmentationOver reports whether the member of record d is shown, by etcd read in this
// pass (e), to be done defragmenting; when it is not, why says what is awaited. Only positive
// evidence ends it: the member answers with an applied index past the one it reported when
// the defragmentation started (its apply loop runs again), or with a database smaller than it
// was (etcd swaps in the smaller file only when a defragmentation finished), or it is no
// longer in etcd's member list. A member that answers with a frozen applied index is not done,
// even when its committed index keeps up with the leader's: etcd keeps receiving committed
// entries while the defragmentation blocks applying them. On a cluster that commits nothing
// the index cannot move by itself; the maintenance planner then appends an entry (AdvanceLog)
// so that it can.
func DefragmentationOver(d Defragmentation, e *etcd.Observed) (over bool, why string) {
	if d.Unreadable != "" {
		return false, fmt.Sprintf("the stored defragmentation record is unreadable (%s); remove it once no member is being defragmented", d.Unreadable)
	}
	busy := fmt.Sprintf("%s is being defragmented since %s", d.name(), d.Since.UTC().Format(time.RFC3339))
	if e == nil {
		return false, busy + ", and etcd did not answer with a member list in this pass"
	}
	listed := false
	for _, m := range e.Cluster.Members {
		listed = listed || m.ID == d.ID
	}
	if !listed {
		return true, d.name() + " is no longer a member"
	}
	st, ok := e.Status[d.ID]
	switch {
	case !ok:
		return false, busy + ", and it does not answer"
	case st.DBSize > 0 && st.DBSize < d.DBSize:
		return true, fmt.Sprintf("the database of %s shrank from %d to %d bytes: its defragmentation finished", d.name(), d.DBSize, st.DBSize)
	case st.AppliedIndex > d.AppliedIndex:
		// Entries that need no database (AuthStatus) apply while the defragmentation holds
		// it: the member must also have served a read of its database in this pass.
		err, asked := e.Reads[d.ID]
		if asked && err == nil {
			return true, fmt.Sprintf("%s applied up to index %d, past %d when its defragmentation started, and served a read of its database", d.name(), st.AppliedIndex, d.AppliedIndex)
		}
		if !asked {
			return false, fmt.Sprintf("%s: its applied index moved from %d to %d, and it was not asked for a read of its database in this pass", busy, d.AppliedIndex, st.AppliedIndex)
		}
		return false, fmt.Sprintf("%s: its applied index moved from %d to %d, but it serves no read of its database yet (%v)", busy, d.AppliedIndex, st.AppliedIndex, err)
	}
	if ls, ok := e.Status[e.Leader()]; ok && ls.RaftIndex > d.AppliedIndex {
		return false, fmt.Sprintf("%s: its applied index stays at %d while the leader committed %d", busy, st.AppliedIndex, ls.RaftIndex)
	}
	return false, fmt.Sprintf("%s: its applied index has not moved from %d, and the cluster committed nothing since", busy, st.AppliedIndex)
}

func (d Defragmentation) name() string {
	if d.Member != "" {
		return d.Member
	}
	return etcd.FormatID(d.ID)
}

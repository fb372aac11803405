// Package state holds the types of what etcd answers (its member list, each member's status,
// alarms, authentication) and the pure reads of them: a leaf, so the planners take them
// without linking etcd's client.
package state

import (
	"strconv"

	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// Alarm types etcd raises.
const (
	AlarmNoSpace = "NOSPACE" // a member's database reached --quota-backend-bytes; writes fail
	AlarmCorrupt = "CORRUPT" // a member's data differs from the others'
)

// Member is one entry of etcd's member list.
type Member struct {
	ID         uint64
	Name       string // empty for a member added but not started yet
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// MemberStatus is what one member reports about itself.
type MemberStatus struct {
	ID        uint64
	ClusterID uint64 // the cluster the member belongs to, as it reports it
	Version   string
	// Revision is the member's key-value store revision when it answered.
	Revision int64
	// DBSize is the size of the member's database file; DBSizeInUse the part of it that holds
	// data. A defragmentation shrinks DBSize to about DBSizeInUse.
	DBSize      int64
	DBSizeInUse int64
	Leader      uint64
	RaftIndex   uint64
	// AppliedIndex is the last raft entry the member applied; it snapshots every
	// --snapshot-count applied entries.
	AppliedIndex uint64
	RaftTerm     uint64
	IsLearner    bool
	Errors       []string // alarms and health problems the member reports
	// ClusterVersion is the cluster version the member knows (MAJOR.MINOR.0), from its
	// /version endpoint; empty when that did not answer.
	ClusterVersion string
}

// Cluster is etcd's member list as one member sees it.
type Cluster struct {
	ClusterID uint64
	Members   []Member
}

// AuthState is etcd's authentication: whether it is on, and the roles of the users asked for
// that exist.
type AuthState struct {
	Enabled bool
	Roles   map[string][]string
}

// Alarm is one active alarm: which member raised it, and its type (AlarmNoSpace,
// AlarmCorrupt).
type Alarm struct {
	MemberID uint64
	Type     string
}

// FormatID prints a member or cluster ID in hexadecimal, as etcdctl does.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// ParseID parses an ID printed by FormatID.
func ParseID(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// Observed is a snapshot of a cluster: the member list and each member's status.
type Observed struct {
	Cluster Cluster
	// Status holds the members that answered, by ID.
	Status map[uint64]MemberStatus
	// StatusErr holds the members that did not answer, by ID.
	StatusErr map[uint64]error
	// Reads holds, by ID, the answers of the members asked in this pass for a read of their
	// own database (nil: served): only a member recorded as being defragmented is asked,
	// and only once its applied index moved (see plan.DefragmentationOver).
	Reads map[uint64]error
}

// Leader returns the leader's ID as the answering voting members report it, or 0 when none
// (or no agreement) is known.
func (o Observed) Leader() uint64 {
	var leader uint64
	for _, s := range o.Status {
		if s.Leader == 0 {
			continue
		}
		if leader != 0 && s.Leader != leader {
			return 0
		}
		leader = s.Leader
	}
	return leader
}

// ClusterVersion is the cluster version the leader reports, or, without a leader's answer,
// the lowest any member reports; empty when none is known.
func (o Observed) ClusterVersion() string {
	if st, ok := o.Status[o.Leader()]; ok && st.ClusterVersion != "" {
		return st.ClusterVersion
	}
	out := ""
	for _, st := range o.Status {
		if st.ClusterVersion != "" && (out == "" || versions.Less(st.ClusterVersion, out)) {
			out = st.ClusterVersion
		}
	}
	return out
}

package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// MemberRecord is the last etcd member list the operator read while etcd served it, kept in
// the operator's memory (on the membership ConfigMap) so that a pass without a quorum still
// knows who votes. etcd serves its member list linearizably, so a list that was read at all
// was read through a quorum. Disaster recovery counts voters from this record, never from the
// StatefulSet's size or an intent's text.
type MemberRecord struct {
	// ClusterID is the cluster the list belongs to.
	ClusterID uint64
	// Members are the members as etcd listed them, each named by its pod where it is known.
	Members []RecordedMember
	// Since is when the operator first read this list (it is written only when it changes).
	Since time.Time
}

// RecordedMember is one member of a MemberRecord.
type RecordedMember struct {
	ID uint64
	// Name is the member's pod (etcd's name for it, or the pod whose peer URL it has when it
	// has not started); empty when neither is known.
	Name    string
	PeerURL string
	Learner bool
}

// RecordOf is the record of member list o, read at now. A member that has not started (etcd
// lists it without a name) is named by the pod of its peer URL, among podLimit ordinals of
// statefulSet.
func RecordOf(o etcd.Observed, statefulSet string, peerURL func(string) string, podLimit int32, now time.Time) MemberRecord {
	r := MemberRecord{ClusterID: o.Cluster.ClusterID, Since: now.UTC().Truncate(time.Second)}
	for _, m := range o.Cluster.Members {
		rm := RecordedMember{ID: m.ID, Name: m.Name, Learner: m.IsLearner}
		if len(m.PeerURLs) > 0 {
			rm.PeerURL = m.PeerURLs[0]
		}
		if rm.Name == "" && peerURL != nil {
			rm.Name = PodOfPeerURL(statefulSet, peerURL, podLimit+int32(len(o.Cluster.Members)), m.PeerURLs)
		}
		r.Members = append(r.Members, rm)
	}
	slices.SortFunc(r.Members, func(a, b RecordedMember) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return r
}

// SameMembers reports whether r and o hold the same cluster and members (Since aside).
func (r MemberRecord) SameMembers(o MemberRecord) bool {
	return r.ClusterID == o.ClusterID && slices.Equal(r.Members, o.Members)
}

// Voters are the recorded voting members.
func (r MemberRecord) Voters() []RecordedMember {
	var out []RecordedMember
	for _, m := range r.Members {
		if !m.Learner {
			out = append(out, m)
		}
	}
	return out
}

type recordJSON struct {
	ClusterID string               `json:"clusterID"`
	Members   []recordedMemberJSON `json:"members"`
	Since     time.Time            `json:"since"`
}

type recordedMemberJSON struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	PeerURL string `json:"peerURL,omitempty"`
	Learner bool   `json:"learner,omitempty"`
}

// MarshalJSON writes the record with its IDs in hexadecimal, as etcdctl prints them.
func (r MemberRecord) MarshalJSON() ([]byte, error) {
	j := recordJSON{ClusterID: etcd.FormatID(r.ClusterID), Since: r.Since, Members: []recordedMemberJSON{}}
	for _, m := range r.Members {
		j.Members = append(j.Members, recordedMemberJSON{ID: etcd.FormatID(m.ID), Name: m.Name, PeerURL: m.PeerURL, Learner: m.Learner})
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *MemberRecord) UnmarshalJSON(b []byte) error {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("failed to parse the member record: %w", err)
	}
	id, err := etcd.ParseID(j.ClusterID)
	if err != nil {
		return fmt.Errorf("failed to parse the cluster ID %q of the member record: %w", j.ClusterID, err)
	}
	out := MemberRecord{ClusterID: id, Since: j.Since}
	for _, m := range j.Members {
		mid, err := etcd.ParseID(m.ID)
		if err != nil || mid == 0 {
			return fmt.Errorf("failed to parse member ID %q of the member record", m.ID)
		}
		out.Members = append(out.Members, RecordedMember{ID: mid, Name: m.Name, PeerURL: m.PeerURL, Learner: m.Learner})
	}
	*r = out
	return nil
}

// Package memory is what an EtcdCluster's passes remember from one pass to the next, in one
// struct: loaded once at the start of a pass, read by the values computation and the planners
// as a parameter, never reread from the object during the pass.
//
// Where each part is kept and who writes it:
//
//   - ClusterID, Running and LegacyLogIndex are what etcd reported (its cluster ID, cluster
//     version, lowest member version, and the raft index below which its logs may hold
//     entries written under 3.5); status.Set records them from the pass's observation of
//     etcd, never from the spec.
//   - Restore is the restore record; only the executor writes it (internal/execute), before
//     each step it takes.
//   - TrustGeneration, PeerTrustGeneration and CARotation are read from the CA Secrets the
//     operator keeps, which
//     only the executor writes; the pass records them in status after the certificates step.
//     ClientRevocationList is recorded too, but a pass reads it from the list's Secret.
//   - AuthEnabled is what etcd last answered of its authentication, recorded by status.Set.
//   - ExtraKinds are the kinds beyond the built-in ones the chart rendered, recorded before
//     the first object of a kind is applied, so a later pass can prune them.
//
// The rest of what passes remember lives where it must be read from anyway, and is read once
// per pass by internal/observe: the membership intent and the last member list seen with a
// quorum (the membership ConfigMap and the StatefulSet's annotations), the founders record,
// and the claims' stamps. The operator process's own memory (since when quorum has been lost,
// which revision was last compacted, since when pods are missing) is observe.LostQuorum,
// observe.Compactions and observe.MissingPods.
package memory

import (
	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// Memory is what a pass starts from besides the spec and what it observes.
type Memory struct {
	// ClusterID is etcd's cluster ID once the cluster formed ("" before).
	ClusterID string
	// Running is the versions etcd reported, which the next version step is computed from.
	Running versions.Running
	// LegacyLogIndex is the raft index below which the members' logs may hold entries written
	// under cluster version 3.5 (0 when none may).
	LegacyLogIndex uint64
	// TrustGeneration is the generation of the CA trust bundle the members' pod template
	// carries (0 without a CA the operator keeps).
	TrustGeneration int64
	// PeerTrustGeneration is the same for the peer side's own CA (0 without one, or before
	// its first rotation).
	PeerTrustGeneration int64
	// CARotation says where a CA rotation stands ("" when none runs).
	CARotation string
	// ClientRevocationList is whether the revocation list of the application client
	// certificates exists: the members then read it. Unlike the rest, it is read at the start
	// of the pass from the list's Secret (observe.CRLExists), not from status, so that a lost
	// status never drops the list from the members; Of takes status.clientRevocationList for
	// callers outside a pass.
	ClientRevocationList bool
	// Restore is the latest restore's record (nil when there was none).
	Restore *v1alpha1.RestoreStatus
	// ExtraKinds are the kinds beyond the built-in ones rendered so far (apiVersion/Kind).
	ExtraKinds []string
	// AuthEnabled is what etcd last said of its authentication (nil: not known yet).
	AuthEnabled *bool
}

// Formed reports whether the cluster formed: etcd reported its cluster ID.
func (m Memory) Formed() bool { return m.ClusterID != "" }

// Of loads the memory of c from where it is kept (its status). The result shares nothing with
// c: a write to c's status during the pass does not change what the pass started from.
func Of(c *v1alpha1.EtcdCluster) Memory {
	s := c.Status
	m := Memory{
		ClusterID:            s.ClusterID,
		Running:              versions.Running{ClusterVersion: s.ClusterVersion, Lowest: s.CurrentVersion, LegacyLog: s.LegacyLogIndex != 0},
		LegacyLogIndex:       s.LegacyLogIndex,
		TrustGeneration:      s.TrustGeneration,
		PeerTrustGeneration:  s.PeerTrustGeneration,
		CARotation:           s.CARotation,
		ClientRevocationList: s.ClientRevocationList,
		ExtraKinds:           append([]string(nil), s.ExtraKinds...),
	}
	if s.AuthEnabled != nil {
		on := *s.AuthEnabled
		m.AuthEnabled = &on
	}
	if s.Restore != nil {
		m.Restore = s.Restore.DeepCopy()
	}
	return m
}

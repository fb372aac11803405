package controllers

import (
	"fmt"
	"sort"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// rolloutPod is one member pod as the rollout sees it.
type rolloutPod struct {
	Name     string
	Ordinal  int32
	Ready    bool
	Deleting bool
	// Revision is the pod's controller-revision-hash label: the StatefulSet template it runs.
	Revision string
}

// rolloutObservation is what decideRollout needs. The caller must guarantee that no
// membership change is under way (decideMembership returned None) and that Etcd was read in
// this pass.
type rolloutObservation struct {
	// UpdateRevision is the StatefulSet's current template revision; pods on another one are
	// outdated.
	UpdateRevision string
	// StsCaughtUp is false while the StatefulSet controller has not observed the latest spec.
	StsCaughtUp bool
	Pods        []rolloutPod
	Etcd        *etcd.Observed
}

// decideRollout returns the next step of a rolling restart onto the StatefulSet's current
// template (the StatefulSet uses OnDelete, so pods only change when deleted): None when every
// pod runs it; Wait while any member is unhealthy or restarting; DeletePod for an outdated
// follower (highest ordinal first); for the leader, once it is the last outdated member,
// MoveLeader to an updated, healthy follower first, so the restart costs no election timeout.
func decideRollout(o rolloutObservation) membershipAction {
	var outdated []rolloutPod
	for _, p := range o.Pods {
		if p.Revision != o.UpdateRevision {
			outdated = append(outdated, p)
		}
	}
	if len(outdated) == 0 || o.UpdateRevision == "" {
		return membershipAction{Kind: actNone, Reason: reasonReconciled}
	}
	if !o.StsCaughtUp {
		return wait(v1alpha1.ReasonRollingOut, "waiting for the StatefulSet controller to observe the new pod template")
	}
	if o.Etcd == nil {
		return wait(v1alpha1.ReasonRollingOut, "etcd did not answer; no member is restarted without a healthy quorum")
	}
	leader := o.Etcd.Leader()
	if leader == 0 {
		return wait(v1alpha1.ReasonRollingOut, "no leader is known; no member is restarted during an election")
	}
	byName := map[string]etcd.Member{}
	for _, m := range o.Etcd.Cluster.Members {
		if m.IsLearner {
			return wait(v1alpha1.ReasonRollingOut, "a learner is joining; members restart once it is promoted")
		}
		st, ok := o.Etcd.Status[m.ID]
		if !ok || len(st.Errors) > 0 || st.Leader != leader {
			return wait(v1alpha1.ReasonRollingOut, fmt.Sprintf("member %s is not healthy; the next member restarts once every member is healthy", nameOr(m)))
		}
		byName[m.Name] = m
	}
	for _, p := range o.Pods {
		if !p.Ready || p.Deleting {
			return wait(v1alpha1.ReasonRollingOut, fmt.Sprintf("member pod %s is restarting; the next member restarts once it is ready", p.Name))
		}
	}
	sort.Slice(outdated, func(i, j int) bool { return outdated[i].Ordinal > outdated[j].Ordinal })
	for _, p := range outdated {
		if m, ok := byName[p.Name]; ok && m.ID == leader {
			continue
		}
		return membershipAction{Kind: actDeletePod, Member: p.Name, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("restarting follower %s on the new pod template (%d members outdated)", p.Name, len(outdated))}
	}
	// Only the leader is outdated: hand leadership to an updated member, then restart it.
	p := outdated[0]
	for _, q := range o.Pods {
		m, ok := byName[q.Name]
		if ok && q.Revision == o.UpdateRevision && m.ID != leader {
			return membershipAction{Kind: actMoveLeader, Member: p.Name, ID: leader, Target: m.ID, Reason: v1alpha1.ReasonRollingOut,
				Message: fmt.Sprintf("moving leadership from %s to the updated member %s before restarting it", p.Name, q.Name)}
		}
	}
	if len(o.Pods) == 1 {
		return membershipAction{Kind: actDeletePod, Member: p.Name, Reason: v1alpha1.ReasonRollingOut,
			Message: fmt.Sprintf("restarting the only member %s on the new pod template", p.Name)}
	}
	return wait(v1alpha1.ReasonRollingOut, "no updated member can take over leadership yet")
}

func nameOr(m etcd.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return etcd.FormatID(m.ID)
}

// rolloutPodsOf is the rollout's view of the member pods.
func rolloutPodsOf(pods []podInfo) []rolloutPod {
	var out []rolloutPod
	for _, p := range pods {
		if !p.Exists {
			continue
		}
		out = append(out, rolloutPod{Name: p.Name, Ordinal: p.Ordinal, Ready: p.Ready, Deleting: p.Deleting, Revision: p.Revision})
	}
	return out
}

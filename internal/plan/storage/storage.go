// Package storage is the storage planner: it grows the members' volumes when
// spec.storage.size grows. Each member's claim is expanded in turn (the storage grows the
// volume, the kubelet its file system, the member keeps running); once every claim has the
// new size the StatefulSet is re-created without its pods so its immutable claim template
// carries the new size for members added later. A member whose file system the storage can
// grow only offline (its claim stays FileSystemResizePending while its pod runs) is restarted,
// one at a time, the leader last after leadership moved. It is pure: an Observation in, at
// most one plan.Step out; the safety gate checks every step.
package storage

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// DefaultOfflineAfter is how long a claim may stay FileSystemResizePending while its member's
// pod runs before the planner concludes that the storage grows the file system only when the
// volume is mounted again, and restarts the member. A kubelet that grows file systems online
// does it within a sync period (about a minute at most).
const DefaultOfflineAfter = 2 * time.Minute

// Requeue is how soon a pass looks again while a resize is under way.
const Requeue = 2 * time.Second

// Recheck is how soon a pass looks again while the class refuses expansion or the storage
// reports it infeasible: neither StorageClasses nor the storage's capacity are watched.
const Recheck = 15 * time.Second

// Claim is one member pod's data claim.
type Claim struct {
	// Member is the pod's (and member's) name.
	Member string
	// Requested is what the claim asks for (spec.resources.requests.storage); Capacity what
	// it has (status.capacity.storage), zero while unknown.
	Requested, Capacity resource.Quantity
	// FileSystemResizePending: the volume grew, its file system waits for the kubelet; Since
	// is when the condition was set.
	FileSystemResizePending bool
	PendingSince            time.Time
	// Infeasible is the storage's word that the resize cannot be done (allocatedResource
	// Statuses: ControllerResizeInfeasible, NodeResizeInfeasible), "" when it has none.
	Infeasible string
	// Deleting: the claim is being deleted (a member being replaced).
	Deleting bool
	// Bound: the claim is bound to a volume (only a bound claim can be resized; one not bound
	// yet is provisioned with what it asks).
	Bound bool
	// Class is the claim's StorageClass ("" for none).
	Class string

	// MemberID is the member's ID in etcd's member list (0 when it lists none by this name);
	// Voter and Leader as etcd reports them in this pass.
	MemberID uint64
	Voter    bool
	Leader   bool
	// Healthy: the pod is Ready, not being deleted, and the member answered in this pass.
	Healthy bool
	// PodCreated is when the member's pod was created (zero without one).
	PodCreated time.Time
}

// Observation is what the storage planner decides on.
type Observation struct {
	// Want is spec.storage.size.
	Want resource.Quantity
	// Ephemeral: the members keep their data in emptyDir; nothing to do.
	Ephemeral bool
	// Template is the size in the StatefulSet's claim template (nil: no StatefulSet or no
	// template read).
	Template *resource.Quantity
	// Claims are the claims of the member pods the StatefulSet runs (ordinals below its
	// replicas), by ordinal.
	Claims []Claim
	// Expandable says, per StorageClass of a claim that must grow, whether it allows volume
	// expansion; a class absent here could not be read (the API server decides then).
	Expandable map[string]bool
	// Unsettled says which member pods keep the StatefulSet from being re-created ("" when
	// none does): every ordinal below its replicas must have a pod that is Ready and not
	// being deleted, and no ordinal above may have one, so that the new StatefulSet, created
	// with the replicas the pods show, keeps exactly them.
	Unsettled string
	// Now and OfflineAfter (DefaultOfflineAfter when zero).
	Now          time.Time
	OfflineAfter time.Duration
}

// State is where a claim stands against Want.
func State(c Claim, want resource.Quantity) v1alpha1.VolumeState {
	switch {
	case c.Infeasible != "":
		return v1alpha1.VolumeResizeFailed
	case !c.Capacity.IsZero() && c.Capacity.Cmp(want) >= 0:
		return v1alpha1.VolumeReady
	case c.Requested.Cmp(want) < 0:
		return v1alpha1.VolumeWaiting
	case !c.Bound:
		// Not bound yet: it is provisioned with what it asks.
		return v1alpha1.VolumeReady
	case c.FileSystemResizePending:
		return v1alpha1.VolumeFileSystemResizePending
	}
	return v1alpha1.VolumeResizing
}

// Decide returns the next step: None when every claim and the template have Want.
func Decide(o Observation) plan.Step {
	if o.Ephemeral || o.Template == nil || o.Want.IsZero() {
		return none()
	}
	offlineAfter := o.OfflineAfter
	if offlineAfter <= 0 {
		offlineAfter = DefaultOfflineAfter
	}
	want := o.Want.String()
	var failed, notAllowed, grow, resizing, unbound []string
	var next *Claim
	var offline []Claim
	for i := range o.Claims {
		c := o.Claims[i]
		if c.Deleting {
			continue
		}
		switch State(c, o.Want) {
		case v1alpha1.VolumeResizeFailed:
			failed = append(failed, fmt.Sprintf("%s (%s)", c.Member, c.Infeasible))
		case v1alpha1.VolumeWaiting:
			if !c.Bound {
				// The API server resizes only a bound claim.
				unbound = append(unbound, c.Member)
				continue
			}
			if ok, known := o.Expandable[c.Class]; known && !ok {
				notAllowed = append(notAllowed, c.Member)
				continue
			}
			grow = append(grow, c.Member)
			if next == nil {
				next = &o.Claims[i]
			}
		case v1alpha1.VolumeFileSystemResizePending:
			resizing = append(resizing, c.Member+" (file system)")
			// Only a pod that mounted the volume before the resize was asked for is restarted
			// for it: one started since did mount the grown volume, and restarting it again
			// would not help (the storage says why in the claim's events).
			if c.Healthy && !c.PendingSince.IsZero() && o.Now.Sub(c.PendingSince) >= offlineAfter && c.PodCreated.Before(c.PendingSince) {
				offline = append(offline, c)
			}
		case v1alpha1.VolumeResizing:
			resizing = append(resizing, c.Member)
		}
	}
	switch {
	case len(failed) > 0:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonVolumeExpansionFailed, RequeueAfter: Recheck,
			Message: fmt.Sprintf("the storage reports growing the claims of %s to %s infeasible: free or add capacity in the storage (see the claims' events); the operator goes on once the storage can grow them",
				strings.Join(failed, ", "), want)}
	case len(notAllowed) > 0:
		classes := map[string]bool{}
		for _, c := range o.Claims {
			if ok, known := o.Expandable[c.Class]; known && !ok {
				classes[fmt.Sprintf("%q", c.Class)] = true
			}
		}
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonVolumeExpansionNotAllowed, RequeueAfter: Recheck,
			Message: fmt.Sprintf("spec.storage.size is %s, but StorageClass %s of the claims of %s does not allow volume expansion (allowVolumeExpansion is not true): nothing was changed; once the class allows it (an administrator sets allowVolumeExpansion: true), the claims grow",
				want, strings.Join(slices.Sorted(maps.Keys(classes)), ", "), strings.Join(notAllowed, ", "))}
	case next != nil:
		return plan.Step{Kind: plan.ExpandClaim, Member: next.Member, Size: want, Reason: v1alpha1.ReasonExpandingVolumes,
			Message: fmt.Sprintf("growing the volume claim of %s from %s to %s (%d of %d claims still to grow)", next.Member, next.Requested.String(), want, len(grow), len(o.Claims))}
	case len(unbound) > 0:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
			Message: fmt.Sprintf("the claims of %s are not bound to a volume yet: they grow to %s once bound", strings.Join(unbound, ", "), want)}
	case len(offline) > 0:
		// Followers first, the leader last: at most one hand-over.
		sort.SliceStable(offline, func(i, j int) bool { return !offline[i].Leader && offline[j].Leader })
		if offline[0].Leader {
			for _, c := range o.Claims {
				if !c.Leader && !c.Deleting && State(c, o.Want) != v1alpha1.VolumeReady {
					return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
						Message: fmt.Sprintf("the leader %s restarts for its file system last, once the volumes of the other members grew (%s has not)", offline[0].Member, c.Member)}
				}
			}
		}
		return restart(offline[0], o, offlineAfter)
	case len(resizing) > 0:
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
			Message: fmt.Sprintf("waiting for the storage to grow the volumes of %s to %s", strings.Join(resizing, ", "), want)}
	case o.Template.Cmp(o.Want) < 0 && o.Unsettled != "":
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
			Message: fmt.Sprintf("every member's volume has %s; the StatefulSet is re-created with it once every member pod runs: %s", want, o.Unsettled)}
	case o.Template.Cmp(o.Want) < 0:
		return plan.Step{Kind: plan.RecreateStatefulSet, Size: want, Reason: v1alpha1.ReasonExpandingVolumes,
			Message: fmt.Sprintf("every member's volume has %s: re-creating the StatefulSet, its pods kept, so that its claim template asks %s instead of %s", want, want, o.Template.String())}
	}
	return none()
}

// restart restarts the member of c so that the kubelet grows its file system while the
// volume is mounted again; the leader hands leadership to a healthy voter first.
func restart(c Claim, o Observation, after time.Duration) plan.Step {
	why := fmt.Sprintf("the file system of %s's volume has waited %s to grow while its pod ran: the storage grows it only offline", c.Member, after)
	for _, t := range o.Claims {
		if t.Voter && t.Member != c.Member && !t.Healthy {
			return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
				Message: why + fmt.Sprintf("; it restarts once %s is healthy", t.Member)}
		}
	}
	voters := 0
	for _, t := range o.Claims {
		if t.Voter {
			voters++
		}
	}
	if c.Leader && voters > 1 {
		// To a voter whose file system grew already, so leadership moves once.
		targets := append([]Claim(nil), o.Claims...)
		sort.SliceStable(targets, func(i, j int) bool {
			return State(targets[i], o.Want) == v1alpha1.VolumeReady && State(targets[j], o.Want) != v1alpha1.VolumeReady
		})
		for _, t := range targets {
			if t.Voter && !t.Leader && t.Healthy && t.MemberID != 0 {
				return plan.Step{Kind: plan.MoveLeader, Member: c.Member, ID: c.MemberID, Target: t.MemberID, Reason: v1alpha1.ReasonExpandingVolumes,
					Message: why + fmt.Sprintf("; moving leadership to %s before restarting it", t.Member)}
			}
		}
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonExpandingVolumes, RequeueAfter: Requeue,
			Message: why + "; it leads, and no other healthy voter can take leadership over"}
	}
	return plan.Step{Kind: plan.DeletePod, Member: c.Member, Reason: v1alpha1.ReasonExpandingVolumes,
		Message: why + "; restarting it"}
}

func none() plan.Step { return plan.Step{Kind: plan.None, Reason: v1alpha1.ReasonReconciled} }

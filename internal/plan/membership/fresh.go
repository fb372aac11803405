package membership

import (
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

const (
	// LearnerMaxLag is how far a started learner may trail the leader and be promoted.
	LearnerMaxLag = 1000
	// DefaultReplaceAfter mirrors the CRD default of spec.membership.replaceAfter.
	DefaultReplaceAfter = 5 * time.Minute
)

// FreshData reports whether the data holder (claim, or pod under emptyDir storage) of a
// started member with ID id is not known to hold that member's data. A holder stamped with
// another ID never does. An unstamped one, once other holders are stamped (so the operator had
// the chance to stamp this one), does not when its member does not run on it: an emptyDir pod
// created after the member started is always empty; a claim counts once its pod restarted
// on it. A container that restarts in the same pod keeps its emptyDir and its stamp.
func FreshData(stamp string, id uint64, anyStamped, running bool, restarts int32, ephemeral bool) bool {
	switch {
	case stamp != "":
		return stamp != etcd.FormatID(id)
	case !anyStamped || running:
		return false
	case ephemeral:
		return true
	}
	return restarts > 0
}

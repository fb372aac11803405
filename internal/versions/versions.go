// Package versions is etcd-pilot's etcd version policy: which versions a cluster may move
// between, and the release each step of an upgrade runs when the target is more than one minor
// version ahead. It is pure: the controller and the render command compute the version to run
// from the spec and from what etcd reports (status.clusterVersion, status.currentVersion), so a
// crash between two steps picks up where the cluster is.
package versions

import (
	"fmt"
	"strconv"
	"strings"
)

// StepReleases is the release an upgrade runs on for each minor version it passes through
// without stopping there (3.5 -> 3.7 runs every member on 3.6.16 first), and the release a
// cluster moves to first when its 3.5 members are too old to leave 3.5 directly. Keep each entry
// the newest patch release etcd-pilot is tested with.
var StepReleases = map[int]string{5: "3.5.35", 6: "3.6.16", 7: "3.7.3"}

// minLeave35 is the oldest 3.5 patch release a cluster may leave 3.5 from: 3.5.20 fixed learner
// promotion in mixed-version clusters.
const minLeave35 = 20

// Version is a MAJOR.MINOR.PATCH etcd version.
type Version struct{ Major, Minor, Patch int }

// Parse reads MAJOR.MINOR.PATCH, ignoring a leading "v" and a "-suffix" on the patch.
func Parse(s string) (Version, error) {
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3)
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", s)
	}
	var v [3]int
	for i, p := range parts {
		p, _, _ = strings.Cut(p, "-")
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", s)
		}
		v[i] = n
	}
	return Version{v[0], v[1], v[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorString is MAJOR.MINOR.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less orders versions numerically.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// Less compares two version strings numerically; unparsable ones sort first.
func Less(a, b string) bool {
	va, errA := Parse(a)
	vb, errB := Parse(b)
	switch {
	case errA != nil || errB != nil:
		return errA != nil && errB == nil
	default:
		return va.Less(vb)
	}
}

// Running is what etcd reports about a cluster: the cluster version (the protocol every member
// speaks, MAJOR.MINOR.0; it rises once every member runs a newer minor) and the lowest server
// version among the members. Either may be empty while unknown (a cluster still forming).
type Running struct {
	ClusterVersion string
	Lowest         string
	// LegacyLog is true while members' raft logs may hold entries written under cluster
	// version 3.5, which etcd 3.7 and later cannot replay (status.legacyLogIndex).
	LegacyLog bool
}

// Check refuses a target the running cluster cannot move to: a minor version below etcd's
// cluster version (members of an older minor cannot join it; that takes etcd's downgrade
// procedure, which etcd-pilot does not run). The message says what to do.
func Check(target string, r Running) error {
	t, err := Parse(target)
	if err != nil {
		return err
	}
	cv, err := Parse(r.ClusterVersion)
	if err != nil {
		return nil // not known yet: nothing runs that a target could be too old for
	}
	if t.Major < cv.Major || (t.Major == cv.Major && t.Minor < cv.Minor) {
		return fmt.Errorf("spec.version %s is older than the cluster version %s that etcd reports: every member already runs %s or later and members of %s cannot join; set spec.version to a %s release (a downgrade across minor versions needs etcd's downgrade procedure, which etcd-pilot does not run)",
			target, cv.MinorString(), cv.MinorString(), t.MinorString(), cv.MinorString())
	}
	return nil
}

// Step returns the release the members should run now on the way to target, and why when it
// is not target itself:
//   - a cluster whose 3.5 members run a release older than 3.5.20 first moves to the newest 3.5
//     release (leaving 3.5 from before 3.5.20 risks a failed learner promotion);
//   - a target more than one minor ahead of the cluster version is reached one minor at a
//     time: the members run the next minor's StepReleases entry until etcd raises the cluster
//     version, then the next.
//
// A cluster whose versions are unknown (it is forming) runs target directly.
func Step(target string, r Running) (string, string) {
	t, err := Parse(target)
	if err != nil {
		return target, ""
	}
	cur, err := Parse(r.ClusterVersion)
	if err != nil {
		if cur, err = Parse(r.Lowest); err != nil {
			return target, ""
		}
	}
	if t.Major != cur.Major || t.Minor <= cur.Minor {
		return target, ""
	}
	if low, err := Parse(r.Lowest); err == nil && low.Major == 3 && low.Minor == 5 && low.Patch < minLeave35 {
		if rel, ok := StepReleases[5]; ok {
			return rel, fmt.Sprintf("members run %s; leaving 3.5 needs 3.5.%d or later, so the cluster moves to %s before %s", low, minLeave35, rel, target)
		}
	}
	if t.Major == 3 && t.Minor >= 7 && cur.Major == 3 && cur.Minor == 6 && r.LegacyLog {
		hold := StepReleases[6]
		if low, err := Parse(r.Lowest); err == nil && low.Major == 3 && low.Minor == 6 {
			hold = low.String()
		}
		return hold, fmt.Sprintf("the members' raft logs still hold entries written under cluster version 3.5, which etcd %s cannot replay; the members stay on %s until each has taken a raft snapshot past them", t.MinorString(), hold)
	}
	if t.Minor > cur.Minor+1 {
		if rel, ok := StepReleases[cur.Minor+1]; ok && t.Major == 3 {
			return rel, fmt.Sprintf("%s is more than one minor version ahead of the cluster version %s: upgrading one minor at a time, through %s", target, cur.MinorString(), rel)
		}
	}
	return target, ""
}

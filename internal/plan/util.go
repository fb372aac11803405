package plan

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
)

// Quorum is the number of votes a cluster of n voting members needs.
func Quorum(n int32) int32 { return n/2 + 1 }

// Since is how long before now t was; zero for a zero or future t.
func Since(now, t time.Time) time.Duration {
	if t.IsZero() || t.After(now) {
		return 0
	}
	return now.Sub(t)
}

// Waiting is a Wait step with its reason and message.
func Waiting(reason, msg string) Step {
	return Step{Kind: Wait, Reason: reason, Message: msg}
}

// NoLeaderError is what etcd puts in a status reply while the member knows no leader (an
// election is under way). The member is up and keeps its data: availability reports the
// missing leader, the member's health does not.
const NoLeaderError = "etcdserver: no leader"

// MemberErrors are the problems a member reports (alarms, mostly) other than an election in
// progress.
func MemberErrors(st etcd.MemberStatus) []string {
	var out []string
	for _, e := range st.Errors {
		if e != NoLeaderError {
			out = append(out, e)
		}
	}
	return out
}

// NameOr is the member's name, or its ID when it has not started.
func NameOr(m etcd.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return etcd.FormatID(m.ID)
}

// Ordinal parses a pod name "<statefulSet>-<ordinal>".
func Ordinal(statefulSet, pod string) (int32, bool) {
	rest, ok := strings.CutPrefix(pod, statefulSet+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != rest {
		return 0, false
	}
	return int32(n), true
}

// SamePeerHost reports whether peer URLs a and b name the same host (a pod's DNS name, or
// its address), whatever their schemes and ports: a member keeps its host while its peer URL
// moves between plain and TLS and through the transition port (internal/plan/peerswitch).
// URLs that cannot be parsed are compared whole.
func SamePeerHost(a, b string) bool {
	if a == b {
		return true
	}
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil || ua.Hostname() == "" {
		return false
	}
	return ua.Hostname() == ub.Hostname()
}

// PodOfPeerURL returns the pod, among the ordinals below limit, whose advertised peer URL
// (peerURL of its name) is on the host of one of urls; "" when none. A member that has not started has no
// name in etcd's member list: its peer URL is how it is found.
func PodOfPeerURL(statefulSet string, peerURL func(pod string) string, limit int32, urls []string) string {
	for k := int32(0); k < limit; k++ {
		name := fmt.Sprintf("%s-%d", statefulSet, k)
		u := peerURL(name)
		for _, p := range urls {
			if SamePeerHost(p, u) {
				return name
			}
		}
	}
	return ""
}

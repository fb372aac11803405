// Package status computes an EtcdCluster's status and conditions from one pass's observation: pure
// functions, table-tested.
package status

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// Degrades reports whether a reason needs the user's attention (see v1alpha1.ReasonEffects).
func Degrades(reason string) bool { return v1alpha1.ReasonEffects[reason] == v1alpha1.EffectDegrades }

// rolloutReason reports whether reason is the rollout's (or nothing to do).
func rolloutReason(reason string) bool {
	switch reason {
	case v1alpha1.ReasonRollingOut, v1alpha1.ReasonRolloutWaiting, v1alpha1.ReasonMemberRestarting, v1alpha1.ReasonReconciled, "":
		return true
	}
	return false
}

// membershipProgress reports whether the membership step is a change under way.
func membershipProgress(a *plan.Step) bool {
	return a != nil && a.Kind != plan.None && !Degrades(a.Reason) && a.Reason != v1alpha1.ReasonReconciled && a.Reason != ""
}

// Set fills c.Status from o. It keeps LastTransitionTime of conditions whose status did
// not change, so an unchanged cluster gives an unchanged status.
func Set(c *v1alpha1.EtcdCluster, o observe.Observation, t render.Topology) {
	s := &c.Status
	s.Selector = t.Selector.String()
	if o.StatefulSet != nil {
		s.Replicas = o.StatefulSet.Status.Replicas
		s.ReadyReplicas = o.StatefulSet.Status.ReadyReplicas
	} else {
		s.Replicas, s.ReadyReplicas = 0, 0
	}
	if o.TargetVersion != "" {
		s.TargetVersion = o.TargetVersion
	}
	switch {
	case o.Ephemeral:
		s.Storage = nil
	case o.Storage != nil:
		// Only a pass that read the claims says where they stand; others keep what was said.
		s.Storage = observe.StorageStatus(o.Storage)
	}
	if o.Etcd != nil {
		var leader, leaderID string
		s.Members, leader, leaderID, s.CurrentVersion = MemberStatuses(*o.Etcd)
		s.ClusterID = etcd.FormatID(o.Etcd.Cluster.ClusterID)
		// During an election no leader is known: Leader keeps the last one seen (the member
		// table and Available say none leads now), so the next leader counts as one change.
		if leaderID != "" {
			if s.LeaderID != "" && s.LeaderID != leaderID {
				s.LeaderChanges++
				t := metav1.NewTime(o.Now)
				s.LastLeaderChangeTime = &t
			}
			s.Leader, s.LeaderID = leader, leaderID
		}
		if cv := o.Etcd.ClusterVersion(); cv != "" {
			if strings.HasPrefix(s.ClusterVersion, "3.5.") && !versions.Less(cv, "3.6.0") {
				// The log up to here may hold 3.5's v2 entries, which 3.7 cannot replay.
				s.LegacyLogIndex = max(1, highestIndex(*o.Etcd))
			}
			s.ClusterVersion = cv
		}
		if s.LegacyLogIndex != 0 && snapshotPast(*o.Etcd, s.LegacyLogIndex, o.SnapshotCount) {
			s.LegacyLogIndex = 0
		}
	} else if o.StatefulSet == nil || (o.StatefulSet.Status.Replicas == 0 && !o.EtcdAsked) {
		// No member runs: nothing to report.
		s.Members, s.Leader, s.LeaderID = nil, "", ""
	} else if o.EtcdAsked {
		// Members run, or ran, but no member could read the member list: the table keeps the
		// members etcd listed last, none healthy and none leading, so the status and the
		// metrics show the outage in this pass. Leader keeps the last leader seen.
		for i := range s.Members {
			s.Members[i].Healthy, s.Members[i].Leader = false, false
		}
	}
	if o.UpgradeKnown {
		s.Upgrade = o.Upgrade
	}
	// What admission reads before it lets the operator's client certificate go; kept as it
	// was when etcd was not asked.
	switch {
	case o.Auth != nil:
		s.AuthEnabled = ptr.To(o.Auth.Enabled)
	case o.AuthRefused != nil:
		s.AuthEnabled = ptr.To(true)
	}
	var transport metav1.Condition
	s.Security, transport = Transport(c)
	for _, cond := range append(Conditions(o), transport) {
		cond.ObservedGeneration = o.Generation
		meta.SetStatusCondition(&s.Conditions, cond)
	}
}

// Transport is status.security and the InsecureTransport condition of c, the effective spec
// of the pass (values.Effective): True, with how to turn TLS on, while a side is plain.
// Ready does not depend on it.
func Transport(c *v1alpha1.EtcdCluster) (v1alpha1.SecurityMode, metav1.Condition) {
	mode, reason, msg := values.Security(c)
	cond := metav1.Condition{Type: v1alpha1.ConditionInsecureTransport, Status: metav1.ConditionTrue, Reason: reason, Message: msg}
	if mode == v1alpha1.SecurityTLS {
		cond.Status = metav1.ConditionFalse
	}
	return mode, cond
}

// highestIndex is the highest raft index any member reports.
func highestIndex(o etcd.Observed) uint64 {
	var n uint64
	for _, st := range o.Status {
		n = max(n, st.RaftIndex, st.AppliedIndex)
	}
	return n
}

// snapshotPast reports whether every member has applied more than snapshotCount entries past
// index, so each has taken a raft snapshot after it (etcd snapshots once a member's applied
// index runs more than --snapshot-count past its last snapshot). A member that did not answer
// counts as not there yet.
func snapshotPast(o etcd.Observed, index, snapshotCount uint64) bool {
	for _, m := range o.Cluster.Members {
		st, ok := o.Status[m.ID]
		if !ok || st.AppliedIndex <= index+snapshotCount {
			return false
		}
	}
	return len(o.Cluster.Members) > 0
}

// MemberStatuses turns an etcd observation into the status member table, the leader's name
// and ID, and the lowest version running.
func MemberStatuses(o etcd.Observed) (members []v1alpha1.MemberStatus, leaderName, leaderID, lowest string) {
	leader := o.Leader()
	// Without a quorum of voting members answering, no member serves: none is healthy.
	serving := quorate(o)
	for _, m := range o.Cluster.Members {
		ms := v1alpha1.MemberStatus{Name: m.Name, ID: etcd.FormatID(m.ID), Learner: m.IsLearner, Leader: m.ID == leader && leader != 0}
		if ms.Name == "" {
			ms.Name = "unstarted-" + ms.ID
		}
		if len(m.PeerURLs) > 0 {
			ms.PeerURL = m.PeerURLs[0]
		}
		if len(m.ClientURLs) > 0 {
			ms.ClientURL = m.ClientURLs[0]
		}
		if st, ok := o.Status[m.ID]; ok {
			ms.Healthy = serving && len(plan.MemberErrors(st)) == 0
			ms.Version, ms.DBSizeBytes, ms.RaftIndex = st.Version, st.DBSize, st.RaftIndex
			if lowest == "" || versions.Less(st.Version, lowest) {
				lowest = st.Version
			}
		}
		if ms.Leader {
			leaderName, leaderID = ms.Name, ms.ID
		}
		members = append(members, ms)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	return members, leaderName, leaderID, lowest
}

// Conditions computes Available, Progressing, Degraded, Ready, Reconciling, Stalled and
// EphemeralStorage (and BackupReady with spec.backup).
func Conditions(o observe.Observation) []metav1.Condition {
	avail := availableCondition(o)
	prog := progressingCondition(o)
	degr := degradedCondition(o, prog)
	ready := readyCondition(o, avail, prog, degr)
	stalled := stalledCondition(o, degr)
	reconciling := reconcilingCondition(o, avail, prog, degr, ready, stalled)
	eph := metav1.Condition{Type: v1alpha1.ConditionEphemeralStorage, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonPersistentVolumes, Message: "members keep their data on PersistentVolumeClaims"}
	if o.Ephemeral {
		eph = metav1.Condition{Type: v1alpha1.ConditionEphemeralStorage, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonEmptyDir,
			Message: "storage.ephemeral is set: members keep their data in emptyDir volumes and lose it when their pod is deleted; do not keep data you need here"}
	}
	conds := []metav1.Condition{avail, prog, degr, ready, reconciling, stalled, eph}
	if o.BackupCond != nil {
		conds = append(conds, *o.BackupCond)
	}
	return conds
}

func availableCondition(o observe.Observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionAvailable}
	if o.Etcd != nil {
		voting, healthy := int32(0), int32(0)
		for _, m := range o.Etcd.Cluster.Members {
			if m.IsLearner {
				continue
			}
			voting++
			if st, ok := o.Etcd.Status[m.ID]; ok && len(plan.MemberErrors(st)) == 0 {
				healthy++
			}
		}
		leader := o.Etcd.Leader()
		if voting > 0 && healthy >= plan.Quorum(voting) && leader != 0 {
			c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonQuorumAvailable
			c.Message = fmt.Sprintf("%d of %d voting members healthy (quorum %d), leader %s", healthy, voting, plan.Quorum(voting), etcd.FormatID(leader))
			return c
		}
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonQuorumNotReady
		c.Message = fmt.Sprintf("%d of %d voting members healthy, quorum needs %d", healthy, voting, plan.Quorum(voting))
		if leader == 0 {
			c.Message += "; no leader"
		}
		return c
	}
	if o.ListVoters > 0 {
		// etcd refuses the operator the members' status (authentication), but served it
		// the member list linearizably, which only a leader with a quorum does.
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonQuorumAvailable
		c.Message = fmt.Sprintf("etcd served its member list (%d voting members) through a leader with a quorum; it refuses the operator the members' status: %v", o.ListVoters, o.AuthRefused)
		return c
	}
	if o.ReadyMembers > 0 {
		// etcd refuses the operator its status and its member list (authentication, etcd
		// 3.6 and later), but members report ready: each confirmed a linearizable read
		// through a leader with a quorum.
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonQuorumAvailable
		c.Message = fmt.Sprintf("%d members report ready on /readyz (a read confirmed through a leader with a quorum); etcd refuses the operator the members' status and member list: %v", o.ReadyMembers, o.AuthRefused)
		return c
	}
	var ready int32
	if o.StatefulSet != nil {
		ready = o.StatefulSet.Status.ReadyReplicas
	}
	// Without an answer from etcd the cluster is not known to serve, whatever the pods'
	// readiness says (it lags, and a stopped node's pods stay Ready for a while).
	c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonQuorumNotReady
	c.Message = fmt.Sprintf("%d of %d member pods ready", ready, o.SpecReplicas)
	switch {
	case o.EtcdAsked && o.Reached > 0:
		c.Message += fmt.Sprintf("; %d members answer, but none can read the member list: no quorum", o.Reached)
	case o.EtcdErr != nil:
		c.Message += fmt.Sprintf("; etcd did not answer the operator: %v", o.EtcdErr)
	case o.EtcdAsked:
		c.Message += "; etcd did not answer the operator"
	}
	return c
}

func progressingCondition(o observe.Observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse}
	switch {
	case o.Paused:
		c.Reason, c.Message = v1alpha1.ReasonPaused, "spec.paused is set: the operator changes nothing and only reports status"
	case o.SpecErr != nil:
		c.Reason, c.Message = specErrReason(o.SpecErr), "waiting for a valid spec"
	case o.Membership != nil && o.Membership.Reason == v1alpha1.ReasonUpgradeStalled:
		c.Reason, c.Message = o.Membership.Reason, o.Membership.Message
	case o.StatefulSet == nil && o.Membership != nil && (o.Membership.Reason == v1alpha1.ReasonRestoring || o.Membership.Reason == v1alpha1.ReasonRestored):
		// A bootstrap restore holds the StatefulSet back: say what it does.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.Membership.Reason, o.Membership.Message
	case o.StatefulSet == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonCreating, "creating the StatefulSet"
	case o.PeerSwitch != nil && o.WasAvailable && (o.Membership == nil || rolloutReason(o.Membership.Reason) || o.Membership.Reason == v1alpha1.ReasonSwitchingPeerTLS):
		// The rollout restarts the members onto the switch's listeners, or a URL moves.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonSwitchingPeerTLS, o.PeerSwitch.Message
		if membershipProgress(o.Membership) && o.Membership.Reason != v1alpha1.ReasonSwitchingPeerTLS {
			c.Message += "; " + o.Membership.Message
		}
	case o.ClientSwitch != "" && o.WasAvailable && (o.Membership == nil || rolloutReason(o.Membership.Reason)):
		// The rollout restarts the members onto the switch's phase: say both.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonSwitchingClientTLS, o.ClientSwitch
		if membershipProgress(o.Membership) {
			c.Message += "; " + o.Membership.Message
		}
	case membershipProgress(o.Membership) && (o.WasAvailable || o.Membership.Reason != v1alpha1.ReasonBootstrapping):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.Membership.Reason, o.Membership.Message
	case o.CaRotation != "" && o.WasAvailable:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonRotatingCA, o.CaRotation
	case !o.WasAvailable && (stsOutdated(o) || o.StatefulSet.Status.ReadyReplicas < o.SpecReplicas):
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonCreating
		c.Message = fmt.Sprintf("%d of %d members ready", o.StatefulSet.Status.ReadyReplicas, o.SpecReplicas)
	case stsOutdated(o):
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonRollingOut
		c.Message = fmt.Sprintf("%d of %d member pods run the current pod template; with the OnDelete strategy a pod takes the new template when it is deleted", o.StatefulSet.Status.UpdatedReplicas, o.StatefulSet.Status.Replicas)
	default:
		c.Reason, c.Message = v1alpha1.ReasonReconciled, "the cluster matches the spec"
	}
	return c
}

// StsCaughtUp reports whether the StatefulSet read in this pass is the one last applied and
// the StatefulSet controller has observed it, so that its status names the current template's
// revision. o.sts must not be nil.
func StsCaughtUp(o observe.Observation) bool {
	s := o.StatefulSet
	return s.Status.ObservedGeneration >= s.Generation &&
		(o.StsApplied == "" || s.Annotations[apply.HashAnnotation] == o.StsApplied)
}

// stsOutdated reports whether the StatefulSet controller has not caught up with the spec, or
// pods run an older template. o.sts must not be nil.
func stsOutdated(o observe.Observation) bool {
	s := o.StatefulSet
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	return !StsCaughtUp(o) ||
		s.Status.Replicas != want ||
		(s.Status.UpdateRevision != "" && s.Status.CurrentRevision != s.Status.UpdateRevision && s.Status.UpdatedReplicas < want)
}

func degradedCondition(o observe.Observation, prog metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue}
	switch {
	case o.SpecErr != nil:
		c.Reason, c.Message = specErrReason(o.SpecErr), o.SpecErr.Error()
	case o.ApplyErr != nil:
		c.Reason, c.Message = v1alpha1.ReasonApplyFailed, o.ApplyErr.Error()
	case o.ClientSwitchHeld:
		c.Reason, c.Message = v1alpha1.ReasonAuthStillEnabled, o.ClientSwitch
	case LockedOut(o):
		c.Reason, c.Message = v1alpha1.ReasonAuthLockedOut, AuthLockoutMessage(o)
	case o.Membership != nil && Degrades(o.Membership.Reason):
		c.Reason, c.Message = o.Membership.Reason, o.Membership.Message
	case o.Etcd == nil && o.EtcdAsked && o.WasAvailable && o.Reached > 0:
		c.Reason = v1alpha1.ReasonQuorumLost
		c.Message = fmt.Sprintf("%d members answer, but none can read the member list: quorum is lost and the cluster does not serve", o.Reached)
	case o.Etcd == nil && o.EtcdAsked && o.WasAvailable:
		c.Reason = v1alpha1.ReasonEtcdUnreachable
		c.Message = "no member answered the operator"
		if o.EtcdErr != nil {
			c.Message += ": " + o.EtcdErr.Error()
		}
	case o.Etcd != nil && o.WasAvailable && !quorate(*o.Etcd):
		c.Reason = v1alpha1.ReasonQuorumLost
		c.Message = "fewer voting members answer than quorum needs: " + strings.Join(unhealthyMembers(*o.Etcd), "; ")
	case o.Etcd != nil && len(unhealthyMembers(*o.Etcd)) > 0:
		c.Reason, c.Message = v1alpha1.ReasonMembersUnhealthy, "unhealthy members: "+strings.Join(unhealthyMembers(*o.Etcd), "; ")
	case o.BackupCond != nil && Degrades(o.BackupCond.Reason):
		c.Reason, c.Message = o.BackupCond.Reason, o.BackupCond.Message
	case o.StatefulSet != nil && prog.Status == metav1.ConditionFalse && o.StatefulSet.Status.ReadyReplicas < o.SpecReplicas:
		c.Reason = v1alpha1.ReasonMembersUnhealthy
		c.Message = fmt.Sprintf("%d of %d member pods ready", o.StatefulSet.Status.ReadyReplicas, o.SpecReplicas)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "nothing needs attention"
	}
	return c
}

// LockedOut reports whether etcd refuses the operator as a user: it refused one of its calls
// in this pass, or reports its authentication on while the operator presents no client
// certificate (and so is no user).
func LockedOut(o observe.Observation) bool {
	return o.AuthRefused != nil || (o.Auth != nil && o.Auth.Enabled && o.OperatorUser == "")
}

// AuthLockoutMessage says what etcd refuses the operator and how to give it its identity
// back. o must be lockedOut.
func AuthLockoutMessage(o observe.Observation) string {
	var b strings.Builder
	if o.OperatorUser == "" {
		b.WriteString("etcd's authentication is on and the operator has no identity in etcd: it reaches the members without a client certificate (spec.tls.client was removed, or clientCertAuth is off), so it is no user")
	} else {
		fmt.Fprintf(&b, "etcd's authentication is on and does not take the operator's client certificate (common name %s) as a user with the root role", o.OperatorUser)
	}
	if o.AuthRefused != nil {
		fmt.Fprintf(&b, " (etcd answered: %v)", o.AuthRefused)
	}
	fmt.Fprintf(&b, ". etcd refuses it membership changes, defragmentation and snapshots: lost members are not replaced, backups fail and disaster recovery has no fresh backup. "+
		"To fix it, give the operator its identity back: put spec.tls.client back (with acceptPlain: true while clients use plain HTTP, and clientCertAuth on), then set spec.auth.enabled: false and wait for the operator to turn authentication off before removing tls.client; "+
		"or turn authentication off yourself as etcd's root user: etcdctl --user root auth disable (the password is in Secret %s)", v1alpha1.RootAuthSecretName(o.Cluster))
	return b.String()
}

// quorate reports whether a quorum of the voting members answered.
func quorate(o etcd.Observed) bool {
	voters, answering := int32(0), int32(0)
	for _, m := range o.Cluster.Members {
		if !m.IsLearner {
			voters++
			if _, ok := o.Status[m.ID]; ok {
				answering++
			}
		}
	}
	return voters > 0 && answering >= plan.Quorum(voters)
}

// specErrReason is VersionRefused for a version the running cluster cannot move to,
// TLSNotReady, ChartTooExpensive or ChartContractBroken for those errors, else InvalidSpec.
func specErrReason(err error) string {
	var ve *values.VersionError
	if errors.As(err, &ve) {
		return v1alpha1.ReasonVersionRefused
	}
	if render.IsTLSError(err) {
		return v1alpha1.ReasonTLSNotReady
	}
	if render.IsChartTooExpensive(err) {
		return v1alpha1.ReasonChartTooExpensive
	}
	var ce *chartcontract.Error
	if errors.As(err, &ce) {
		return v1alpha1.ReasonChartContractBroken
	}
	var pe *podsecurity.Error
	if errors.As(err, &pe) {
		return v1alpha1.ReasonPodSecurityViolation
	}
	return v1alpha1.ReasonInvalidSpec
}

// unhealthyMembers describes each member that did not answer or reported errors (alarms).
func unhealthyMembers(o etcd.Observed) []string {
	var out []string
	for _, m := range o.Cluster.Members {
		name := m.Name
		if name == "" {
			name = etcd.FormatID(m.ID)
		}
		if err, ok := o.StatusErr[m.ID]; ok {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
		} else if st, ok := o.Status[m.ID]; ok && len(plan.MemberErrors(st)) > 0 {
			out = append(out, fmt.Sprintf("%s: %s", name, strings.Join(plan.MemberErrors(st), ", ")))
		}
	}
	sort.Strings(out)
	return out
}

func readyCondition(o observe.Observation, avail, prog, degr metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case avail.Status != metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonNotAvailable, avail.Message
	case degr.Status == metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonDegraded, degr.Message
	case prog.Status == metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonProgressing, prog.Message
	case o.Paused:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonPaused, "available; spec.paused is set"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonReady, avail.Message
	}
	return c
}

// stalledCondition is Stalled: True, with Degraded's reason and message, when Degraded is
// True for a cause the operator does not get past without the user (see v1alpha1.Stalls and
// stalls).
func stalledCondition(o observe.Observation, degr metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotStalled,
		Message: "nothing waits for the user"}
	switch {
	case degr.Status != metav1.ConditionTrue:
	case Stalls(o, degr.Reason):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, degr.Reason, degr.Message
	default:
		c.Message = fmt.Sprintf("Degraded (%s) clears without the user: the operator waits for it or acts on it", degr.Reason)
	}
	return c
}

// Stalls reports whether Degraded's reason, given o, needs the user. Degraded gives the spec's
// error first, then the apply's, so reason is theirs when they are set.
func Stalls(o observe.Observation, reason string) bool {
	switch {
	case o.SpecErr != nil:
		// Only cert-manager issuing a Secret clears by itself.
		var te *render.TLSError
		return !errors.As(o.SpecErr, &te) || !te.Waits
	case o.ApplyErr != nil:
		return ApplyStalls(o.ApplyErr)
	}
	return v1alpha1.Stalls[reason]
}

// ApplyStalls reports whether the API server refused a rendered object for a reason a retry
// does not change: the object is invalid (a field the chart rendered from the spec, an
// immutable field the spec changed), or the request is forbidden (admission policy, quota,
// the operator's RBAC). Conflicts, timeouts and unavailable servers are retried.
func ApplyStalls(err error) bool {
	var taken *apply.NotOwnedError
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || errors.As(err, &taken)
}

// reconcilingCondition is Reconciling: True while the cluster is not Ready and the operator
// works on it, with the reason and message of the condition that says why (Progressing,
// else Degraded, else Available); False when Ready, paused or Stalled. Outside spec.paused,
// exactly one of Ready, Reconciling and Stalled is True.
func reconcilingCondition(o observe.Observation, avail, prog, degr, ready, stalled metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue}
	switch {
	case stalled.Status == metav1.ConditionTrue:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, stalled.Reason, "the operator cannot go on without the user: see Stalled"
	case o.Paused:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonPaused, "spec.paused is set: the operator changes nothing and only reports status"
	case prog.Status == metav1.ConditionTrue:
		c.Reason, c.Message = prog.Reason, prog.Message
	case degr.Status == metav1.ConditionTrue:
		c.Reason, c.Message = degr.Reason, degr.Message
	case avail.Status != metav1.ConditionTrue:
		c.Reason, c.Message = avail.Reason, avail.Message
	case ready.Status != metav1.ConditionTrue:
		c.Reason, c.Message = ready.Reason, ready.Message
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonReconciled, "the cluster matches the spec"
	}
	return c
}

// WasAvailable reports whether the cluster has formed before: then missing members are a
// degradation, not a creation in progress.
func WasAvailable(c *v1alpha1.EtcdCluster) bool {
	return c.Status.ClusterID != "" || IsTrue(c.Status.Conditions, v1alpha1.ConditionAvailable)
}

func IsTrue(conds []metav1.Condition, t string) bool {
	return meta.IsStatusConditionTrue(conds, t)
}

type Transition struct {
	Cond      metav1.Condition
	EventType string
}

// Transitions lists the conditions whose status differs from before, with the event
// type that fits: Warning when the news is bad.
func Transitions(before, after []metav1.Condition) []Transition {
	var out []Transition
	for _, a := range after {
		b := meta.FindStatusCondition(before, a.Type)
		if b != nil && b.Status == a.Status {
			continue
		}
		if b == nil && a.Status == metav1.ConditionFalse && a.Type != v1alpha1.ConditionAvailable && a.Type != v1alpha1.ConditionReady {
			continue // a condition that starts False (not Degraded, not Progressing) is no news
		}
		if a.Type == v1alpha1.ConditionReconciling {
			continue // it repeats Progressing, Degraded or Available, whose transitions are events
		}
		t := Transition{Cond: a, EventType: "Normal"}
		bad := (a.Type == v1alpha1.ConditionDegraded && a.Status == metav1.ConditionTrue) ||
			(a.Type == v1alpha1.ConditionStalled && a.Status == metav1.ConditionTrue) ||
			(a.Type == v1alpha1.ConditionAvailable && a.Status == metav1.ConditionFalse && b != nil) ||
			(a.Type == v1alpha1.ConditionEphemeralStorage && a.Status == metav1.ConditionTrue) ||
			(a.Type == v1alpha1.ConditionInsecureTransport && a.Status == metav1.ConditionTrue)
		if bad {
			t.EventType = "Warning"
		}
		out = append(out, t)
	}
	return out
}

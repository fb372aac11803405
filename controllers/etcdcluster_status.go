package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// observation is everything one pass knows about a cluster. Conditions are a pure function of
// it.
type observation struct {
	// cluster is the EtcdCluster's name.
	cluster      string
	generation   int64
	specReplicas int32
	paused       bool
	ephemeral    bool
	wasAvailable bool

	specErr  error
	applyErr error

	sts *appsv1.StatefulSet // nil when absent
	// stsApplied is the hash annotation of the StatefulSet as applied in this pass ("" when
	// this pass applied none). In the pass that applies a new one, sts is read from the cache
	// and may still be the old one: its revision and the pods' then say nothing about the new.
	stsApplied string
	// pods are the member pods, listed once per pass (nil when the StatefulSet is absent).
	pods *corev1.PodList

	etcd    *etcd.Observed // nil when etcd was not asked or did not answer
	etcdErr error
	// etcdAsked is true when this pass asked etcd (the StatefulSet exists); reached counts
	// the members that answered a status call when none could read the member list.
	etcdAsked bool
	reached   int
	// answers are the status replies of the members that answered the first round of this
	// pass's observation, by member ID, also when none could read the member list.
	answers map[uint64]etcd.MemberStatus

	// auth is etcd's authentication state read in this pass (nil when it was not read or
	// etcd did not answer); authRefused is an answer of etcd in this pass that refused the
	// operator as a user (none, unknown, not allowed), nil when none did.
	auth        *etcd.AuthState
	authRefused error
	// listVoters is the number of voting members in etcd's member list read linearizably
	// (which needs a leader with a quorum) when etcd refused the operator its status calls:
	// the evidence that the cluster serves. 0 when not read.
	listVoters int
	// operatorUser is who the operator is in etcd: its client certificate's common name (""
	// when it dials without one).
	operatorUser string

	// membership is the membership step of this pass; nil when none was considered
	// (paused, invalid spec, nothing applied yet).
	membership *plan.Step

	// upgrade is the rollout's progress when upgradeKnown (the rollout was considered).
	upgrade      *v1alpha1.UpgradeStatus
	upgradeKnown bool

	// targetVersion is spec.version (or its default); now is the pass's clock.
	targetVersion string
	now           time.Time
	// snapshotCount is the members' --snapshot-count.
	snapshotCount uint64

	// backups are the cluster's EtcdBackups, oldest first; backupCond is BackupReady (nil
	// without spec.backup).
	backups    []v1alpha1.EtcdBackup
	backupCond *metav1.Condition

	// caRotation is where a CA rotation stands ("" when none runs).
	caRotation string
	// clientSwitch is where a switch of the client port between plain and TLS stands (""
	// when none runs).
	clientSwitch string
	// clientSwitchHeld is true when the switch to plain holds because etcd's authentication
	// is on (or could not be read): clientSwitch says what to do.
	clientSwitchHeld bool
	// peerSwitch is the switch of the peer side between plain and TLS, nil when none runs.
	peerSwitch *peerSwitch
}

// degrades reports whether a reason needs the user's attention (see v1alpha1.ReasonEffects).
func degrades(reason string) bool { return v1alpha1.ReasonEffects[reason] == v1alpha1.EffectDegrades }

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
	return a != nil && a.Kind != plan.None && !degrades(a.Reason) && a.Reason != v1alpha1.ReasonReconciled && a.Reason != ""
}

// observe reads the StatefulSet from the cache and asks etcd, every pass, at the client URL of
// every member pod whose etcd container runs and has started (passed its startup probe),
// ready or not: a pod's readiness lags behind etcd, and a total outage must show in the
// status at once. A container that does not run, or whose listeners are not up yet, cannot
// answer, and asking it would only hold the pass for the call's timeout. When no
// member can read the member list (quorum lost, or still forming), it counts the members
// that answer a status call.
func (r *EtcdClusterReconciler) observe(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observation) error {
	return observeMembers(ctx, r.Client, r.DialEtcd, r.EtcdTimeout, c, t, o)
}

// observeMembers is observe for any controller that reads a cluster's members: it fills o.sts,
// o.pods and what etcd answered.
func observeMembers(ctx context.Context, kc client.Client, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, o *observation) error {
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	o.sts = sts
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
	}
	o.pods = pods
	var endpoints []string
	for i := range pods.Items {
		p := plan.Pod{}
		plan.PodState(&p, &pods.Items[i])
		if _, ok := plan.Ordinal(t.StatefulSet, pods.Items[i].Name); ok && p.Started {
			endpoints = append(endpoints, t.Endpoint(pods.Items[i].Name))
		}
	}
	o.etcdAsked = true
	if len(endpoints) == 0 {
		o.etcdErr = errors.New("no member pod runs etcd with its listeners up")
		return nil
	}
	cl, err := dial(ctx, endpoints, t.TLS)
	if err != nil {
		o.etcdErr = err
		return nil
	}
	defer cl.Close()
	o.operatorUser = operatorUser(t)
	rec := &refusals{Client: cl}
	obs, answers, err := etcd.ObserveEndpoints(ctx, rec, endpoints, timeout)
	o.answers = answers
	o.authRefused = rec.first()
	if err != nil {
		o.etcdErr, o.reached = err, len(answers)
		if o.authRefused != nil {
			// etcd answers, and refuses the operator its status calls (they need a user
			// while authentication is on): that is no outage. The member list needs no
			// user, and etcd serves it only through a leader with a quorum.
			lctx, cancel := context.WithTimeout(ctx, timeout)
			list, lerr := cl.MemberList(lctx)
			cancel()
			if lerr == nil {
				for _, m := range list.Members {
					if !m.IsLearner {
						o.listVoters++
					}
				}
			}
		}
		return nil
	}
	o.etcd = &obs
	if !authMayMatter(c, o.authRefused) {
		return nil
	}
	// etcd's authentication, once per pass while it may be on: whether the operator is locked
	// out, and what admission reads in status.authEnabled. etcd serves AuthStatus through raft
	// (an entry in the log per call), so a cluster whose etcd said it is off, and whose spec
	// does not ask for it, is not asked again: auth turned on by hand shows as refused calls.
	actx, cancel := context.WithTimeout(ctx, timeout)
	st, err := cl.Auth(actx, nil)
	cancel()
	switch {
	case err == nil:
		o.auth = &st
	case authRefused(err):
		// etcd answers this only without authentication, or to root.
		o.auth, o.authRefused = &etcd.AuthState{Enabled: true}, err
	}
	return nil
}

// authMayMatter reports whether a pass reads etcd's authentication state: spec.auth is set,
// etcd's answer is not known yet or was "on", or etcd refused the operator a call as a user.
func authMayMatter(c *v1alpha1.EtcdCluster, refused error) bool {
	return c.Spec.Auth != nil || c.Status.AuthEnabled == nil || *c.Status.AuthEnabled || refused != nil
}

// refusals is an etcd client that keeps the first answer of etcd refusing the operator as a
// user, among the status calls of an observation (which drops their errors).
type refusals struct {
	etcd.Client
	mu  sync.Mutex
	err error
}

// Status implements etcd.Client.
func (r *refusals) Status(ctx context.Context, endpoint string) (etcd.MemberStatus, error) {
	st, err := r.Client.Status(ctx, endpoint)
	if authRefused(err) {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return st, err
}

func (r *refusals) first() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// setStatus fills c.Status from o. It keeps LastTransitionTime of conditions whose status did
// not change, so an unchanged cluster gives an unchanged status.
func setStatus(c *v1alpha1.EtcdCluster, o observation, t render.Topology) {
	s := &c.Status
	s.Selector = t.Selector.String()
	if o.sts != nil {
		s.Replicas = o.sts.Status.Replicas
		s.ReadyReplicas = o.sts.Status.ReadyReplicas
	} else {
		s.Replicas, s.ReadyReplicas = 0, 0
	}
	if o.targetVersion != "" {
		s.TargetVersion = o.targetVersion
	}
	if o.etcd != nil {
		var leader, leaderID string
		s.Members, leader, leaderID, s.CurrentVersion = memberStatuses(*o.etcd)
		s.ClusterID = etcd.FormatID(o.etcd.Cluster.ClusterID)
		// During an election no leader is known: Leader keeps the last one seen (the member
		// table and Available say none leads now), so the next leader counts as one change.
		if leaderID != "" {
			if s.LeaderID != "" && s.LeaderID != leaderID {
				s.LeaderChanges++
				t := metav1.NewTime(o.now)
				s.LastLeaderChangeTime = &t
			}
			s.Leader, s.LeaderID = leader, leaderID
		}
		if cv := o.etcd.ClusterVersion(); cv != "" {
			if strings.HasPrefix(s.ClusterVersion, "3.5.") && !versions.Less(cv, "3.6.0") {
				// The log up to here may hold 3.5's v2 entries, which 3.7 cannot replay.
				s.LegacyLogIndex = max(1, highestIndex(*o.etcd))
			}
			s.ClusterVersion = cv
		}
		if s.LegacyLogIndex != 0 && snapshotPast(*o.etcd, s.LegacyLogIndex, o.snapshotCount) {
			s.LegacyLogIndex = 0
		}
	} else if o.sts == nil || (o.sts.Status.Replicas == 0 && !o.etcdAsked) {
		// No member runs: nothing to report.
		s.Members, s.Leader, s.LeaderID = nil, "", ""
	} else if o.etcdAsked {
		// Members run, or ran, but no member could read the member list: the table keeps the
		// members etcd listed last, none healthy and none leading, so the status and the
		// metrics show the outage in this pass. Leader keeps the last leader seen.
		for i := range s.Members {
			s.Members[i].Healthy, s.Members[i].Leader = false, false
		}
	}
	if o.upgradeKnown {
		s.Upgrade = o.upgrade
	}
	// What admission reads before it lets the operator's client certificate go; kept as it
	// was when etcd was not asked.
	switch {
	case o.auth != nil:
		s.AuthEnabled = ptr.To(o.auth.Enabled)
	case o.authRefused != nil:
		s.AuthEnabled = ptr.To(true)
	}
	for _, cond := range conditions(o) {
		cond.ObservedGeneration = o.generation
		meta.SetStatusCondition(&s.Conditions, cond)
	}
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

// memberStatuses turns an etcd observation into the status member table, the leader's name
// and ID, and the lowest version running.
func memberStatuses(o etcd.Observed) (members []v1alpha1.MemberStatus, leaderName, leaderID, lowest string) {
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

// conditions computes Available, Progressing, Degraded, Ready, Reconciling, Stalled and
// EphemeralStorage (and BackupReady with spec.backup).
func conditions(o observation) []metav1.Condition {
	avail := availableCondition(o)
	prog := progressingCondition(o)
	degr := degradedCondition(o, prog)
	ready := readyCondition(o, avail, prog, degr)
	stalled := stalledCondition(o, degr)
	reconciling := reconcilingCondition(o, avail, prog, degr, ready, stalled)
	eph := metav1.Condition{Type: v1alpha1.ConditionEphemeralStorage, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonPersistentVolumes, Message: "members keep their data on PersistentVolumeClaims"}
	if o.ephemeral {
		eph = metav1.Condition{Type: v1alpha1.ConditionEphemeralStorage, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonEmptyDir,
			Message: "storage.ephemeral is set: members keep their data in emptyDir volumes and lose it when their pod is deleted; do not keep data you need here"}
	}
	conds := []metav1.Condition{avail, prog, degr, ready, reconciling, stalled, eph}
	if o.backupCond != nil {
		conds = append(conds, *o.backupCond)
	}
	return conds
}

func availableCondition(o observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionAvailable}
	if o.etcd != nil {
		voting, healthy := int32(0), int32(0)
		for _, m := range o.etcd.Cluster.Members {
			if m.IsLearner {
				continue
			}
			voting++
			if st, ok := o.etcd.Status[m.ID]; ok && len(plan.MemberErrors(st)) == 0 {
				healthy++
			}
		}
		leader := o.etcd.Leader()
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
	if o.listVoters > 0 {
		// etcd refuses the operator the members' status (authentication), but served it
		// the member list linearizably, which only a leader with a quorum does.
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonQuorumAvailable
		c.Message = fmt.Sprintf("etcd served its member list (%d voting members) through a leader with a quorum; it refuses the operator the members' status: %v", o.listVoters, o.authRefused)
		return c
	}
	var ready int32
	if o.sts != nil {
		ready = o.sts.Status.ReadyReplicas
	}
	// Without an answer from etcd the cluster is not known to serve, whatever the pods'
	// readiness says (it lags, and a stopped node's pods stay Ready for a while).
	c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonQuorumNotReady
	c.Message = fmt.Sprintf("%d of %d member pods ready", ready, o.specReplicas)
	switch {
	case o.etcdAsked && o.reached > 0:
		c.Message += fmt.Sprintf("; %d members answer, but none can read the member list: no quorum", o.reached)
	case o.etcdErr != nil:
		c.Message += fmt.Sprintf("; etcd did not answer the operator: %v", o.etcdErr)
	case o.etcdAsked:
		c.Message += "; etcd did not answer the operator"
	}
	return c
}

func progressingCondition(o observation) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse}
	switch {
	case o.paused:
		c.Reason, c.Message = v1alpha1.ReasonPaused, "spec.paused is set: the operator changes nothing and only reports status"
	case o.specErr != nil:
		c.Reason, c.Message = specErrReason(o.specErr), "waiting for a valid spec"
	case o.membership != nil && o.membership.Reason == v1alpha1.ReasonUpgradeStalled:
		c.Reason, c.Message = o.membership.Reason, o.membership.Message
	case o.sts == nil && o.membership != nil && (o.membership.Reason == v1alpha1.ReasonRestoring || o.membership.Reason == v1alpha1.ReasonRestored):
		// A bootstrap restore holds the StatefulSet back: say what it does.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.membership.Reason, o.membership.Message
	case o.sts == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonCreating, "creating the StatefulSet"
	case o.peerSwitch != nil && o.wasAvailable && (o.membership == nil || rolloutReason(o.membership.Reason) || o.membership.Reason == v1alpha1.ReasonSwitchingPeerTLS):
		// The rollout restarts the members onto the switch's listeners, or a URL moves.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonSwitchingPeerTLS, o.peerSwitch.decision.Message
		if membershipProgress(o.membership) && o.membership.Reason != v1alpha1.ReasonSwitchingPeerTLS {
			c.Message += "; " + o.membership.Message
		}
	case o.clientSwitch != "" && o.wasAvailable && (o.membership == nil || rolloutReason(o.membership.Reason)):
		// The rollout restarts the members onto the switch's phase: say both.
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonSwitchingClientTLS, o.clientSwitch
		if membershipProgress(o.membership) {
			c.Message += "; " + o.membership.Message
		}
	case membershipProgress(o.membership) && (o.wasAvailable || o.membership.Reason != v1alpha1.ReasonBootstrapping):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.membership.Reason, o.membership.Message
	case o.caRotation != "" && o.wasAvailable:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonRotatingCA, o.caRotation
	case !o.wasAvailable && (stsOutdated(o) || o.sts.Status.ReadyReplicas < o.specReplicas):
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonCreating
		c.Message = fmt.Sprintf("%d of %d members ready", o.sts.Status.ReadyReplicas, o.specReplicas)
	case stsOutdated(o):
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonRollingOut
		c.Message = fmt.Sprintf("%d of %d member pods run the current pod template; with the OnDelete strategy a pod takes the new template when it is deleted", o.sts.Status.UpdatedReplicas, o.sts.Status.Replicas)
	default:
		c.Reason, c.Message = v1alpha1.ReasonReconciled, "the cluster matches the spec"
	}
	return c
}

// stsCaughtUp reports whether the StatefulSet read in this pass is the one last applied and
// the StatefulSet controller has observed it, so that its status names the current template's
// revision. o.sts must not be nil.
func stsCaughtUp(o observation) bool {
	s := o.sts
	return s.Status.ObservedGeneration >= s.Generation &&
		(o.stsApplied == "" || s.Annotations[apply.HashAnnotation] == o.stsApplied)
}

// stsOutdated reports whether the StatefulSet controller has not caught up with the spec, or
// pods run an older template. o.sts must not be nil.
func stsOutdated(o observation) bool {
	s := o.sts
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	return !stsCaughtUp(o) ||
		s.Status.Replicas != want ||
		(s.Status.UpdateRevision != "" && s.Status.CurrentRevision != s.Status.UpdateRevision && s.Status.UpdatedReplicas < want)
}

func degradedCondition(o observation, prog metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue}
	switch {
	case o.specErr != nil:
		c.Reason, c.Message = specErrReason(o.specErr), o.specErr.Error()
	case o.applyErr != nil:
		c.Reason, c.Message = v1alpha1.ReasonApplyFailed, o.applyErr.Error()
	case o.clientSwitchHeld:
		c.Reason, c.Message = v1alpha1.ReasonAuthStillEnabled, o.clientSwitch
	case lockedOut(o):
		c.Reason, c.Message = v1alpha1.ReasonAuthLockedOut, authLockoutMessage(o)
	case o.membership != nil && degrades(o.membership.Reason):
		c.Reason, c.Message = o.membership.Reason, o.membership.Message
	case o.etcd == nil && o.etcdAsked && o.wasAvailable && o.reached > 0:
		c.Reason = v1alpha1.ReasonQuorumLost
		c.Message = fmt.Sprintf("%d members answer, but none can read the member list: quorum is lost and the cluster does not serve", o.reached)
	case o.etcd == nil && o.etcdAsked && o.wasAvailable:
		c.Reason = v1alpha1.ReasonEtcdUnreachable
		c.Message = "no member answered the operator"
		if o.etcdErr != nil {
			c.Message += ": " + o.etcdErr.Error()
		}
	case o.etcd != nil && o.wasAvailable && !quorate(*o.etcd):
		c.Reason = v1alpha1.ReasonQuorumLost
		c.Message = "fewer voting members answer than quorum needs: " + strings.Join(unhealthyMembers(*o.etcd), "; ")
	case o.etcd != nil && len(unhealthyMembers(*o.etcd)) > 0:
		c.Reason, c.Message = v1alpha1.ReasonMembersUnhealthy, "unhealthy members: "+strings.Join(unhealthyMembers(*o.etcd), "; ")
	case o.backupCond != nil && degrades(o.backupCond.Reason):
		c.Reason, c.Message = o.backupCond.Reason, o.backupCond.Message
	case o.sts != nil && prog.Status == metav1.ConditionFalse && o.sts.Status.ReadyReplicas < o.specReplicas:
		c.Reason = v1alpha1.ReasonMembersUnhealthy
		c.Message = fmt.Sprintf("%d of %d member pods ready", o.sts.Status.ReadyReplicas, o.specReplicas)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "nothing needs attention"
	}
	return c
}

// lockedOut reports whether etcd refuses the operator as a user: it refused one of its calls
// in this pass, or reports its authentication on while the operator presents no client
// certificate (and so is no user).
func lockedOut(o observation) bool {
	return o.authRefused != nil || (o.auth != nil && o.auth.Enabled && o.operatorUser == "")
}

// authLockoutMessage says what etcd refuses the operator and how to give it its identity
// back. o must be lockedOut.
func authLockoutMessage(o observation) string {
	var b strings.Builder
	if o.operatorUser == "" {
		b.WriteString("etcd's authentication is on and the operator has no identity in etcd: it reaches the members without a client certificate (spec.tls.client was removed, or clientCertAuth is off), so it is no user")
	} else {
		fmt.Fprintf(&b, "etcd's authentication is on and does not take the operator's client certificate (common name %s) as a user with the root role", o.operatorUser)
	}
	if o.authRefused != nil {
		fmt.Fprintf(&b, " (etcd answered: %v)", o.authRefused)
	}
	fmt.Fprintf(&b, ". etcd refuses it membership changes, defragmentation and snapshots: lost members are not replaced, backups fail and disaster recovery has no fresh backup. "+
		"To fix it, give the operator its identity back: put spec.tls.client back (with acceptPlain: true while clients use plain HTTP, and clientCertAuth on), then set spec.auth.enabled: false and wait for the operator to turn authentication off before removing tls.client; "+
		"or turn authentication off yourself as etcd's root user: etcdctl --user root auth disable (the password is in Secret %s)", v1alpha1.RootAuthSecretName(o.cluster))
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

// specErrReason is VersionRefused for a version the running cluster cannot move to, else
// InvalidSpec.
func specErrReason(err error) string {
	var ve *values.VersionError
	if errors.As(err, &ve) {
		return v1alpha1.ReasonVersionRefused
	}
	if isTLSError(err) {
		return v1alpha1.ReasonTLSNotReady
	}
	var ce *chartcontract.Error
	if errors.As(err, &ce) {
		return v1alpha1.ReasonChartContractBroken
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

func readyCondition(o observation, avail, prog, degr metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case avail.Status != metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonNotAvailable, avail.Message
	case degr.Status == metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonDegraded, degr.Message
	case prog.Status == metav1.ConditionTrue:
		c.Reason, c.Message = v1alpha1.ReasonProgressing, prog.Message
	case o.paused:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonPaused, "available; spec.paused is set"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonReady, avail.Message
	}
	return c
}

// stalledCondition is Stalled: True, with Degraded's reason and message, when Degraded is
// True for a cause the operator does not get past without the user (see v1alpha1.Stalls and
// stalls).
func stalledCondition(o observation, degr metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotStalled,
		Message: "nothing waits for the user"}
	switch {
	case degr.Status != metav1.ConditionTrue:
	case stalls(o, degr.Reason):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, degr.Reason, degr.Message
	default:
		c.Message = fmt.Sprintf("Degraded (%s) clears without the user: the operator waits for it or acts on it", degr.Reason)
	}
	return c
}

// stalls reports whether Degraded's reason, given o, needs the user. Degraded gives the spec's
// error first, then the apply's, so reason is theirs when they are set.
func stalls(o observation, reason string) bool {
	switch {
	case o.specErr != nil:
		// Only cert-manager issuing a Secret clears by itself.
		var te *TLSError
		return !errors.As(o.specErr, &te) || !te.Waits
	case o.applyErr != nil:
		return applyStalls(o.applyErr)
	}
	return v1alpha1.Stalls[reason]
}

// applyStalls reports whether the API server refused a rendered object for a reason a retry
// does not change: the object is invalid (a field the chart rendered from the spec, an
// immutable field the spec changed), or the request is forbidden (admission policy, quota,
// the operator's RBAC). Conflicts, timeouts and unavailable servers are retried.
func applyStalls(err error) bool {
	var taken *apply.NotOwnedError
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || errors.As(err, &taken)
}

// reconcilingCondition is Reconciling: True while the cluster is not Ready and the operator
// works on it, with the reason and message of the condition that says why (Progressing,
// else Degraded, else Available); False when Ready, paused or Stalled. Outside spec.paused,
// exactly one of Ready, Reconciling and Stalled is True.
func reconcilingCondition(o observation, avail, prog, degr, ready, stalled metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue}
	switch {
	case stalled.Status == metav1.ConditionTrue:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, stalled.Reason, "the operator cannot go on without the user: see Stalled"
	case o.paused:
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

// wasAvailable reports whether the cluster has formed before: then missing members are a
// degradation, not a creation in progress.
func wasAvailable(c *v1alpha1.EtcdCluster) bool {
	return c.Status.ClusterID != "" || isTrue(c.Status.Conditions, v1alpha1.ConditionAvailable)
}

func isTrue(conds []metav1.Condition, t string) bool {
	return meta.IsStatusConditionTrue(conds, t)
}

type transition struct {
	cond      metav1.Condition
	eventType string
}

// conditionTransitions lists the conditions whose status differs from before, with the event
// type that fits: Warning when the news is bad.
func conditionTransitions(before, after []metav1.Condition) []transition {
	var out []transition
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
		t := transition{cond: a, eventType: "Normal"}
		bad := (a.Type == v1alpha1.ConditionDegraded && a.Status == metav1.ConditionTrue) ||
			(a.Type == v1alpha1.ConditionStalled && a.Status == metav1.ConditionTrue) ||
			(a.Type == v1alpha1.ConditionAvailable && a.Status == metav1.ConditionFalse && b != nil) ||
			(a.Type == v1alpha1.ConditionEphemeralStorage && a.Status == metav1.ConditionTrue)
		if bad {
			t.eventType = "Warning"
		}
		out = append(out, t)
	}
	return out
}

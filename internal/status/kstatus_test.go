package status

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// clusterAfterPass is an EtcdCluster at generation 2 after a pass over o. observed says
// whether the pass finished (observedGeneration 2) or a pass for generation 1 is the last
// that did.
func clusterAfterPass(o observe.Observation, observed bool, paused bool) *v1alpha1.EtcdCluster {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", Generation: 2}}
	c.Spec.Paused = paused
	o.Generation, o.Paused = 2, paused
	Set(c, o, render.Topology{Selector: labels.Everything()})
	c.Status.ObservedGeneration = 1
	if observed {
		c.Status.ObservedGeneration = 2
	}
	return c
}

var clusterGVK = v1alpha1.GroupVersion.WithKind("EtcdCluster")

// TestKstatusReadsTheClusterAsTheOperatorMeansIt runs kstatus itself on statuses the operator
// writes.
func TestKstatusReadsTheClusterAsTheOperatorMeansIt(t *testing.T) {
	healthy := func() observe.Observation {
		return observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, Etcd: testutil.EtcdObserved(3, 1, nil, nil)}
	}
	with := func(f func(*observe.Observation)) observe.Observation { o := healthy(); f(&o); return o }
	step := func(kind plan.Kind, reason, msg string) func(*observe.Observation) {
		return func(o *observe.Observation) { o.Membership = &plan.Step{Kind: kind, Reason: reason, Message: msg} }
	}
	invalid := errors.New(`spec.chart.values: terminationGracePeriodSeconds must be at least 1`)
	gr := schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	tests := []struct {
		name     string
		o        observe.Observation
		observed bool // observedGeneration == generation
		paused   bool
		deleting bool
		// want is kstatus's status; reason the reason kstatus reports from Reconciling or
		// Stalled ("" when it reads Ready).
		want   kstatus.Status
		reason string
	}{
		{name: "available and done", o: healthy(), observed: true, want: kstatus.CurrentStatus},
		{name: "generation bumped, not observed yet", o: healthy(), want: kstatus.InProgressStatus, reason: "LatestGenerationNotObserved"},
		{name: "just created, nothing applied yet", o: observe.Observation{SpecReplicas: 3}, observed: true,
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonCreating},
		{name: "members forming", o: observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 1, 3), EtcdAsked: true}, observed: true,
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonCreating},
		{name: "mid-upgrade: a member restarting onto the new template", observed: true,
			o:    with(step(plan.Wait, v1alpha1.ReasonMemberRestarting, "member etcd-1 restarted on the new pod template and is not back yet")),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonMemberRestarting},
		{name: "mid-upgrade: restarting the next member", observed: true,
			o:    with(step(plan.DeletePod, v1alpha1.ReasonRollingOut, "restarting etcd-2 onto the new pod template")),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonRollingOut},
		{name: "scale-out: learner catching up", observed: true,
			o:    with(step(plan.Wait, v1alpha1.ReasonLearnerCatchingUp, "learner etcd-3 is catching up")),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonLearnerCatchingUp},
		{name: "peer TLS switch", observed: true,
			o: with(func(o *observe.Observation) {
				o.PeerSwitch = &peerswitch.Decision{}
				o.PeerSwitch.Message = "restarting the members onto the transition listener"
			}),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonSwitchingPeerTLS},
		{name: "a member down: the operator waits for it", o: with(func(o *observe.Observation) { o.Etcd = testutil.EtcdObserved(3, 1, []uint64{3}, nil) }), observed: true,
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonMembersUnhealthy},
		{name: "quorum lost: members may come back", observed: true,
			o: with(func(o *observe.Observation) {
				o.Etcd, o.EtcdErr, o.Reached = nil, errors.New("context deadline exceeded"), 1
			}),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonQuorumLost},
		{name: "invalid spec", o: with(func(o *observe.Observation) { o.SpecErr = invalid }), observed: true,
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonInvalidSpec},
		{name: "invalid spec, paused", o: with(func(o *observe.Observation) { o.SpecErr = invalid }), observed: true, paused: true,
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonInvalidSpec},
		{name: "version below the cluster version", observed: true,
			o:    with(func(o *observe.Observation) { o.SpecErr = fmt.Errorf("failed to render: %w", &values.VersionError{}) }),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonVersionRefused},
		{name: "a patch makes a pod privileged", observed: true,
			o: with(func(o *observe.Observation) {
				o.SpecErr = &podsecurity.Error{Level: podsecurity.Restricted, Violations: []string{`StatefulSet etcd: spec.template.spec: privileged (container "etcd" must not set securityContext.privileged=true)`}}
			}),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonPodSecurityViolation},
		{name: "a TLS Secret the user provides is missing", observed: true,
			o: with(func(o *observe.Observation) {
				o.SpecErr = &render.TLSError{Msg: "Secret ns/peer (spec.tls.peer.secretName) does not exist"}
			}),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonTLSNotReady},
		{name: "the chart of spec.chart.source exceeds the render budget", observed: true,
			o: with(func(o *observe.Observation) {
				o.SpecErr = fmt.Errorf("the chart refused the values computed from the spec: %w", &charts.BudgetError{Limit: charts.LimitMemory, Value: "128 MiB"})
			}),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonChartTooExpensive},
		{name: "cert-manager has not issued a Secret yet", observed: true,
			o: with(func(o *observe.Observation) {
				o.SpecErr = &render.TLSError{Msg: "Secret ns/etcd-peer-tls does not exist yet", Waits: true}
			}),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonTLSNotReady},
		{name: "the API server refuses a rendered object as invalid", observed: true,
			o: with(func(o *observe.Observation) {
				o.ApplyErr = fmt.Errorf("failed to apply StatefulSet ns/etcd: %w", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, "etcd", nil))
			}),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonApplyFailed},
		{name: "the API server is briefly unavailable: retried", // the pass ends in an error: generation not observed
			o: with(func(o *observe.Observation) {
				o.ApplyErr = fmt.Errorf("failed to apply StatefulSet ns/etcd: %w", apierrors.NewServiceUnavailable("etcdserver: leader changed"))
			}),
			want: kstatus.InProgressStatus, reason: "LatestGenerationNotObserved"},
		{name: "a conflict, observed by an earlier pass of this generation", observed: true,
			o: with(func(o *observe.Observation) {
				o.ApplyErr = fmt.Errorf("failed to apply StatefulSet ns/etcd: %w", apierrors.NewConflict(gr, "etcd", errors.New("the object has been modified")))
			}),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonApplyFailed},
		{name: "upgrade stalled", observed: true,
			o:    with(step(plan.Wait, v1alpha1.ReasonUpgradeStalled, "member etcd-1 did not become healthy within 5m0s")),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonUpgradeStalled},
		{name: "a stale volume blocks a scale-out", observed: true,
			o:    with(step(plan.Wait, v1alpha1.ReasonStaleVolume, "volume claim of etcd-3 is left from a removed member")),
			want: kstatus.FailedStatus, reason: v1alpha1.ReasonStaleVolume},
		{name: "a learner that never started is replaced by the operator", observed: true,
			o:    with(step(plan.RemoveMember, v1alpha1.ReasonLearnerNeverStarted, "learner etcd-3 did not start within 5m0s; removing it")),
			want: kstatus.InProgressStatus, reason: v1alpha1.ReasonLearnerNeverStarted},
		{name: "paused and healthy", o: healthy(), observed: true, paused: true, want: kstatus.CurrentStatus},
		{name: "being deleted", o: healthy(), observed: true, deleting: true, want: kstatus.TerminatingStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterAfterPass(tt.o, tt.observed, tt.paused)
			if tt.deleting {
				now := metav1.Now()
				c.DeletionTimestamp = &now
			}
			res := testutil.KStatus(t, c, clusterGVK)
			if res.Status != tt.want {
				t.Fatalf("kstatus %s (%s), want %s; conditions %+v", res.Status, res.Message, tt.want, c.Status.Conditions)
			}
			reason := ""
			if len(res.Conditions) > 0 {
				reason = res.Conditions[0].Reason
			}
			if reason != tt.reason {
				t.Fatalf("kstatus %s with reason %q, want %q (%s)", res.Status, reason, tt.reason, res.Message)
			}
			// Outside spec.paused exactly one of Ready, Reconciling and Stalled is True.
			if !tt.paused {
				var trueOnes []string
				for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
					if meta.IsStatusConditionTrue(c.Status.Conditions, typ) {
						trueOnes = append(trueOnes, typ)
					}
				}
				if len(trueOnes) != 1 {
					t.Fatalf("True: %v, want exactly one of Ready, Reconciling, Stalled; conditions %+v", trueOnes, c.Status.Conditions)
				}
			}
			// Stalled carries Degraded's reason and message; Reconciling, when True, those of
			// the condition that says why.
			if s := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionStalled); s.Status == metav1.ConditionTrue {
				d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
				if s.Reason != d.Reason || s.Message != d.Message || s.Message == "" {
					t.Fatalf("Stalled %s: %q, Degraded %s: %q", s.Reason, s.Message, d.Reason, d.Message)
				}
			}
		})
	}
}

// TestEveryDegradingReasonSaysWhetherItStalls: each reason that degrades says once, in
// v1alpha1.Stalls, whether the operator gets past it by itself.
func TestEveryDegradingReasonSaysWhetherItStalls(t *testing.T) {
	for reason, effect := range v1alpha1.ReasonEffects {
		if _, ok := v1alpha1.Stalls[reason]; effect == v1alpha1.EffectDegrades && !ok {
			t.Errorf("reason %s degrades and is not in v1alpha1.Stalls", reason)
		}
	}
	for reason := range v1alpha1.Stalls {
		if v1alpha1.ReasonEffects[reason] != v1alpha1.EffectDegrades {
			t.Errorf("v1alpha1.Stalls lists %s, which does not degrade (%q)", reason, v1alpha1.ReasonEffects[reason])
		}
	}
}

// TestStalledIsAWarningAndReconcilingNoEvent: Stalled becoming True is a Warning event and
// clearing it a Normal one; Reconciling repeats other conditions and gives none.
func TestStalledIsAWarningAndReconcilingNoEvent(t *testing.T) {
	healthy := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)}
	stalled := healthy
	stalled.SpecErr = errors.New("spec.chart.values: bad")
	rolling := healthy
	rolling.Membership = &plan.Step{Kind: plan.DeletePod, Reason: v1alpha1.ReasonRollingOut, Message: "restarting etcd-0"}
	kinds := func(before, after observe.Observation) map[string]string {
		out := map[string]string{}
		for _, tr := range Transitions(Conditions(before), Conditions(after)) {
			out[tr.Cond.Type] = tr.EventType
		}
		return out
	}
	if k := kinds(healthy, stalled); k[v1alpha1.ConditionStalled] != "Warning" {
		t.Fatalf("Stalled True: events %v", k)
	}
	if k := kinds(stalled, healthy); k[v1alpha1.ConditionStalled] != "Normal" {
		t.Fatalf("Stalled cleared: events %v", k)
	}
	if k := kinds(healthy, rolling); k[v1alpha1.ConditionReconciling] != "" || k[v1alpha1.ConditionProgressing] != "Normal" {
		t.Fatalf("a rollout: events %v", k)
	}
	// A new cluster's Reconciling and Stalled start without an event.
	for typ := range kinds(observe.Observation{}, observe.Observation{SpecReplicas: 3}) {
		if typ == v1alpha1.ConditionStalled || typ == v1alpha1.ConditionReconciling {
			t.Fatalf("a new cluster's %s gave an event", typ)
		}
	}
}

package status

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// errUserEmpty is how etcd refuses a call without a user while authentication is on.
var errUserEmpty = fmt.Errorf("failed to get status of etcd member http://m1:2379: %w", rpctypes.ErrUserEmpty)

func TestConditions(t *testing.T) {
	invalid := errors.New("spec.etcd.extraArgs sets unknown etcd flags: foo; remove them")
	tests := []struct {
		name                                    string
		o                                       observe.Observation
		available, progressing, degraded, ready string
	}{
		{
			name:      "just created, nothing applied yet",
			o:         observe.Observation{SpecReplicas: 3},
			available: "False/QuorumNotReady", progressing: "True/Creating", degraded: "False/AsExpected", ready: "False/NotAvailable",
		},
		{
			name:      "pods starting for the first time",
			o:         observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 1, 3)},
			available: "False/QuorumNotReady", progressing: "True/Creating", degraded: "False/AsExpected", ready: "False/NotAvailable",
		},
		{
			name:      "healthy, etcd answers",
			o:         observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "False/AsExpected", ready: "True/Ready",
		},
		{
			name:      "healthy pods, etcd unreachable from the operator: not known to serve",
			o:         observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, EtcdErr: errors.New("dial timeout")},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "False/AsExpected", ready: "False/NotAvailable",
		},
		{
			name:      "a formed cluster whose members do not answer",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, EtcdErr: errors.New("dial timeout")},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "True/EtcdUnreachable", ready: "False/NotAvailable",
		},
		{
			name:      "a formed cluster with one member alive and no quorum (path 6)",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true, Reached: 1, EtcdErr: errors.New("context deadline exceeded")},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "True/QuorumLost", ready: "False/NotAvailable",
		},
		{
			name:      "one of three members down keeps quorum but degrades",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 2, 3), Etcd: testutil.EtcdObserved(3, 1, []uint64{3}, nil)},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/MembersUnhealthy", ready: "False/Degraded",
		},
		{
			name:      "an alarm degrades",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, []uint64{2})},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/MembersUnhealthy", ready: "False/Degraded",
		},
		{
			name:      "two of three down loses quorum",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 1, 3), Etcd: testutil.EtcdObserved(3, 0, []uint64{2, 3}, nil)},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "True/QuorumLost", ready: "False/NotAvailable",
		},
		{
			name:      "no leader is not available",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 0, nil, nil)},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "False/AsExpected", ready: "False/NotAvailable",
		},
		{
			name: "etcd refuses the operator its status calls (auth on, no user) but serves the member list: locked out, not unreachable",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true,
				EtcdErr: errors.New("no member that answers knows a leader (0 of 3 endpoints answered)"), AuthRefused: errUserEmpty, ListVoters: 3},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/AuthLockedOut", ready: "False/Degraded",
		},
		{
			name: "etcd 3.6 refuses the operator its status calls and its member list, and members report ready: locked out, quorum shown by /readyz",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true,
				EtcdErr: errors.New("no member that answers knows a leader (0 of 3 endpoints answered)"), AuthRefused: errUserEmpty, ReadyMembers: 3},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/AuthLockedOut", ready: "False/Degraded",
		},
		{
			name: "etcd refuses the operator its status calls and its member list: locked out, quorum not known",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), EtcdAsked: true,
				EtcdErr: errors.New("no member that answers knows a leader (0 of 3 endpoints answered)"), AuthRefused: errUserEmpty},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "True/AuthLockedOut", ready: "False/NotAvailable",
		},
		{
			name: "etcd answers, reports auth on, and the operator has no client certificate: locked out",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil),
				Auth: &etcd.AuthState{Enabled: true}},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/AuthLockedOut", ready: "False/Degraded",
		},
		{
			name: "etcd reports auth on and the operator presents its certificate: as expected",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil),
				Auth: &etcd.AuthState{Enabled: true}, OperatorUser: "etcd-pilot"},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "False/AsExpected", ready: "True/Ready",
		},
		{
			name: "the client port's switch to plain holds while etcd's auth is on",
			o: observe.Observation{Cluster: "demo", SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil),
				Auth: &etcd.AuthState{Enabled: true}, OperatorUser: "etcd-pilot", ClientSwitch: "etcd's authentication is on", ClientSwitchHeld: true},
			available: "True/QuorumAvailable", progressing: "True/SwitchingClientTLS", degraded: "True/AuthStillEnabled", ready: "False/Degraded",
		},
		{
			name:      "a formed cluster with a pod not ready and etcd unreachable is degraded",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 2, 3), EtcdAsked: true},
			available: "False/QuorumNotReady", progressing: "False/Reconciled", degraded: "True/EtcdUnreachable", ready: "False/NotAvailable",
		},
		{
			name: "pods on an older template",
			o: observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: func() *appsv1.StatefulSet {
				s := testutil.StatefulSet(3, 3, 1)
				s.Status.UpdateRevision = "b"
				return s
			}(), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "True/RollingOut", degraded: "False/AsExpected", ready: "False/Progressing",
		},
		{
			name:      "StatefulSet controller behind the spec",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: func() *appsv1.StatefulSet { s := testutil.StatefulSet(3, 3, 3); s.Generation = 2; return s }(), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "True/RollingOut", degraded: "False/AsExpected", ready: "False/Progressing",
		},
		{
			// The pass that applies a new StatefulSet reads the old one from the cache, whose
			// generation the StatefulSet controller observed long ago.
			name:      "the cached StatefulSet is not the one this pass applied",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 3, 3), StsApplied: "new", Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "True/RollingOut", degraded: "False/AsExpected", ready: "False/Progressing",
		},
		{
			name: "the cached StatefulSet is the one this pass applied",
			o: observe.Observation{SpecReplicas: 3, WasAvailable: true, StsApplied: "new", Etcd: testutil.EtcdObserved(3, 1, nil, nil), StatefulSet: func() *appsv1.StatefulSet {
				s := testutil.StatefulSet(3, 3, 3)
				s.Annotations = map[string]string{apply.HashAnnotation: "new"}
				return s
			}()},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "False/AsExpected", ready: "True/Ready",
		},
		{
			name:      "invalid spec on a healthy cluster",
			o:         observe.Observation{SpecReplicas: 3, WasAvailable: true, SpecErr: invalid, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "False/InvalidSpec", degraded: "True/InvalidSpec", ready: "False/Degraded",
		},
		{
			name:      "apply refused",
			o:         observe.Observation{SpecReplicas: 3, ApplyErr: errors.New("failed to apply StatefulSet"), StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/ApplyFailed", ready: "False/Degraded",
		},
		{
			name:      "paused and healthy",
			o:         observe.Observation{SpecReplicas: 3, Paused: true, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)},
			available: "True/QuorumAvailable", progressing: "False/Paused", degraded: "False/AsExpected", ready: "True/Paused",
		},
		{
			name: "learners do not count for quorum",
			o: observe.Observation{SpecReplicas: 1, StatefulSet: testutil.StatefulSet(1, 1, 1), Etcd: func() *etcd.Observed {
				o := testutil.EtcdObserved(2, 1, []uint64{2}, nil)
				o.Cluster.Members[1].IsLearner = true
				return o
			}()},
			available: "True/QuorumAvailable", progressing: "False/Reconciled", degraded: "True/MembersUnhealthy", ready: "False/Degraded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conds := Conditions(tt.o)
			for typ, want := range map[string]string{
				v1alpha1.ConditionAvailable: tt.available, v1alpha1.ConditionProgressing: tt.progressing,
				v1alpha1.ConditionDegraded: tt.degraded, v1alpha1.ConditionReady: tt.ready,
			} {
				c := meta.FindStatusCondition(conds, typ)
				if got := string(c.Status) + "/" + c.Reason; got != want {
					t.Errorf("%s = %s (%s), want %s", typ, got, c.Message, want)
				}
			}
		})
	}
}

func TestDegradedMessageNamesWhatToFix(t *testing.T) {
	o := observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 2, 3), Etcd: testutil.EtcdObserved(3, 1, []uint64{3}, []uint64{2})}
	c := meta.FindStatusCondition(Conditions(o), v1alpha1.ConditionDegraded)
	for _, want := range []string{"m2: NOSPACE", "m3: connection refused"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Degraded message %q does not name %q", c.Message, want)
		}
	}
}

func TestUnchangedObservationKeepsStatus(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", Generation: 1}}
	o := observe.Observation{Generation: 1, SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)}
	topo := render.TopologyOf(c, nil)
	Set(c, o, topo)
	first := c.Status.DeepCopy()
	Set(c, o, topo)
	if !equality.Semantic.DeepEqual(*first, c.Status) {
		t.Fatalf("the same observation changed the status:\n%+v\n%+v", *first, c.Status)
	}
	if c.Status.Leader != "m1" || c.Status.ClusterID != "7" || len(c.Status.Members) != 3 || c.Status.CurrentVersion != "3.6.16" {
		t.Fatalf("status %+v", c.Status)
	}
}

func TestConditionTransitionsAreEventsOnlyOnChange(t *testing.T) {
	before := Conditions(observe.Observation{SpecReplicas: 3, StatefulSet: testutil.StatefulSet(3, 3, 3), Etcd: testutil.EtcdObserved(3, 1, nil, nil)})
	if got := Transitions(before, before); len(got) != 0 {
		t.Fatalf("unchanged conditions gave events: %+v", got)
	}
	after := Conditions(observe.Observation{SpecReplicas: 3, WasAvailable: true, StatefulSet: testutil.StatefulSet(3, 1, 3), Etcd: testutil.EtcdObserved(3, 0, []uint64{2, 3}, nil)})
	kinds := map[string]string{}
	for _, tr := range Transitions(before, after) {
		kinds[tr.Cond.Type] = tr.EventType
	}
	if kinds[v1alpha1.ConditionAvailable] != "Warning" || kinds[v1alpha1.ConditionDegraded] != "Warning" {
		t.Fatalf("losing quorum must give warnings: %v", kinds)
	}
}

func TestElectionInProgressIsNotAnUnhealthyMember(t *testing.T) {
	o := testutil.EtcdObserved(3, 1, nil, nil)
	st := o.Status[1]
	st.Errors, st.Leader = []string{plan.NoLeaderError}, 0
	o.Status[1] = st
	members, _, _, _ := MemberStatuses(*o)
	for _, m := range members {
		if !m.Healthy {
			t.Fatalf("member %s in an election is reported unhealthy", m.Name)
		}
	}
	alarm := testutil.EtcdObserved(3, 1, nil, []uint64{2})
	members, _, _, _ = MemberStatuses(*alarm)
	if members[1].Healthy {
		t.Fatalf("a member with an alarm is reported healthy")
	}
}

// TestAuthLockoutMessageSaysWhatAndHow: AuthLockedOut names what etcd answered and both ways
// out (the operator's certificate back, or root turning authentication off).
func TestAuthLockoutMessageSaysWhatAndHow(t *testing.T) {
	o := observe.Observation{Cluster: "demo", AuthRefused: errUserEmpty}
	if !LockedOut(o) {
		t.Fatal("an answer refusing the operator as a user is a lock-out")
	}
	msg := AuthLockoutMessage(o)
	for _, want := range []string{"no identity", "user name is empty", "spec.tls.client back", "spec.auth.enabled: false", "etcdctl --user root auth disable", "demo-root-auth"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if LockedOut(observe.Observation{Auth: &etcd.AuthState{Enabled: false}}) || LockedOut(observe.Observation{Auth: &etcd.AuthState{Enabled: true}, OperatorUser: "etcd-pilot"}) {
		t.Fatal("auth off, or on with the operator's certificate, is no lock-out")
	}
	if !etcd.AuthRefused(errUserEmpty) || !etcd.AuthRefused(fmt.Errorf("x: %w", rpctypes.ErrInvalidAuthToken)) || etcd.AuthRefused(errors.New("context deadline exceeded")) {
		t.Fatal("authRefused does not tell etcd's auth errors from others")
	}
}

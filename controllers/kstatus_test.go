package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// waitKstatus waits until kstatus (the library behind kpt, Flux's health checks and
// cli-utils' apply waiters), reading the EtcdCluster in ns from the API server, computes want.
func waitKstatus(t testing.TB, ns string, want status.Status) *status.Result {
	t.Helper()
	var res *status.Result
	eventually(t, timeout, "kstatus "+string(want), func() error {
		u := &unstr.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("EtcdCluster"))
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd"}, u); err != nil {
			return err
		}
		var err error
		if res, err = status.Compute(u); err != nil {
			return err
		}
		if res.Status != want {
			return fmt.Errorf("kstatus %s: %s", res.Status, res.Message)
		}
		return nil
	})
	return res
}

// waitEvent waits for an event (events.k8s.io/v1) about the EtcdCluster in ns that match
// accepts, and returns it.
func waitEvent(t testing.TB, ns, what string, match func(eventsv1.Event) bool) eventsv1.Event {
	t.Helper()
	uid := getCluster(t, ns).UID
	var found eventsv1.Event
	eventually(t, timeout, what, func() error {
		evs := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.UID != uid {
				continue
			}
			if match(e) {
				found = e
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s %s/%s: %s", e.Type, e.Reason, e.Action, e.Note))
		}
		return fmt.Errorf("not among the cluster's events:\n%s", strings.Join(seen, "\n"))
	})
	return found
}

// TestSpecTheChartRefusesStallsUntilFixed: chart values that pass admission but that the
// chart's schema refuses make the cluster Stalled, with observedGeneration at the refused
// generation, so kstatus reads Failed (not a generation waiting to be observed) and a Warning
// event says why; fixing the spec clears Stalled and the cluster is Current again.
func TestSpecTheChartRefusesStallsUntilFixed(t *testing.T) {
	ns := env.Namespace(t)
	healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	c := waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if condition(c, v1alpha1.ConditionReconciling) != "False/"+v1alpha1.ReasonReconciled || condition(c, v1alpha1.ConditionStalled) != "False/"+v1alpha1.ReasonNotStalled {
		t.Fatalf("a Ready cluster: Reconciling %s, Stalled %s", condition(c, v1alpha1.ConditionReconciling), condition(c, v1alpha1.ConditionStalled))
	}
	waitKstatus(t, ns, status.CurrentStatus)

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"terminationGracePeriodSeconds":0}`)}
	})
	c = waitCondition(t, ns, v1alpha1.ConditionStalled, "True/"+v1alpha1.ReasonInvalidSpec)
	stalled := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionStalled)
	if !strings.Contains(stalled.Message, "terminationGracePeriodSeconds") {
		t.Fatalf("Stalled does not say what to fix: %q", stalled.Message)
	}
	if c.Status.ObservedGeneration != c.Generation || stalled.ObservedGeneration != c.Generation {
		t.Fatalf("observedGeneration %d (Stalled's %d), generation %d", c.Status.ObservedGeneration, stalled.ObservedGeneration, c.Generation)
	}
	if got := condition(c, v1alpha1.ConditionReconciling); got != "False/"+v1alpha1.ReasonInvalidSpec {
		t.Fatalf("Reconciling %s while Stalled", got)
	}
	if got := condition(c, v1alpha1.ConditionReady); got != "False/"+v1alpha1.ReasonDegraded {
		t.Fatalf("Ready %s while Stalled", got)
	}
	res := waitKstatus(t, ns, status.FailedStatus)
	if !strings.Contains(res.Message, "terminationGracePeriodSeconds") {
		t.Fatalf("kstatus message %q", res.Message)
	}
	waitEvent(t, ns, "a Warning event for Stalled", func(e eventsv1.Event) bool {
		return e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonInvalidSpec && strings.HasPrefix(e.Note, "Stalled is True: ")
	})

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Chart.Values = nil })
	c = waitCondition(t, ns, v1alpha1.ConditionStalled, "False/"+v1alpha1.ReasonNotStalled)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	waitKstatus(t, ns, status.CurrentStatus)
	waitEvent(t, ns, "an event for Stalled cleared", func(e eventsv1.Event) bool {
		return e.Type == corev1.EventTypeNormal && e.Reason == v1alpha1.ReasonNotStalled && strings.HasPrefix(e.Note, "Stalled is False: ")
	})
}

// TestScaleOutStepsAreEvents: `kubectl describe` tells a scale-out's story. Each step the
// executor carries out is an event about the EtcdCluster with the change's reason and the
// step as its action: the learner added, then promoted once its process started and caught up
// (the test plays etcd-3's process in the fake etcd).
func TestScaleOutStepsAreEvents(t *testing.T) {
	ns := env.Namespace(t)
	f := healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)

	four := int32(4)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Replicas = &four })
	var learner etcd.Member
	eventually(t, timeout, "a learner added for etcd-3", func() error {
		list, err := f.MemberList(context.Background())
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if m.IsLearner {
				learner = m
				return nil
			}
		}
		return fmt.Errorf("no learner among %d members", len(list.Members))
	})
	waitCondition(t, ns, v1alpha1.ConditionReconciling, "True/"+v1alpha1.ReasonScaleOut)
	markReady(t, ns) // the StatefulSet at 4 replicas runs pod etcd-3 on its claim
	url := fmt.Sprintf("http://etcd-3.etcd.%s.svc:2379", ns)
	f.Edit(func(s *etcd.Cluster, st map[string]etcd.MemberStatus) {
		for i := range s.Members {
			if s.Members[i].ID == learner.ID {
				s.Members[i].Name, s.Members[i].ClientURLs = "etcd-3", []string{url}
			}
		}
		st[url] = etcd.MemberStatus{ID: learner.ID, Version: "3.6.16", DBSize: 20480, Leader: 0xa0, RaftIndex: 42, IsLearner: true}
	})
	eventually(t, timeout, "etcd-3 promoted", func() error {
		list, err := f.MemberList(context.Background())
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if m.ID == learner.ID && !m.IsLearner {
				return nil
			}
		}
		return fmt.Errorf("members %+v", list.Members)
	})
	f.Edit(func(_ *etcd.Cluster, st map[string]etcd.MemberStatus) {
		s := st[url]
		s.IsLearner = false
		st[url] = s
	})

	for _, step := range []string{"AddLearner", "ScaleStatefulSet", "PromoteLearner"} {
		e := waitEvent(t, ns, "a ScaleOut "+step+" event", func(e eventsv1.Event) bool {
			return e.Action == step && e.Reason == v1alpha1.ReasonScaleOut
		})
		if e.Type != corev1.EventTypeNormal || !strings.Contains(e.Note, "etcd-3") || e.Related == nil || e.Related.Kind != "Pod" || e.Related.Name != "etcd-3" {
			t.Fatalf("%s event: %s %s/%s about %+v: %s", step, e.Type, e.Reason, e.Action, e.Related, e.Note)
		}
	}
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	waitKstatus(t, ns, status.CurrentStatus)
}

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// listenArg is the StatefulSet's --listen-client-urls.
func listenArg(sts *appsv1.StatefulSet) string {
	for _, a := range sts.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
			return v
		}
	}
	return ""
}

// runPods replaces the member pods with pods started from the StatefulSet's current template
// (envtest runs no StatefulSet controller), ready.
func runPods(t *testing.T, ns string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", sts); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("etcd-%d", i)
		old := &corev1.Pod{}
		if err := getObject(ns, name, old); err == nil {
			if err := env.Client.Delete(context.Background(), old, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			eventually(t, timeout, "pod "+name+" gone", func() error {
				if getObject(ns, name, &corev1.Pod{}) == nil {
					return fmt.Errorf("still there")
				}
				return nil
			})
		}
		runReadyPod(t, ns, name, sts, sts.Spec.Template.Spec.Containers[0].Args)
	}
	// The StatefulSet controller observed the template the pods run.
	markStatefulSetCurrent(t, ns)
}

// readyPlainCluster creates a plain 3-member cluster whose pods run and are ready, with a
// healthy fake etcd, and waits until it is Ready.
func readyPlainCluster(t *testing.T, ns string) *etcd.Fake {
	t.Helper()
	f := healthyEtcd(ns, 3)
	newCluster(t, ns, nil)
	waitStatefulSet(t, ns)
	markReady(t, ns)
	runPods(t, ns)
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	return f
}

// updateTLS sets spec.tls.
func updateTLS(t *testing.T, ns string, spec *v1alpha1.TLSSpec) {
	t.Helper()
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.TLS = spec })
}

// publish makes the fake etcd's members publish client URLs of the schemes given and answer
// on each. It edits under the fake's lock: the operator reads the fake meanwhile. What etcd
// publishes is no Kubernetes event: it pokes the cluster so that a pass reads it (else the
// pass that ran just before the edit could stand until the next periodic one).
func publish(t *testing.T, f *etcd.Fake, ns string, schemes ...string) {
	t.Helper()
	f.Edit(func(state *etcd.Cluster, statuses map[string]etcd.MemberStatus) {
		for i := range state.Members {
			m := &state.Members[i]
			st := statuses[m.ClientURLs[0]]
			var urls []string
			for _, s := range schemes {
				u := fmt.Sprintf("%s://etcd-%d.etcd.%s.svc:2379", s, i, ns)
				urls = append(urls, u)
				statuses[u] = st
			}
			m.ClientURLs = urls
		}
	})
	poke(t, ns)
}

// TestClientTLSSwitchedOnThroughBoth: a plain cluster given tls.client (no acceptPlain) is
// rendered serving both schemes first, and the operator keeps dialing plain HTTP while the
// pods listen on plain only; once every pod listens on both and etcd's member list shows
// both, the template moves to TLS only and the operator dials TLS.
func TestClientTLSSwitchedOnThroughBoth(t *testing.T) {
	ns := env.Namespace(t)
	f := readyPlainCluster(t, ns)
	updateTLS(t, ns, &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{}})
	eventually(t, timeout, "the template to serve both, the operator dialing plain", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := listenArg(sts); got != "https://$(POD_IP):2379,http://$(POD_IP):2379" {
			return fmt.Errorf("listens on %s", got)
		}
		tr := getCluster(t, ns).Status.TLSTransition
		if tr == nil || tr.Client == nil || tr.Client.Phase != v1alpha1.ClientTLSBoth || tr.Client.Target != v1alpha1.ClientTLSOnly || tr.Client.Dial != "http" {
			return fmt.Errorf("status.tlsTransition %+v", tr)
		}
		return nil
	})
	if c := waitCondition(t, ns, v1alpha1.ConditionProgressing, "True/"+v1alpha1.ReasonSwitchingClientTLS); condition(c, v1alpha1.ConditionAvailable) != "True/"+v1alpha1.ReasonQuorumAvailable {
		t.Fatalf("the operator lost the members while they listen on plain only: %s", condition(c, v1alpha1.ConditionAvailable))
	}

	// The members restarted onto both (as the rollout would) and published both in etcd.
	runPods(t, ns)
	publish(t, f, ns, "https", "http")
	eventually(t, timeout, "the template to serve TLS only, the operator dialing TLS", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := listenArg(sts); got != "https://$(POD_IP):2379" {
			return fmt.Errorf("listens on %s", got)
		}
		tr := getCluster(t, ns).Status.TLSTransition
		if tr == nil || tr.Client == nil || tr.Client.Phase != v1alpha1.ClientTLSOnly || tr.Client.Dial != "https" {
			return fmt.Errorf("status.tlsTransition %+v", tr)
		}
		return nil
	})
	runPods(t, ns)
	publish(t, f, ns, "https")
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if tr := getCluster(t, ns).Status.TLSTransition; tr != nil {
		t.Fatalf("status.tlsTransition %+v after the switch", tr)
	}
}

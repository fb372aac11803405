package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// stsArg is the StatefulSet's etcd argument --name=, "" when it has none.
func stsArg(sts *appsv1.StatefulSet, name string) string {
	for _, a := range sts.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestPeerTLSSwitchMovesNoURLAMemberDoesNotAnswerAt: a live plain cluster given tls.peer is
// rendered with a TLS transition listener beside the plain peer port, advertising it, while
// the operator keeps its quorum; once every pod runs that template, the planner proposes to
// move the first member's peer URL, and the safety gate refuses it because nothing answers at
// the new URL (envtest runs no etcd): etcd's member list is never updated.
func TestPeerTLSSwitchMovesNoURLAMemberDoesNotAnswerAt(t *testing.T) {
	ns := env.Namespace(t)
	f := readyPlainCluster(t, ns)
	updateTLS(t, ns, &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}})
	eventually(t, timeout, "the template to add a TLS transition listener and advertise it", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := stsArg(sts, "listen-peer-urls"); got != "http://$(POD_IP):2380,https://$(POD_IP):2382" {
			return fmt.Errorf("listens on %s", got)
		}
		if got := stsArg(sts, "initial-advertise-peer-urls"); !strings.HasPrefix(got, "https://") || !strings.HasSuffix(got, ":2382") {
			return fmt.Errorf("advertises %s", got)
		}
		if stsArg(sts, "peer-cert-file") == "" {
			return fmt.Errorf("the peer certificate is not configured")
		}
		tr := getCluster(t, ns).Status.TLSTransition
		if tr == nil || tr.Peer == nil || tr.Peer.PeerPort != "http" || tr.Peer.TransitionPort != "https" || tr.Peer.Target != "https" || tr.Peer.Members != 3 {
			return fmt.Errorf("status.tlsTransition %+v", tr)
		}
		return nil
	})
	if c := waitCondition(t, ns, v1alpha1.ConditionProgressing, "True/"+v1alpha1.ReasonSwitchingPeerTLS); condition(c, v1alpha1.ConditionAvailable) != "True/"+v1alpha1.ReasonQuorumAvailable {
		t.Fatalf("the operator lost the members: %s", condition(c, v1alpha1.ConditionAvailable))
	}

	// A member that joins now (a scale-out) is added at the plain URL: the pods still on the
	// old template have no peer certificate to reach a TLS one.
	four := int32(4)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Replicas = &four })
	eventually(t, timeout, "a learner added for the scale-out", func() error {
		list, err := f.MemberList(context.Background())
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if m.IsLearner {
				if len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "http://etcd-3.") || !strings.HasSuffix(m.PeerURLs[0], ":2380") {
					return fmt.Errorf("learner added at %v, want the plain peer URL of etcd-3", m.PeerURLs)
				}
				return nil
			}
		}
		return fmt.Errorf("no learner yet")
	})
	// Back to three, so the rest of the test has the three pods runPods makes.
	three := int32(3)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Replicas = &three })
	eventually(t, timeout, "the learner removed again", func() error {
		list, err := f.MemberList(context.Background())
		if err != nil {
			return err
		}
		if len(list.Members) != 3 {
			return fmt.Errorf("%d members", len(list.Members))
		}
		return nil
	})

	runPods(t, ns)
	eventually(t, timeout, "the gate to refuse the first URL move", func() error {
		for _, cond := range getCluster(t, ns).Status.Conditions {
			if strings.Contains(cond.Message, "PeerURLMovesToAnAnsweringListener") && strings.Contains(cond.Message, "https://etcd-0.") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", getCluster(t, ns).Status.Conditions)
	})
	if n := f.CallCount("UpdatePeerURLs"); n != 0 {
		t.Fatalf("etcd's peer URLs were updated %d times without an answer at the new URL", n)
	}
}

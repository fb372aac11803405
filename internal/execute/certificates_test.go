package execute

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
)

// steps is etcdpilot_steps_total of cluster ns/name for kind and result.
func steps(t *testing.T, ns, name, kind, result string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "etcdpilot_steps_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns && l["name"] == name && l["kind"] == kind && l["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestAFailedCertificateStepCounts: a certificate step that fails ends on Done like every
// step, so steps_total counts it as failed (it counted only successes).
func TestAFailedCertificateStepCounts(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "certs"}}
	x := &Executor{Recorder: events.NewFakeRecorder(10)}
	var after []string
	x.AfterStep = func(k string) { after = append(after, k) }
	s := certificates.Step{Kind: certificates.IssueLeaf, Secret: "certs-server-tls"}
	// The CA Secret is missing from what was observed: the step fails before any write.
	if err := x.Issue(context.Background(), c, certificates.Want{CASecret: "certs-ca"}, s, map[string]certificates.Material{}, time.Now()); err == nil {
		t.Fatal("issuing a leaf without its CA succeeded")
	}
	if got := steps(t, "ns", "certs", string(certificates.IssueLeaf), "failed"); got != 1 {
		t.Fatalf("steps_total{result=failed} = %v, want 1", got)
	}
	if len(after) != 0 {
		t.Fatalf("AfterStep ran after a failed step: %v", after)
	}
}

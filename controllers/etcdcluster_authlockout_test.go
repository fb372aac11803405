package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestAuthLockOutIsDegradedWithTheFix: etcd's authentication on while the operator has no
// identity in etcd (it dials plain HTTP, without a client certificate) is not an outage:
// etcd refuses it the members' status ("user name is empty") but serves the member list
// through its leader, so Available stays True and Degraded says AuthLockedOut with the fix,
// not EtcdUnreachable; status.authEnabled says auth is on. Once auth is off it is Ready.
func TestAuthLockOutIsDegradedWithTheFix(t *testing.T) {
	ns := env.Namespace(t)
	f := readyPlainCluster(t, ns)
	// Someone turned authentication on in etcd itself (or spec.auth and tls.client were
	// removed in the order issue 25 describes): the operator presents no certificate.
	if err := f.SetAuth(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	poke(t, ns) // etcd's authentication changing is no Kubernetes event
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonAuthLockedOut)
	if got := condition(c, v1alpha1.ConditionAvailable); got != "True/"+v1alpha1.ReasonQuorumAvailable {
		t.Errorf("Available is %s while etcd serves its member list through a leader", got)
	}
	if got := condition(c, v1alpha1.ConditionStalled); got != "True/"+v1alpha1.ReasonAuthLockedOut {
		t.Errorf("Stalled is %s: the operator cannot get past a lock-out without the user", got)
	}
	msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message
	for _, want := range []string{"user name is empty", "spec.tls.client back", "etcdctl --user root auth disable", "etcd-root-auth"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Degraded %q does not say %q", msg, want)
		}
	}
	if c.Status.AuthEnabled == nil || !*c.Status.AuthEnabled {
		t.Errorf("status.authEnabled is %v with etcd's authentication on", c.Status.AuthEnabled)
	}

	// Root turned authentication off (the fix the message gives).
	if err := f.SetAuth(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	poke(t, ns)
	c = waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if c.Status.AuthEnabled == nil || *c.Status.AuthEnabled {
		t.Errorf("status.authEnabled is %v with etcd's authentication off", c.Status.AuthEnabled)
	}
}

// TestClientTLSOffWaitsForAuthOff: tls.client removed (admission let it: status said auth
// off) and then authentication turned on in etcd before the client port left TLS. The
// switch to plain holds (the template keeps serving both, the operator dials TLS with its
// certificate) and Degraded says AuthStillEnabled with the fix; spec.auth.enabled: false
// makes the operator turn authentication off with its certificate, and only then the port
// serves plain HTTP only: DisableAuth before the operator's identity goes.
func TestClientTLSOffWaitsForAuthOff(t *testing.T) {
	ns := env.Namespace(t)
	f := readyPlainCluster(t, ns)
	// acceptPlain: the members serve both; they have published TLS client URLs only so far.
	updateTLS(t, ns, &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{AcceptPlain: true}})
	eventually(t, timeout, "the template to serve both", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := listenArg(sts); got != "https://$(POD_IP):2379,http://$(POD_IP):2379" {
			return fmt.Errorf("listens on %s", got)
		}
		return nil
	})
	runPods(t, ns)
	publish(t, f, ns, "https")
	waitCondition(t, ns, v1alpha1.ConditionReady, "True/"+v1alpha1.ReasonReady)
	if a := getCluster(t, ns).Status.AuthEnabled; a == nil || *a {
		t.Fatalf("status.authEnabled is %v before auth is on", a)
	}

	updateTLS(t, ns, nil)
	if err := f.SetAuth(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	// Every member serves and publishes both: the switch would now leave TLS.
	publish(t, f, ns, "https", "http")
	c := waitCondition(t, ns, v1alpha1.ConditionDegraded, "True/"+v1alpha1.ReasonAuthStillEnabled)
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded).Message; !strings.Contains(msg, "spec.auth.enabled: false") {
		t.Errorf("Degraded %q does not say how to go on", msg)
	}
	sts := &appsv1.StatefulSet{}
	if err := getObject(ns, "etcd", sts); err != nil {
		t.Fatal(err)
	}
	if got := listenArg(sts); got != "https://$(POD_IP):2379,http://$(POD_IP):2379" {
		t.Fatalf("the template stopped serving TLS under auth: %s", got)
	}
	if tr := c.Status.TLSTransition; tr == nil || tr.Client == nil || tr.Client.Dial != "https" {
		t.Fatalf("status.tlsTransition %+v: the operator must keep dialing TLS", tr)
	}
	if got := condition(c, v1alpha1.ConditionAvailable); got != "True/"+v1alpha1.ReasonQuorumAvailable {
		t.Errorf("Available is %s while the operator keeps its certificate", got)
	}

	// The fix: auth off through the spec. The operator still presents its certificate.
	runPods(t, ns)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Auth = &v1alpha1.AuthSpec{Enabled: false} })
	eventually(t, timeout, "the template to serve plain HTTP once auth is off", func() error {
		sts := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if got := listenArg(sts); got != "http://$(POD_IP):2379" {
			return fmt.Errorf("listens on %s", got)
		}
		return nil
	})
	if st, _ := f.Auth(context.Background(), nil); st.Enabled || f.CallCount("SetAuth") < 2 {
		t.Fatalf("the operator left TLS without turning authentication off (enabled %v, SetAuth calls %d)", st.Enabled, f.CallCount("SetAuth"))
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// servesClient waits until the cluster's client port serves exactly the schemes want (http,
// https or both), read from outside the operator: every member pod is ready and its etcd
// listens on those schemes (its arguments), etcd's member list shows every member publishing
// client URLs of exactly those schemes, and the operator reports no switch under way.
func servesClient(t *testing.T, ns string, want ...string) {
	t.Helper()
	eventually(t, 5*time.Minute, fmt.Sprintf("every member to serve %v on its client port", want), func() error {
		pods, err := readyMemberPods(ns, 3)
		if err != nil {
			return err
		}
		for _, p := range pods {
			var listen string
			for _, a := range p.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
					listen = v
				}
			}
			if got := schemesOf(strings.Split(listen, ",")); got != strings.Join(want, "+") {
				return fmt.Errorf("pod %s listens on %s", p.Name, listen)
			}
		}
		members, err := memberList(t, ns)
		if err != nil {
			return err
		}
		for _, m := range members {
			if got := schemesOf(m.ClientURLs); got != strings.Join(want, "+") {
				return fmt.Errorf("member %s publishes %v", m.Name, m.ClientURLs)
			}
		}
		if c := getCluster(t, ns); c.Status.TLSTransition != nil {
			return fmt.Errorf("the operator reports a switch: %+v", c.Status.TLSTransition.Client)
		}
		return nil
	})
}

// readyMemberPods lists the cluster's member pods and fails unless there are n, all ready and
// none being deleted.
func readyMemberPods(ns string, n int) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		return nil, err
	}
	if len(pods.Items) != n {
		return nil, fmt.Errorf("%d member pods", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || !podReady(&p) {
			return nil, fmt.Errorf("pod %s is not ready", p.Name)
		}
	}
	return pods.Items, nil
}

// memberList is etcd's member list, read through the cluster's first three members.
func memberList(t testing.TB, ns string) ([]*etcdserverpb.Member, error) {
	cli := etcdClient(t, ns, 3)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	return ml.Members, nil
}

// schemesOf is "http", "https" or "http+https" for a list of URLs.
func schemesOf(urls []string) string {
	var h, s bool
	for _, u := range urls {
		h = h || strings.HasPrefix(u, "http://")
		s = s || strings.HasPrefix(u, "https://")
	}
	switch {
	case h && s:
		return "http+https"
	case s:
		return "https"
	case h:
		return "http"
	}
	return ""
}

// setClientTLS changes spec.tls.client and returns when the change was stored.
func setClientTLS(t *testing.T, ns string, cl *v1alpha1.ClientTLS) {
	t.Helper()
	var spec *v1alpha1.TLSSpec
	if cl != nil {
		spec = &v1alpha1.TLSSpec{Client: cl}
	}
	setTLS(t, ns, spec)
}

// setTLS sets spec.tls and returns when the change was stored.
func setTLS(t testing.TB, ns string, spec *v1alpha1.TLSSpec) {
	t.Helper()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.TLS = spec
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
}

// TestClientTLSSwitchUnderWrites turns client TLS on and off on a live 3-member cluster, the
// way the README tells a user to: acceptPlain (the members serve both), clients move to TLS,
// TLS only; and back: acceptPlain, clients move to plain, tls.client removed. A writer keeps
// writing through each phase with the clients of that phase, and a sampler checks quorum from
// etcd throughout. No acknowledged write may be lost, quorum never lacks, plain is refused
// once TLS is the only scheme (and TLS once plain is).
func TestClientTLSSwitchUnderWrites(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
	s := startSampler(t, ns)
	plainW := startWriter(t, ns, 3)
	plainW.waitAcked(t, 50)
	type round struct {
		name string
		took time.Duration
		w    *writer
	}
	var rounds []round
	timed := func(name string, w *writer, f func()) {
		start := time.Now()
		f()
		rounds = append(rounds, round{name, time.Since(start), w})
		w.waitAcked(t, 20)
	}

	// 1. Serve both: plain clients keep working.
	timed("plain -> both (acceptPlain)", plainW, func() {
		setClientTLS(t, ns, &v1alpha1.ClientTLS{AcceptPlain: true})
		servesClient(t, ns, "http", "https")
	})
	// 2. Clients move to TLS with certificates of the cluster's CA.
	caSec := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	u := issueUserCert(t, certs.KeyPair{Cert: caSec.Data["tls.crt"], Key: caSec.Data["tls.key"]}, caSec.Data["ca.crt"], "e2e-user")
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })
	tlsW := startWriter(t, ns, 3)
	tlsW.waitAcked(t, 50)
	plainW.finish(t, ns, 3)
	plainGaps := plainW.longestGap()
	plainTerms := plainW.termChanges()
	// 3. TLS only.
	timed("both -> TLS", tlsW, func() {
		setClientTLS(t, ns, &v1alpha1.ClientTLS{})
		servesClient(t, ns, "https")
	})
	if out, err := etcdctl(t, "--endpoints", strings.Replace(endpoint(ns, 0), "https://", "http://", 1), "put", "plain", "x"); err == nil {
		t.Fatalf("plain HTTP was served with TLS only: %s", out)
	}
	if out, err := etcdctl(t, "--endpoints", endpoint(ns, 1), "--cacert", u.ca, "--cert", u.c, "--key", u.k, "put", "with-cert", "ok"); err != nil {
		t.Fatalf("etcdctl with a client certificate: %v: %s", err, out)
	}
	// 4. And back: both again, clients move to plain.
	timed("TLS -> both (acceptPlain)", tlsW, func() {
		setClientTLS(t, ns, &v1alpha1.ClientTLS{AcceptPlain: true})
		servesClient(t, ns, "http", "https")
	})
	clientTLS.Delete(ns)
	backW := startWriter(t, ns, 3)
	backW.waitAcked(t, 50)
	tlsW.finish(t, ns, 3)
	// 5. Plain only.
	timed("both -> plain (tls.client removed)", backW, func() {
		setClientTLS(t, ns, nil)
		servesClient(t, ns, "http")
	})
	if out, err := etcdctl(t, "--endpoints", strings.Replace(endpoint(ns, 0), "http://", "https://", 1), "--cacert", u.ca, "--cert", u.c, "--key", u.k, "put", "tls", "x"); err == nil {
		t.Fatalf("TLS was served after client TLS was turned off: %s", out)
	}
	res := s.finish(t)
	backW.finish(t, ns, 3)

	for _, r := range rounds {
		t.Logf("%s: %s", r.name, r.took.Round(100*time.Millisecond))
	}
	t.Logf("plain writer (phases 1-2): longest write gap %s, %d raft term changes", plainGaps.Round(time.Millisecond), plainTerms)
	t.Logf("TLS writer (phases 2-4): longest write gap %s, %d raft term changes", tlsW.longestGap().Round(time.Millisecond), tlsW.termChanges())
	t.Logf("plain writer (phases 4-5): longest write gap %s, %d raft term changes", backW.longestGap().Round(time.Millisecond), backW.termChanges())
	t.Logf("sampler: fewest healthy voters %d of %d, %d single-sample dips", res.FewestHealthyVoters, res.VotersThen, res.Dips)
	// Each restart round moves leadership once (the leader restarts last, after a hand-over).
	for _, w := range []struct {
		name   string
		n, max int
	}{{"plain writer", plainTerms, 1}, {"TLS writer", tlsW.termChanges(), 2}, {"second plain writer", backW.termChanges(), 1}} {
		if w.n > w.max {
			t.Errorf("%s saw %d leader changes, want at most %d (one per restart round it wrote through)", w.name, w.n, w.max)
		}
	}
}

// TestClientTLSSwitchOperatorKilledBetweenSteps switches the client port to both schemes and
// back to plain with the operator killed right after every pod it restarts (and then after
// every leadership hand-over): the phase is derived again from the pods and etcd after each
// restart of the operator, so the switch completes, with quorum held and no acknowledged
// write of a plain client lost.
func TestClientTLSSwitchOperatorKilledBetweenSteps(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
	t.Cleanup(func() { restartOperator(t, "") })
	s := startSampler(t, ns)
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)
	for _, r := range []struct {
		fault string
		cl    *v1alpha1.ClientTLS
		want  []string
	}{
		{"DeletePod", &v1alpha1.ClientTLS{AcceptPlain: true}, []string{"http", "https"}},
		{"MoveLeader", nil, []string{"http"}},
	} {
		restartOperator(t, r.fault)
		start := time.Now()
		setClientTLS(t, ns, r.cl)
		servesClient(t, ns, r.want...)
		crashes := operatorCrashes(t)
		if crashes == 0 {
			t.Fatalf("the switch to %v never reached the fault point after %s", r.want, r.fault)
		}
		t.Logf("switched to %v in %s with the operator killed %d times after %s", r.want, time.Since(start).Round(100*time.Millisecond), crashes, r.fault)
		w.waitAcked(t, 20)
	}
	res := s.finish(t)
	w.finish(t, ns, 3)
	t.Logf("longest write gap %s, %d raft term changes, fewest healthy voters %d of %d", w.longestGap().Round(time.Millisecond), w.termChanges(), res.FewestHealthyVoters, res.VotersThen)
}

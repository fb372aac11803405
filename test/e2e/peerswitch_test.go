package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// servesPeer waits until the peer side of every member is scheme (http or https) and nothing
// else, read from outside the operator: every member pod is ready and its etcd listens on the
// peer port only with that scheme (its arguments), etcd's member list has every member's one
// peer URL on that scheme and the peer port, the operator reports no switch, and a member's
// peer port answers that scheme and refuses the other.
func servesPeer(t testing.TB, ns, scheme string) {
	t.Helper()
	eventually(t, 6*time.Minute, "every member to serve "+scheme+" on its peer port only", func() error {
		pods, err := readyMemberPods(ns, 3)
		if err != nil {
			return err
		}
		for _, p := range pods {
			for _, a := range p.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--listen-peer-urls="); ok && v != scheme+"://$(POD_IP):2380" {
					return fmt.Errorf("pod %s listens on %s", p.Name, v)
				}
			}
		}
		members, err := memberList(t, ns)
		if err != nil {
			return err
		}
		if len(members) != 3 {
			return fmt.Errorf("%d members", len(members))
		}
		for _, m := range members {
			want := fmt.Sprintf("%s://%s.etcd.%s.svc.cluster.local:2380", scheme, m.Name, ns)
			if len(m.PeerURLs) != 1 || m.PeerURLs[0] != want {
				return fmt.Errorf("member %s has peer URLs %v, want %s", m.Name, m.PeerURLs, want)
			}
		}
		if c := getCluster(t, ns); c.Status.TLSTransition != nil {
			return fmt.Errorf("the operator reports a switch: %+v", c.Status.TLSTransition.Peer)
		}
		return nil
	})
	peerHost := fmt.Sprintf("etcd-1.etcd.%s.svc:2380", ns)
	if scheme == "https" {
		if _, err := peerGet(t, ns, "http://"+peerHost, scheme == "https"); err == nil {
			t.Fatalf("the peer port answered plain HTTP with TLS on")
		}
		id, err := peerGet(t, ns, "https://"+peerHost, scheme == "https")
		if err != nil {
			t.Fatalf("the peer port did not answer TLS with the peer certificate: %v", err)
		}
		t.Logf("the peer port of etcd-1 answers TLS (cluster %s) and refuses plain HTTP", id)
		return
	}
	id, err := peerGet(t, ns, "http://"+peerHost, scheme == "https")
	if err != nil {
		t.Fatalf("the peer port did not answer plain HTTP with TLS off: %v", err)
	}
	if _, err := peerGet(t, ns, "https://"+peerHost, scheme == "https"); err == nil {
		t.Fatalf("the peer port answered TLS with TLS off")
	}
	t.Logf("the peer port of etcd-1 answers plain HTTP (cluster %s) and refuses TLS", id)
}

// peerGet asks etcd's peer handler at base for /members and returns the cluster ID it
// answers with. With tlsOn, an https base is asked with the cluster's peer certificate;
// without, with none (a plain listener refuses any handshake).
func peerGet(t testing.TB, ns, base string, tlsOn bool) (string, error) {
	// The test resolves pod names through the local cluster's name view, as etcdClient does.
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialName(ctx, addr) }}
	if strings.HasPrefix(base, "https://") && !tlsOn {
		// Any TLS handshake: a plain listener refuses it whatever is presented.
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // only to be refused
	} else if strings.HasPrefix(base, "https://") {
		s := getSecret(t, ns, v1alpha1.PeerTLSSecretName("etcd"))
		pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.Data["ca.crt"])
		tr.TLSClientConfig = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := hc.Get(base + "/members")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /members: %s", resp.Status)
	}
	return resp.Header.Get("X-Etcd-Cluster-ID"), nil
}

// setPeerTLS adds (on) or removes spec.tls.peer and returns when the change was stored.
func setPeerTLS(t testing.TB, ns string, on bool) {
	t.Helper()
	var spec *v1alpha1.TLSSpec
	if on {
		// The local cluster's processes connect from 127.0.0.1, which etcd's peer listener
		// checks against the peer certificate's names (see the README's TLS section).
		spec = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, ExtraSANs: localSANs}
	}
	setTLS(t, ns, spec)
}

// TestPeerTLSSwitchUnderWrites turns peer TLS on and off on a live 3-member cluster while a
// client writes and the sampler checks quorum from etcd: the members' peer URLs in etcd's
// member list move to TLS and back, each member's peer port serves the scheme of its URL, no
// acknowledged write is lost, quorum never lacks, and leadership changes at most once per
// restart round (three rounds each way).
func TestPeerTLSSwitchUnderWrites(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
	s := startSampler(t, ns)
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)

	start := time.Now()
	setPeerTLS(t, ns, true)
	servesPeer(t, ns, "https")
	on := time.Since(start)
	onTerms := w.termChanges()
	w.waitAcked(t, 20)

	start = time.Now()
	setPeerTLS(t, ns, false)
	servesPeer(t, ns, "http")
	off := time.Since(start)
	w.waitAcked(t, 20)
	res := s.finish(t)
	w.finish(t, ns, 3)

	t.Logf("plain -> TLS on the peer side: %s; TLS -> plain: %s", on.Round(100*time.Millisecond), off.Round(100*time.Millisecond))
	t.Logf("longest write gap %s, %d raft term changes (%d while turning TLS on), fewest healthy voters %d of %d, %d single-sample dips",
		w.longestGap().Round(time.Millisecond), w.termChanges(), onTerms, res.FewestHealthyVoters, res.VotersThen, res.Dips)
	if n := w.termChanges(); n > 6 {
		t.Errorf("%d leader changes over six restart rounds, want at most one per round", n)
	}
}

// TestPeerTLSSwitchOperatorKilledBetweenSteps turns peer TLS on with the operator killed right
// after every peer URL it moves, and off again with the operator killed after every
// leadership hand-over: the phase is derived again from the pods and etcd's member list after
// each restart of the operator, so both switches complete with quorum held and no
// acknowledged write lost.
func TestPeerTLSSwitchOperatorKilledBetweenSteps(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
	t.Cleanup(func() { restartOperator(t, "") })
	s := startSampler(t, ns)
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)
	for _, r := range []struct {
		fault  string
		on     bool
		scheme string
	}{
		{"UpdatePeerURL", true, "https"},
		{"MoveLeader", false, "http"},
	} {
		restartOperator(t, r.fault)
		start := time.Now()
		setPeerTLS(t, ns, r.on)
		servesPeer(t, ns, r.scheme)
		crashes := operatorCrashes(t)
		if crashes == 0 {
			t.Fatalf("the switch to %s never reached the fault point after %s", r.scheme, r.fault)
		}
		t.Logf("peer side switched to %s in %s with the operator killed %d times after %s", r.scheme, time.Since(start).Round(100*time.Millisecond), crashes, r.fault)
		w.waitAcked(t, 20)
	}
	res := s.finish(t)
	w.finish(t, ns, 3)
	t.Logf("longest write gap %s, %d raft term changes, fewest healthy voters %d of %d", w.longestGap().Round(time.Millisecond), w.termChanges(), res.FewestHealthyVoters, res.VotersThen)
}

// TestPeerTLSSwitchStopsBeforeACertificateEtcdWouldRefuse gives a live plain cluster a peer
// certificate (source Secret) whose names do not cover the addresses the members connect
// from: etcd would accept its handshakes but refuse the peers after them, so a member whose
// URL moved to TLS would be cut off once connections are made anew. The members restart onto
// the transition listener, and then no peer URL moves: the operator says why, naming the
// certificate and the member. Removing tls.peer again brings the members back to plain only,
// with every write kept.
func TestPeerTLSSwitchStopsBeforeACertificateEtcdWouldRefuse(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
	s := startSampler(t, ns)
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)

	ca, err := certs.NewCA("e2e peer CA", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := certs.Issue(ca, certs.Request{CommonName: "peer", DNSNames: []string{"*.elsewhere.example"}, Server: true, Client: true, Validity: 24 * time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "misnamed-peer"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": leaf.Cert, "tls.key": leaf.Key, "ca.crt": ca.Cert}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	setTLS(t, ns, &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceSecret, SecretName: sec.Name}})
	eventually(t, 4*time.Minute, "the operator to refuse the first peer URL move, naming the certificate", func() error {
		for _, cond := range getCluster(t, ns).Status.Conditions {
			if strings.Contains(cond.Message, "etcd would refuse the peer certificate of Secret misnamed-peer") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", getCluster(t, ns).Status.Conditions)
	})
	// Evidence from etcd: no peer URL moved.
	members, err := memberList(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "http://") || !strings.HasSuffix(m.PeerURLs[0], ":2380") {
			t.Fatalf("member %s's peer URLs moved to %v", m.Name, m.PeerURLs)
		}
	}
	w.waitAcked(t, 20)

	setPeerTLS(t, ns, false)
	servesPeer(t, ns, "http")
	res := s.finish(t)
	w.finish(t, ns, 3)
	t.Logf("longest write gap %s, %d raft term changes, fewest healthy voters %d of %d", w.longestGap().Round(time.Millisecond), w.termChanges(), res.FewestHealthyVoters, res.VotersThen)
}

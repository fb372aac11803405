package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// clientTLS holds, per namespace, the client certificate tests present to a cluster whose
// client port is TLS: etcdClient and endpoint use it.
var clientTLS sync.Map

func clientTLSOf(ns string) *tls.Config {
	if v, ok := clientTLS.Load(ns); ok {
		return v.(*tls.Config)
	}
	return nil
}

// localSANs are the extra SANs of the e2e TLS clusters. A member of the local cluster dials
// its peers from 127.0.0.1 (its processes share the machine's network; only the listeners
// are on the pod IP), and etcd checks a peer's certificate against the address it connects
// from. In a real cluster a peer connects from its pod IP, whose reverse DNS name the pod DNS
// wildcard covers.
var localSANs = []string{"127.0.0.1"}

// userCert is a client certificate for a user of the cluster, issued from the CA in the
// Secret caSecret (the operator's CA, or the test's own), written to files for etcdctl.
type userCert struct {
	dir      string
	tls      *tls.Config
	ca, c, k string
}

func issueUserCert(t testing.TB, ca certs.KeyPair, bundle []byte, cn string) userCert {
	t.Helper()
	pair, err := certs.Issue(ca, certs.Request{CommonName: cn, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	u := userCert{dir: d, ca: filepath.Join(d, "ca.crt"), c: filepath.Join(d, "tls.crt"), k: filepath.Join(d, "tls.key")}
	for f, b := range map[string][]byte{u.ca: bundle, u.c: pair.Cert, u.k: pair.Key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kp, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	u.tls = &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return u
}

func getSecret(t testing.TB, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkTLSFromEtcd reads, from etcd itself, that every member advertises https peer and client
// URLs, and that etcdctl is refused without a client certificate and served with one.
func checkTLSFromEtcd(t *testing.T, ns string, n int, u userCert) {
	t.Helper()
	cli := etcdClient(t, ns, n)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != n {
		t.Fatalf("%d members, want %d", len(ml.Members), n)
	}
	for _, m := range ml.Members {
		for _, u := range append(append([]string{}, m.PeerURLs...), m.ClientURLs...) {
			if !strings.HasPrefix(u, "https://") {
				t.Fatalf("member %s advertises %s: not TLS", m.Name, u)
			}
		}
	}
	ep := endpoint(ns, 0)
	if out, err := etcdctl(t, "--endpoints", ep, "--cacert", u.ca, "put", "anonymous", "x"); err == nil {
		t.Fatalf("etcdctl without a client certificate was served: %s", out)
	} else {
		t.Logf("without a client certificate: refused (%s)", lastLine(out))
	}
	plain := strings.Replace(ep, "https://", "http://", 1)
	if out, err := etcdctl(t, "--endpoints", plain, "put", "plain", "x"); err == nil {
		t.Fatalf("plain HTTP was served: %s", out)
	}
	if out, err := etcdctl(t, "--endpoints", ep, "--cacert", u.ca, "--cert", u.c, "--key", u.k, "put", "with-cert", "ok"); err != nil {
		t.Fatalf("etcdctl with a client certificate: %v: %s", err, out)
	}
	out, err := etcdctl(t, "--endpoints", endpoints(ns, n), "--cacert", u.ca, "--cert", u.c, "--key", u.k, "get", "with-cert", "--print-value-only")
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("read back with a client certificate: %v: %q", err, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// noSecretInEvents checks that no event of ns carries certificate or key material.
func noSecretInEvents(t *testing.T, ns string) {
	t.Helper()
	evs := &corev1.EventList{}
	if err := k8s.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "BEGIN ") {
			t.Fatalf("event %s carries PEM material: %s", e.Name, e.Message)
		}
	}
}

func TestTLSClusterWithOperatorIssuedCertificates(t *testing.T) {
	ns := namespace(t)
	start := time.Now()
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
		TLS:           &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs},
		NetworkPolicy: &v1alpha1.NetworkPolicySpec{Enabled: ptr.To(true)}})
	t.Logf("3 TLS members Available after %s", time.Since(start).Round(time.Millisecond))
	// The operator, under its own role, applied the NetworkPolicy (the local cluster has no
	// network plugin to enforce it: its rules are checked by the chart's and envtest's tests).
	policies := &networkingv1.NetworkPolicyList{}
	if err := k8s.List(context.Background(), policies, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(policies.Items) != 1 || len(policies.Items[0].OwnerReferences) != 1 || policies.Items[0].OwnerReferences[0].Kind != "EtcdCluster" {
		t.Fatalf("want one NetworkPolicy owned by the EtcdCluster, got %+v", policies.Items)
	}

	// A user mints a client certificate from the cluster's CA.
	caSec := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	u := issueUserCert(t, certs.KeyPair{Cert: caSec.Data["tls.crt"], Key: caSec.Data["tls.key"]}, caSec.Data["ca.crt"], "e2e-user")
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })

	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)
	checkTLSFromEtcd(t, ns, 3, u)

	// The certificates' expiry is in status, read from the Secrets.
	c := getCluster(t, ns)
	secrets := map[string]bool{}
	for _, s := range c.Status.Certificates {
		secrets[s.Secret] = true
		if !s.NotAfter.After(time.Now()) {
			t.Fatalf("certificate %s expired: %v", s.Secret, s.NotAfter)
		}
	}
	for _, name := range []string{"etcd-ca", "etcd-peer-ca", "etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"} {
		if !secrets[name] {
			t.Fatalf("status.certificates lacks %s: %+v", name, c.Status.Certificates)
		}
	}

	// A deleted leaf Secret is issued again from the same CA (the peer side's), and the
	// cluster keeps serving.
	peerCA := getSecret(t, ns, v1alpha1.PeerCASecretName("etcd"))
	peer := getSecret(t, ns, "etcd-peer-tls")
	if err := k8s.Delete(context.Background(), peer); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the peer certificate is issued again", func() error {
		s := &corev1.Secret{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd-peer-tls"}, s); err != nil {
			return err
		}
		if s.UID == peer.UID {
			return fmt.Errorf("still the old Secret")
		}
		return certs.Verify(certs.KeyPair{Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}, peerCA.Data["ca.crt"], true, true, time.Now())
	})
	w.waitAcked(t, 50)

	// The CA Secret deleted: a formed cluster's CA is never created anew (the members trust
	// the one they started with). The cluster says so and keeps serving; restoring the
	// Secret clears it.
	if err := k8s.Delete(context.Background(), caSec); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Degraded TLSNotReady naming the CA Secret", func() error {
		d := meta.FindStatusCondition(getCluster(t, ns).Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Reason != v1alpha1.ReasonTLSNotReady || !strings.Contains(d.Message, "etcd-ca") {
			return fmt.Errorf("Degraded is %+v", d)
		}
		return nil
	})
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd-ca"}, &corev1.Secret{}); err == nil {
		t.Fatal("a new CA was created for a formed cluster")
	}
	w.waitAcked(t, 50)
	restored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: caSec.Name, Labels: caSec.Labels, Annotations: caSec.Annotations},
		Type: caSec.Type, Data: caSec.Data}
	if err := k8s.Create(context.Background(), restored); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, v1alpha1.ConditionDegraded, metav1.ConditionFalse, time.Minute)

	w.waitAcked(t, 50)
	noSecretInEvents(t, ns)
	w.finish(t, ns, 3)
	t.Logf("longest write gap %s", w.longestGap().Round(time.Millisecond))
}

func TestTLSClusterWithUserSecrets(t *testing.T) {
	ns := namespace(t)
	now := time.Now()
	ca, err := certs.NewCA("user CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"*.etcd." + ns + ".svc", "*.etcd." + ns + ".svc.cluster.local", "etcd-client." + ns + ".svc"}
	issue := func(name string, r certs.Request) {
		p, err := certs.Issue(ca, r, now)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key, "ca.crt": ca.Cert}}
		if err := k8s.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	issue("my-peer", certs.Request{CommonName: "peer", DNSNames: names, IPs: parseIPs(localSANs), Server: true, Client: true, Validity: time.Hour})
	issue("my-server", certs.Request{CommonName: "server", DNSNames: names, Server: true, Client: true, Validity: time.Hour})

	// The operator's client Secret is missing: the cluster says so and applies nothing.
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns}, Spec: v1alpha1.EtcdClusterSpec{
		Replicas: ptr.To(int32(3)),
		TLS: &v1alpha1.TLSSpec{
			Peer:   &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "my-peer"},
			Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceSecret, SecretName: "my-server", OperatorSecretName: "my-operator"},
		}}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Degraded TLSNotReady naming the missing Secret", func() error {
		c := getCluster(t, ns)
		d := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Reason != v1alpha1.ReasonTLSNotReady || !strings.Contains(d.Message, "my-operator") {
			return fmt.Errorf("Degraded is %+v", d)
		}
		return nil
	})
	if sts := (&corev1.PodList{}); k8s.List(context.Background(), sts, client.InNamespace(ns)) == nil && len(sts.Items) > 0 {
		t.Fatalf("pods were created before the TLS Secrets were complete: %d", len(sts.Items))
	}
	issue("my-operator", certs.Request{CommonName: "etcd-pilot", Client: true, Validity: time.Hour})
	waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)

	u := issueUserCert(t, ca, ca.Cert, "e2e-user")
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)
	checkTLSFromEtcd(t, ns, 3, u)
	w.finish(t, ns, 3)

	got := getCluster(t, ns).Status.Certificates
	if len(got) != 3 {
		t.Fatalf("status.certificates: %+v", got)
	}
}

func parseIPs(ss []string) []net.IP {
	var out []net.IP
	for _, s := range ss {
		out = append(out, net.ParseIP(s))
	}
	return out
}

// servedCert is the certificate a member serves on port (2379 client, 2380 peer), read in a
// TLS handshake with the client pair and roots given.
func servedCert(ns string, ordinal, port int, cfg *tls.Config) (*x509.Certificate, error) {
	name := fmt.Sprintf("etcd-%d.etcd.%s.svc", ordinal, ns)
	ip, err := lookupHost(name)
	if err != nil {
		return nil, err
	}
	c := cfg.Clone()
	c.ServerName = name
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(ip, fmt.Sprint(port)), c)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// tlsConfigOf is a client configuration presenting the pair in Secret name, trusting its
// ca.crt.
func tlsConfigOf(t testing.TB, s *corev1.Secret) *tls.Config {
	t.Helper()
	kp, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Data["ca.crt"])
	return &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func TestLeafCertificatesRenewUnderWritesWithoutRestarts(t *testing.T) {
	ns := namespace(t)
	// Leaves live 10 minutes and are renewed 9m40s before they expire: every 20 seconds.
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
		TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs,
			CertificateDuration: &metav1.Duration{Duration: 10 * time.Minute}, RenewBefore: &metav1.Duration{Duration: 9*time.Minute + 40*time.Second}}})
	caSec := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	u := issueUserCert(t, certs.KeyPair{Cert: caSec.Data["tls.crt"], Key: caSec.Data["tls.key"]}, caSec.Data["ca.crt"], "e2e-user")
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })

	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, p := range pods.Items {
		uids[p.Name] = p.UID
	}
	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)

	// Wait for two renewals of both member certificates, each one served by every member
	// (read in a handshake) without a restart.
	served := map[string]map[string]bool{"etcd-server-tls": {}, "etcd-peer-tls": {}}
	eventually(t, 3*time.Minute, "two renewals of each member certificate, served by every member", func() error {
		for secret, port := range map[string]int{"etcd-server-tls": 2379, "etcd-peer-tls": 2380} {
			s := getSecret(t, ns, secret)
			want, err := certs.Parse(s.Data["tls.crt"])
			if err != nil {
				return err
			}
			cfg := u.tls
			if port == 2380 {
				cfg = tlsConfigOf(t, s)
			}
			for k := 0; k < 3; k++ {
				got, err := servedCert(ns, k, port, cfg)
				if err != nil {
					return fmt.Errorf("handshake with etcd-%d:%d: %w", k, port, err)
				}
				if got.SerialNumber.Cmp(want.SerialNumber) != 0 {
					return fmt.Errorf("etcd-%d serves %s serial %x, the Secret holds %x", k, secret, got.SerialNumber, want.SerialNumber)
				}
			}
			served[secret][want.SerialNumber.String()] = true
		}
		for secret, serials := range served {
			// The first certificate plus two renewals.
			if len(serials) < 3 {
				return fmt.Errorf("%s: %d certificates served so far", secret, len(serials))
			}
		}
		return nil
	})
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if uids[p.Name] != p.UID || restartCount(&p) != 0 {
			t.Fatalf("member pod %s was replaced or restarted during the renewals", p.Name)
		}
	}
	w.finish(t, ns, 3)
	t.Logf("served certificates: %d server, %d peer; longest write gap %s; %d leader changes",
		len(served["etcd-server-tls"]), len(served["etcd-peer-tls"]), w.longestGap().Round(time.Millisecond), w.termChanges())
	if w.termChanges() > 0 {
		t.Fatalf("%d leader changes while only certificates were renewed", w.termChanges())
	}
}

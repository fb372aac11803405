package observe_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// TestPinnedPeerPortTakesOnlyPeerCertificates: a cluster created under secure defaults is
// rendered with --peer-cert-allowed-hostname. Against a real etcd started with the rendered
// pin and the certificates the operator issues for it, a client certificate of the same CA
// (the operator's own, as an application's would be) is refused on the peer port, so it
// cannot speak raft; the members' peer certificate is taken, and so is the short-lived
// certificate the operator presents when it asks a peer URL which cluster answers there.
// Without the pin (a cluster created before secure defaults) the client certificate is
// taken: the test shows the hole it closes. (A cluster the operator issues peer certificates
// for now also has a peer CA of its own: TestSeparateCAsKeepClientsOffThePeerPort.)
func TestPinnedPeerPortTakesOnlyPeerCertificates(t *testing.T) {
	const ip = "127.0.62.1"
	secure := pinCluster(map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure})
	pin := renderedPin(t, secure)
	if want := "etcd-0.etcd." + secure.Namespace + ".svc.cluster.local"; pin != want {
		t.Fatalf("--peer-cert-allowed-hostname=%q, want %q", pin, want)
	}
	if legacy := renderedPin(t, pinCluster(nil)); legacy != "" {
		t.Fatalf("a cluster created before secure defaults is pinned (%q): its members would restart", legacy)
	}

	// The certificates the Operator source issues for this cluster, with the test's address.
	// etcd checks a peer certificate's names against the address it connects from: on
	// loopback that is 127.0.0.1.
	secure.Spec.TLS.ExtraSANs = []string{ip, "127.0.0.1"}
	wants := render.OperatorCertificates(secure, render.TopologyOf(secure, desired(t, secure)), render.SeparatePeerCA)
	if len(wants) != 2 {
		t.Fatalf("%d CAs asked for, want the client side's and the peer side's", len(wants))
	}
	cas, issued := issueAll(t, wants)
	ca := cas[v1alpha1.PeerCASecretName(secure.Name)]
	peer, operator := issued[v1alpha1.PeerTLSSecretName(secure.Name)], issued[v1alpha1.OperatorTLSSecretName(secure.Name)]
	if peer.Cert == nil || operator.Cert == nil {
		t.Fatalf("issued %v, want the peer and the operator's client certificate", keys(issued))
	}

	write := fileWriter(t)
	peerURL := fmt.Sprintf("https://%s:2380", ip)
	tlsFlags := []string{
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL, "--initial-cluster=m0=" + peerURL,
		"--peer-cert-file=" + write("peer.crt", peer.Cert), "--peer-key-file=" + write("peer.key", peer.Key),
		"--peer-trusted-ca-file=" + write("ca.crt", ca.Cert), "--peer-client-cert-auth=true",
	}
	etcdproc.Start(t, ip, append(tlsFlags, "--peer-cert-allowed-hostname="+pin)...)

	if err := peerHandshake(peerURL, peer, ca.Cert); err != nil {
		t.Errorf("the members' peer certificate is refused on the pinned peer port: %v", err)
	}
	// A client certificate of the peer CA itself, as the one CA of a cluster created before
	// the peer side had its own signs both: the pin alone refuses it.
	sameCA, err := certs.Issue(ca, certs.Request{CommonName: render.OperatorCommonName(secure), Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := peerHandshake(peerURL, sameCA, ca.Cert); err == nil {
		t.Errorf("a client certificate of the peer CA (no member names) is taken on the pinned peer port: it could speak raft")
	}

	// AskPeer cannot present a certificate without names (the pin refuses it) nor one with
	// names (the operator's address is not among them): it completes a handshake with the
	// members' peer certificate, verifying the member's.
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	kc := fake.NewClientBuilder().WithScheme(s).WithObjects(
		// The member pod as it runs: AskPeer reads from its flags that the peers are pinned.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: secure.Namespace, Name: "etcd-0", Labels: map[string]string{v1alpha1.LabelCluster: secure.Name}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Command: []string{"/usr/local/bin/etcd"}, Args: []string{"--peer-cert-allowed-hostname=" + pin}}}},
			Status: corev1.PodStatus{PodIP: ip}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secure.Namespace, Name: v1alpha1.PeerTLSSecretName(secure.Name)},
			Data: map[string][]byte{certs.CertKey: peer.Cert, certs.KeyKey: peer.Key, certs.CAKey: ca.Cert}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secure.Namespace, Name: v1alpha1.PeerCASecretName(secure.Name)},
			Data: map[string][]byte{certs.CertKey: ca.Cert, certs.KeyKey: ca.Key}},
	).Build()
	id := clusterIDAt(t, ip)
	// The peer URL as the members publish it: the operator connects to the pod's IP and
	// verifies the member's certificate for the URL's host.
	memberURL := "https://etcd-0.etcd." + secure.Namespace + ".svc.cluster.local:2380"
	if got := observe.AskPeer(context.Background(), kc, kc, 5*time.Second, secure, memberURL, id, v1alpha1.PeerTLSSecretName(secure.Name)); got != "" {
		t.Errorf("AskPeer on the pinned peer port: %q, want the cluster's answer", got)
	}
}

// TestUnpinnedPeerPortTakesAClientCertificate is the hole the pin closes: without
// --peer-cert-allowed-hostname, etcd takes any certificate its peer CA signed on the peer port.
func TestUnpinnedPeerPortTakesAClientCertificate(t *testing.T) {
	const ip = "127.0.62.2"
	ca, err := certs.NewCA("ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := certs.Issue(ca, certs.Request{CommonName: "etcd-peer", DNSNames: []string{"*.etcd.ns.svc"}, IPs: []net.IP{net.ParseIP(ip)}, Server: true, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := certs.Issue(ca, certs.Request{CommonName: "app", Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"peer.crt": peer.Cert, "peer.key": peer.Key, "ca.crt": ca.Cert} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	peerURL := fmt.Sprintf("https://%s:2380", ip)
	etcdproc.Start(t, ip, "--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=m0="+peerURL,
		"--peer-cert-file="+filepath.Join(dir, "peer.crt"), "--peer-key-file="+filepath.Join(dir, "peer.key"),
		"--peer-trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--peer-client-cert-auth=true")
	if err := peerHandshake(peerURL, clientCert, ca.Cert); err != nil {
		t.Fatalf("without the pin a client certificate of the peer CA is refused too (%v): the pinned test proves nothing", err)
	}
}

// TestSeparateCAsKeepClientsOffThePeerPort (issue 26): the Operator source gives a new
// cluster's peer side a CA of its own. Against a real etcd started, without the pin, with the
// certificates and trust bundles the operator issues, the operator's and an application's
// client certificates are refused on the peer port (so neither can speak raft), and the
// members' peer certificate is refused on the client port; the operator's is taken there.
func TestSeparateCAsKeepClientsOffThePeerPort(t *testing.T) {
	const ip = "127.0.62.3"
	c := pinCluster(map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure})
	// etcd checks a peer certificate's names against the address it connects from: on
	// loopback that is 127.0.0.1.
	c.Spec.TLS.ExtraSANs = []string{ip, "127.0.0.1"}
	c.Spec.TLS.Client.Certificates = []v1alpha1.ClientCertificate{{Name: "app"}}
	wants := render.OperatorCertificates(c, render.TopologyOf(c, nil), render.SeparatePeerCA)
	cas, issued := issueAll(t, wants)
	peerCA, clientCA := cas[v1alpha1.PeerCASecretName(c.Name)], cas[v1alpha1.CASecretName(c.Name)]
	peer, server := issued[v1alpha1.PeerTLSSecretName(c.Name)], issued[v1alpha1.ServerTLSSecretName(c.Name)]
	operator, app := issued[v1alpha1.OperatorTLSSecretName(c.Name)], issued[v1alpha1.ClientCertificateSecretName(c.Name, "app")]
	if peerCA.Cert == nil || clientCA.Cert == nil || peer.Cert == nil || server.Cert == nil || operator.Cert == nil || app.Cert == nil {
		t.Fatalf("CAs %v and leaves %v, want both CAs, the peer, server, operator's and app's certificates", keys(cas), keys(issued))
	}
	write := fileWriter(t)
	peerURL, clientURL := fmt.Sprintf("https://%s:2380", ip), fmt.Sprintf("https://%s:2379", ip)
	etcdproc.Start(t, ip, "--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=m0="+peerURL,
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--peer-cert-file="+write("peer.crt", peer.Cert), "--peer-key-file="+write("peer.key", peer.Key),
		"--peer-trusted-ca-file="+write("peer-ca.crt", peerCA.Cert), "--peer-client-cert-auth=true",
		"--cert-file="+write("server.crt", server.Cert), "--key-file="+write("server.key", server.Key),
		"--trusted-ca-file="+write("client-ca.crt", clientCA.Cert), "--client-cert-auth=true")

	if err := peerHandshake(peerURL, peer, peerCA.Cert); err != nil {
		t.Fatalf("the members' peer certificate is refused on the peer port: %v", err)
	}
	for name, pair := range map[string]certs.KeyPair{"the operator's": operator, "an application's": app} {
		if err := peerHandshake(peerURL, pair, peerCA.Cert); err == nil {
			t.Errorf("%s client certificate is taken on the peer port: it could speak raft", name)
		}
	}
	if err := handshakeAndGet(clientURL, "/version", operator, clientCA.Cert); err != nil {
		t.Fatalf("the operator's certificate is refused on the client port: %v", err)
	}
	if err := handshakeAndGet(clientURL, "/version", peer, clientCA.Cert); err == nil {
		t.Errorf("the members' peer certificate is taken on the client port")
	}
}

// fileWriter writes files into a folder of the test's and returns their paths.
func fileWriter(t *testing.T) func(name string, b []byte) string {
	dir := t.TempDir()
	return func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// issueAll does what the Operator source does for wants: a CA per Want, by its Secret's name,
// and each of its leaves signed by it, by Secret name.
func issueAll(t *testing.T, wants []certificates.Want) (cas, issued map[string]certs.KeyPair) {
	t.Helper()
	cas, issued = map[string]certs.KeyPair{}, map[string]certs.KeyPair{}
	for _, w := range wants {
		ca, err := certs.NewCA(w.CACommonName, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cas[w.CASecret] = ca
		for _, l := range w.Leaves {
			if issued[l.Secret], err = certs.Issue(ca, l.Request, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cas, issued
}

// pinCluster is a 3-member cluster in namespace pin with the Operator source's peer TLS.
func pinCluster(ann map[string]string) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "pin", UID: "8d1f6c0e-5b7a-4f2e-9c3d-2a1b0e9f8d7c", Annotations: ann},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: ptr.To[int32](3), Version: "3.6.16",
			TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceOperator}, Client: &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceOperator}}},
	}
}

// renderedPin is --peer-cert-allowed-hostname of the StatefulSet the embedded chart renders
// for c ("" when absent).
func renderedPin(t *testing.T, c *v1alpha1.EtcdCluster) string {
	t.Helper()
	for _, o := range desired(t, c) {
		if o.GetKind() != "StatefulSet" {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
			t.Fatal(err)
		}
		args, _ := chartcontract.EtcdContainerArgs(&sts.Spec.Template.Spec)
		v, _ := args.Get("peer-cert-allowed-hostname")
		return v
	}
	t.Fatal("no StatefulSet rendered")
	return ""
}

// desired is what the embedded chart renders for c.
func desired(t *testing.T, c *v1alpha1.EtcdCluster) []*unstructured.Unstructured {
	t.Helper()
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Desired(r, c, values.DefaultOperator(), memory.Of(c))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// peerHandshake completes a TLS handshake with the peer listener at u presenting pair, and
// then a request, since TLS 1.3 reports a refused client certificate only on the first read.
func peerHandshake(u string, pair certs.KeyPair, ca []byte) error {
	return handshakeAndGet(u, "/members", pair, ca)
}

// handshakeAndGet completes a TLS handshake with the listener at u presenting pair, trusting
// ca, and asks for path: nil when it answers 200.
func handshakeAndGet(u, path string, pair certs.KeyPair, ca []byte) error {
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	host := strings.TrimPrefix(u, "https://")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", host,
		&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: strings.Split(host, ":")[0], MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		return fmt.Errorf("answered %q", buf[:n])
	}
	return nil
}

// clusterIDAt is the cluster ID of the one-member etcd whose client URL is on ip.
func clusterIDAt(t *testing.T, ip string) uint64 {
	t.Helper()
	cl, err := etcd.Dial(context.Background(), []string{fmt.Sprintf("http://%s:2379", ip)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return list.ClusterID
}

func keys(m map[string]certs.KeyPair) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

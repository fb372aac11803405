package lane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// servedSerial is the serial of the certificate the server at addr presents (read in the
// handshake, before any client certificate is asked for).
func servedSerial(addr string) (string, error) {
	var serial string
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, &tls.Config{
		InsecureSkipVerify: true, // only read what is served
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				if c, err := x509.ParseCertificate(raw[0]); err == nil {
					serial = c.SerialNumber.Text(16)
				}
			}
			return nil
		},
	})
	if conn != nil {
		conn.Close()
	}
	if serial != "" {
		return serial, nil
	}
	return "", fmt.Errorf("no certificate from %s: %v", addr, err)
}

func secretSerial(t *testing.T, ns, secret string) string {
	t.Helper()
	block, _ := pem.Decode(secretData(t, ns, secret)["tls.crt"])
	if block == nil {
		t.Fatalf("no certificate in %s", secret)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

// TestCertificateRenewalThroughTheKubelet renews the members' leaves every 20 s: the operator
// writes the Secrets, the real kubelet refreshes the pods' Secret volumes, and etcd, which
// reads its files at every handshake, serves the new certificates on its client and peer
// ports with no restart, while a writer's acknowledged writes all stay.
func TestCertificateRenewalThroughTheKubelet(t *testing.T) {
	const ns, name = "renewal", "etcd"
	createLaneCluster(t, ns, name, 3, 0, func(s *v1alpha1.EtcdClusterSpec) {
		s.TLS.CertificateDuration = &metav1.Duration{Duration: 10 * time.Minute}
		s.TLS.RenewBefore = &metav1.Duration{Duration: 9*time.Minute + 40*time.Second}
	})
	pods := map[string]string{}
	for i := range 3 {
		p, err := kube.CoreV1().Pods(ns).Get(tctx(t), fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[p.Name] = string(p.UID)
	}
	eps := memberEndpoints(ns, name, 3)
	cli := etcdClient(t, ns, name, name+"-client-app", eps, false)
	w := startWriter(cli, "/lane/renewal")

	// Each port, with the Secret whose leaf it serves.
	type port struct{ addr, secret string }
	var ports []port
	for i := range 3 {
		host := fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", name, i, name, ns)
		ports = append(ports, port{host + ":2379", name + "-server-tls"}, port{host + ":2380", v1alpha1.PeerTLSSecretName(name)})
	}
	first := map[string]string{}
	// A member's name resolves once CoreDNS has its endpoint (and its short negative cache
	// has passed, should a client have asked before).
	eventually(t, time.Minute, time.Second, "every port's first certificate", func() error {
		for _, p := range ports {
			s, err := servedSerial(p.addr)
			if err != nil {
				return err
			}
			first[p.addr] = s
		}
		return nil
	})
	start := time.Now()
	// Every port serves a leaf it did not serve at first, and that leaf is one its Secret held:
	// two renewals at least have gone through the kubelet.
	seen := map[string]map[string]bool{} // Secret -> serials it held
	renewed := map[string]time.Duration{}
	eventually(t, 4*time.Minute, time.Second, "every member serving renewed certificates on both ports", func() error {
		for _, sec := range []string{name + "-server-tls", v1alpha1.PeerTLSSecretName(name)} {
			if seen[sec] == nil {
				seen[sec] = map[string]bool{}
			}
			seen[sec][secretSerial(t, ns, sec)] = true
		}
		for _, p := range ports {
			if _, ok := renewed[p.addr]; ok {
				continue
			}
			s, err := servedSerial(p.addr)
			if err != nil {
				return err
			}
			if s != first[p.addr] && seen[p.secret][s] {
				renewed[p.addr] = time.Since(start)
			}
		}
		if len(renewed) < len(ports) {
			return fmt.Errorf("%d of %d ports serve a renewed leaf", len(renewed), len(ports))
		}
		return nil
	})
	acked, failed, longest := w.Stop()
	checkAcked(t, cli, "/lane/renewal", acked)
	for n, uid := range pods {
		p, err := kube.CoreV1().Pods(ns).Get(tctx(t), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		restarts := int32(0)
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		if string(p.UID) != uid || restarts != 0 {
			t.Fatalf("pod %s was replaced or restarted (uid %s, was %s; %d restarts): a renewal must need neither", n, p.UID, uid, restarts)
		}
	}
	slowest := time.Duration(0)
	for _, d := range renewed {
		slowest = max(slowest, d)
	}
	t.Logf("all 6 ports served renewed leaves within %.1fs (leaves renewed every 20s, %d server and %d peer serials seen), no pod restarted; %d writes acknowledged and all readable, %d failed, longest write gap %s",
		slowest.Seconds(), len(seen[name+"-server-tls"]), len(seen[v1alpha1.PeerTLSSecretName(name)]), len(acked), failed, longest.Round(time.Millisecond))
}

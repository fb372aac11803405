package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// followingClient is a client that follows a CA rotation as a user should: it trusts the
// CA Secret's current bundle and, once a new CA signs, gets a certificate from it.
type followingClient struct {
	mu     sync.Mutex
	pool   *x509.CertPool
	cert   *tls.Certificate
	signer []byte
}

func (f *followingClient) refresh(t testing.TB, ns string) {
	s := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	f.mu.Lock()
	defer f.mu.Unlock()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Data["ca.crt"])
	f.pool = pool
	if string(f.signer) == string(s.Data["tls.crt"]) {
		return
	}
	pair, err := certs.Issue(certs.KeyPair{Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}, certs.Request{CommonName: "e2e-user", Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Error(err)
		return
	}
	kp, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Error(err)
		return
	}
	f.cert, f.signer = &kp, s.Data["tls.crt"]
}

// config verifies servers against the bundle of the moment and presents the certificate of
// the moment, at every handshake.
func (f *followingClient) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.cert, nil
		},
		// Verification is done in VerifyConnection, against the bundle of the moment.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			f.mu.Lock()
			pool := f.pool
			f.mu.Unlock()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: cs.ServerName})
			return err
		},
	}
}

func TestCARotationUnderWrites(t *testing.T) {
	ns := namespace(t)
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
		TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs}})
	first := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	oldCA, oldKey := first.Data["tls.crt"], first.Data["tls.key"]
	oldCAs := operatorCAs(t, ns)
	if len(oldCAs) != 2 {
		t.Fatalf("CA Secrets %v, want the client side's and the peer side's", oldCAs)
	}
	f := &followingClient{}
	f.refresh(t, ns)
	clientTLS.Store(ns, f.config())
	t.Cleanup(func() { clientTLS.Delete(ns) })
	ctx, cancel := context.WithCancel(context.Background())
	follow := make(chan struct{})
	go func() {
		defer close(follow)
		for ctx.Err() == nil {
			f.refresh(t, ns)
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond): // the user's own poll of the CA Secret
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-follow })

	w, s := startWriter(t, ns, 3), startSampler(t, ns)
	w.waitAcked(t, 50)
	start := time.Now()
	c := getCluster(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.AnnotationRotateCA, "e2e")
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	waitCARotated(t, ns, oldCAs)
	took := time.Since(start)
	w.waitAcked(t, 50)

	// Evidence from etcd: every member serves, on each port, a certificate of that side's new
	// CA, and refuses a client certificate of the old one.
	newCA := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	newPeerCA := getSecret(t, ns, v1alpha1.PeerCASecretName("etcd"))
	peer := getSecret(t, ns, "etcd-peer-tls")
	for k := 0; k < 3; k++ {
		for _, port := range []int{2379, 2380} {
			cfg := f.config()
			newPool := x509.NewCertPool()
			newPool.AppendCertsFromPEM(newCA.Data["tls.crt"])
			if port == 2380 {
				cfg = tlsConfigOf(t, peer)
				newPool = x509.NewCertPool()
				newPool.AppendCertsFromPEM(newPeerCA.Data["tls.crt"])
			}
			got, err := servedCert(ns, k, port, cfg)
			if err != nil {
				t.Fatalf("etcd-%d:%d: %v", k, port, err)
			}
			if _, err := got.Verify(x509.VerifyOptions{Roots: newPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Fatalf("etcd-%d:%d serves a certificate not of the new CA: %v", k, port, err)
			}
		}
	}
	stale := issueUserCert(t, certs.KeyPair{Cert: oldCA, Key: oldKey}, newCA.Data["ca.crt"], "stale")
	if out, err := etcdctl(t, "--endpoints", endpoint(ns, 0), "--cacert", stale.ca, "--cert", stale.c, "--key", stale.k, "put", "w-stale", "x"); err == nil {
		t.Fatalf("a client certificate of the dropped CA was accepted: %s", out)
	}
	res := s.finish(t)
	w.finish(t, ns, 3)
	t.Logf("both CAs rotated in %s (two restart rounds): %d raft term changes seen by the writer, longest write gap %s, fewest healthy voters %d of %d",
		took.Round(100*time.Millisecond), w.termChanges(), w.longestGap().Round(time.Millisecond), res.FewestHealthyVoters, res.VotersThen)
	if w.termChanges() > 2 {
		t.Errorf("%d leader changes in two restart rounds, want at most one per round (the two CAs' rotations share their restart rounds)", w.termChanges())
	}
}

// operatorCAs are the tls.crt of the CA Secrets the operator keeps for cluster "etcd" in ns
// (the client side's and the peer side's, those that exist), by Secret name.
func operatorCAs(t testing.TB, ns string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{v1alpha1.CASecretName("etcd"), v1alpha1.PeerCASecretName("etcd")} {
		s := &corev1.Secret{}
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s)
		switch {
		case err == nil:
			out[name] = s.Data["tls.crt"]
		case !apierrors.IsNotFound(err):
			t.Fatal(err)
		}
	}
	return out
}

// waitCARotated waits until the rotation of the CAs in old (tls.crt by Secret name) has
// finished: each CA Secret holds a new CA alone at trust generation 2, status says no
// rotation runs and records generation 2 for each, and every member pod is ready on
// generation 2 of each (one pod-template annotation per CA).
func waitCARotated(t testing.TB, ns string, old map[string][]byte) {
	t.Helper()
	eventually(t, 5*time.Minute, "the CA rotation to finish", func() error {
		for name, oldCA := range old {
			sec := getSecret(t, ns, name)
			if string(sec.Data["tls.crt"]) == string(oldCA) || !certs.SameBundle(sec.Data["ca.crt"], sec.Data["tls.crt"]) || sec.Annotations[v1alpha1.AnnotationTrustGeneration] != "2" {
				return fmt.Errorf("CA Secret %s at generation %s, next CA present %v", name, sec.Annotations[v1alpha1.AnnotationTrustGeneration], len(sec.Data["next.crt"]) > 0)
			}
		}
		c := getCluster(t, ns)
		p := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionProgressing)
		status := map[string]int64{v1alpha1.CASecretName("etcd"): c.Status.TrustGeneration, v1alpha1.PeerCASecretName("etcd"): c.Status.PeerTrustGeneration}
		podKey := map[string]string{v1alpha1.CASecretName("etcd"): v1alpha1.AnnotationTrustGeneration, v1alpha1.PeerCASecretName("etcd"): v1alpha1.AnnotationPeerTrustGeneration}
		if c.Status.CARotation != "" || p == nil || p.Status != metav1.ConditionFalse {
			return fmt.Errorf("status: rotation %q, progressing %+v", c.Status.CARotation, p)
		}
		for name := range old {
			if status[name] != 2 {
				return fmt.Errorf("status: trust generation of %s is %d", name, status[name])
			}
		}
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if !podReady(&p) {
				return fmt.Errorf("pod %s not ready", p.Name)
			}
			for name := range old {
				if got := p.Annotations[podKey[name]]; got != "2" {
					return fmt.Errorf("pod %s on generation %q of %s", p.Name, got, name)
				}
			}
		}
		return nil
	})
}

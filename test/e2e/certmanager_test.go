package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// certManagerDir builds (once, cached) cert-manager's controllers and CRDs
// (hack/build-certmanager.sh) and returns their folder.
func certManagerDir(t testing.TB) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "hack", "build-certmanager.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-certmanager.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// installCertManagerCRDs creates cert-manager's CRDs (from the module's deploy/crds) in the
// local cluster, if they are not there yet, and waits until they are established. They stay
// for the rest of the suite.
func installCertManagerCRDs(t testing.TB, cmDir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cmDir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cert-manager CRDs in %s/crds: %v", cmDir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&crd.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := k8s.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("failed to create CRD %s: %v", crd.GetName(), err)
		}
		eventually(t, time.Minute, "CRD "+crd.GetName()+" established", func() error {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(crd.GroupVersionKind())
			if err := k8s.Get(context.Background(), types.NamespacedName{Name: crd.GetName()}, live); err != nil {
				return err
			}
			if conditionOf(live, "Established") != "True" {
				return fmt.Errorf("not established yet")
			}
			return nil
		})
	}
}

// startCertManager runs cert-manager's controllers (bin/certmanager/<version>/
// certmanager-controllers) against the local cluster until the test ends; their log goes to a
// file, printed when the test fails.
func startCertManager(t *testing.T, cmDir string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "certmanager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(cmDir, "certmanager-controllers"),
		"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--v=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start certmanager-controllers: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Log("certmanager-controllers did not stop within 15s; killed")
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 12000 {
				b = b[len(b)-12000:]
			}
			t.Logf("==== certmanager-controllers log (tail)\n%s", b)
		}
	})
}

// cmObject is a cert-manager object (cert-manager.io/v1) with spec.
func cmObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("cert-manager.io/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// conditionOf is the status of the condition typ of an unstructured object ("" if absent).
func conditionOf(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// waitReady waits until the cert-manager object is Ready.
func waitReady(t testing.TB, obj *unstructured.Unstructured) {
	t.Helper()
	eventually(t, time.Minute, obj.GetKind()+" "+obj.GetName()+" Ready", func() error {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, live); err != nil {
			return err
		}
		if s := conditionOf(live, "Ready"); s != "True" {
			return fmt.Errorf("Ready is %q: %v", s, live.Object["status"])
		}
		return nil
	})
}

func createObject(t testing.TB, obj *unstructured.Unstructured) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("failed to create %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// userCertFromSecret writes the pair and ca.crt of a Secret cert-manager issued to files for
// etcdctl and builds the client configuration presenting it.
func userCertFromSecret(t testing.TB, s *corev1.Secret) userCert {
	t.Helper()
	d := t.TempDir()
	u := userCert{dir: d, ca: filepath.Join(d, "ca.crt"), c: filepath.Join(d, "tls.crt"), k: filepath.Join(d, "tls.key")}
	for f, key := range map[string]string{u.ca: "ca.crt", u.c: "tls.crt", u.k: "tls.key"} {
		if err := os.WriteFile(f, s.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kp, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Data["ca.crt"])
	u.tls = &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return u
}

// caIssuer makes cert-manager sign with a CA of its own in ns: a self-signed ClusterIssuer
// signs a CA Certificate (Secret e2e-ca), and the CA Issuer name in ns signs with it.
func caIssuer(t *testing.T, ns, name string) {
	t.Helper()
	selfSigned := cmObject("ClusterIssuer", "", "e2e-selfsigned-"+ns, map[string]any{"selfSigned": map[string]any{}})
	createObject(t, selfSigned)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), selfSigned) })
	caCert := cmObject("Certificate", ns, "e2e-ca", map[string]any{
		"isCA": true, "commonName": "e2e cert-manager CA", "secretName": "e2e-ca", "duration": "24h",
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
		"issuerRef":  map[string]any{"name": selfSigned.GetName(), "kind": "ClusterIssuer", "group": "cert-manager.io"},
	})
	createObject(t, caCert)
	waitReady(t, caCert)
	issuer := cmObject("Issuer", ns, name, map[string]any{"ca": map[string]any{"secretName": "e2e-ca"}})
	createObject(t, issuer)
	waitReady(t, issuer)
}

// TestTLSClusterWithCertManagerIssuer runs cert-manager's own controllers (its v1.21.2
// module: issuers, approver, CA and self-signed signers, the Certificate controllers) next to
// the local cluster: a self-signed ClusterIssuer signs a CA Certificate, a CA Issuer in the
// test namespace signs the certificates of a 3-member cluster whose peer and client sides both
// name that Issuer. The operator creates the Certificates; cert-manager writes the Secrets the
// members mount. Under writes: etcdctl is refused without a client certificate and served with
// one the same Issuer signed; a name added to extraSANs reaches every member's served
// certificate through cert-manager without a restart; a deleted peer Secret is issued again by
// cert-manager; no acknowledged write is lost.
func TestTLSClusterWithCertManagerIssuer(t *testing.T) {
	cmDir := certManagerDir(t)
	installCertManagerCRDs(t, cmDir)
	startCertManager(t, cmDir)
	ns := namespace(t)

	caIssuer(t, ns, "ca")

	start := time.Now()
	ref := &v1alpha1.IssuerReference{Name: "ca"}
	createWith(t, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)), TLS: &v1alpha1.TLSSpec{
		Peer:      &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
		Client:    &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
		ExtraSANs: localSANs}})
	t.Logf("3 members with cert-manager certificates Available after %s", time.Since(start).Round(time.Millisecond))

	// The operator's Certificates, owned by the cluster, Ready; their Secrets written by
	// cert-manager (its annotation), not by the operator, from the CA Issuer.
	caSec := getSecret(t, ns, "e2e-ca")
	for _, name := range []string{"etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"} {
		crt := &unstructured.Unstructured{}
		crt.SetGroupVersionKind(render.CertificateGVK)
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, crt); err != nil {
			t.Fatalf("Certificate %s: %v", name, err)
		}
		if refs := crt.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "EtcdCluster" || refs[0].Name != "etcd" {
			t.Fatalf("Certificate %s is owned by %+v", name, refs)
		}
		if s := conditionOf(crt, "Ready"); s != "True" {
			t.Fatalf("Certificate %s Ready=%q", name, s)
		}
		s := getSecret(t, ns, name)
		if s.Annotations["cert-manager.io/certificate-name"] != name || s.Labels[v1alpha1.LabelCluster] != "etcd" {
			t.Fatalf("Secret %s was not written by cert-manager for the operator's Certificate: annotations %v, labels %v", name, s.Annotations, s.Labels)
		}
		server := name != "etcd-operator-client-tls"
		if err := certs.Verify(certs.KeyPair{Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}, caSec.Data["tls.crt"], server, true, time.Now()); err != nil {
			t.Fatalf("Secret %s is not signed by the Issuer's CA for its usages: %v", name, err)
		}
	}

	// A user's client certificate from the same Issuer.
	userCrt := cmObject("Certificate", ns, "e2e-user", map[string]any{
		"commonName": "e2e-user", "secretName": "e2e-user-tls", "duration": "1h", "usages": []any{"digital signature", "client auth"},
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
		"issuerRef":  map[string]any{"name": "ca", "kind": "Issuer", "group": "cert-manager.io"},
	})
	createObject(t, userCrt)
	waitReady(t, userCrt)
	u := userCertFromSecret(t, getSecret(t, ns, "e2e-user-tls"))
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })

	w := startWriter(t, ns, 3)
	w.waitAcked(t, 50)
	checkTLSFromEtcd(t, ns, 3, u)

	// status.certificates: the three Secrets, without a renewal time (cert-manager renews).
	c := getCluster(t, ns)
	if len(c.Status.Certificates) != 3 {
		t.Fatalf("status.certificates: %+v", c.Status.Certificates)
	}
	for _, s := range c.Status.Certificates {
		if s.RenewAt != nil || !s.NotAfter.After(time.Now()) {
			t.Fatalf("status.certificates entry %+v", s)
		}
	}

	// A name added to spec.tls.extraSANs: the operator updates its Certificates, cert-manager
	// issues them again, and every member serves the new server certificate, with no restart.
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, p := range pods.Items {
		uids[p.Name] = p.UID
	}
	const newName = "etcd.e2e.example"
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns)
		c.Spec.TLS.ExtraSANs = append(append([]string{}, localSANs...), newName)
		return k8s.Update(context.Background(), c)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "every member serves a server certificate naming "+newName, func() error {
		for k := 0; k < 3; k++ {
			got, err := servedCert(ns, k, 2379, u.tls)
			if err != nil {
				return fmt.Errorf("handshake with etcd-%d: %w", k, err)
			}
			if !slices.Contains(got.DNSNames, newName) {
				return fmt.Errorf("etcd-%d serves a certificate for %v", k, got.DNSNames)
			}
		}
		return nil
	})
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if uids[p.Name] != p.UID || restartCount(&p) != 0 {
			t.Fatalf("member pod %s was replaced or restarted while cert-manager issued its certificates again", p.Name)
		}
	}
	w.waitAcked(t, 50)

	// cert-manager issues a deleted peer Secret again; the cluster keeps serving and is not
	// degraded afterwards.
	peer := getSecret(t, ns, "etcd-peer-tls")
	if err := k8s.Delete(context.Background(), peer); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "cert-manager issues the peer certificate again", func() error {
		s := &corev1.Secret{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd-peer-tls"}, s); err != nil {
			return err
		}
		if s.UID == peer.UID {
			return fmt.Errorf("still the old Secret")
		}
		return certs.Verify(certs.KeyPair{Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}, caSec.Data["tls.crt"], true, true, time.Now())
	})
	eventually(t, time.Minute, "Degraded=False", func() error {
		d := meta.FindStatusCondition(getCluster(t, ns).Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionFalse {
			return fmt.Errorf("Degraded is %+v", d)
		}
		return nil
	})
	w.waitAcked(t, 50)
	noSecretInEvents(t, ns)
	w.finish(t, ns, 3)
	t.Logf("longest write gap %s; %d leader changes", w.longestGap().Round(time.Millisecond), w.termChanges())
}

// TestClustersOnOneCAAreNotRootOnEachOther: two clusters whose certificates come from one CA
// (here one CA Issuer for both, as a ClusterIssuer the admin allows would be), both with
// etcd's authentication on. Each operator certificate names its own cluster
// (etcd-pilot-<hash of namespace/name>): cluster a's is served by a's etcd (root there), and refused by b's,
// though b's members trust its CA; so is the reverse. With one fixed common name for every
// cluster, a's certificate was root on b.
func TestClustersOnOneCAAreNotRootOnEachOther(t *testing.T) {
	cmDir := certManagerDir(t)
	installCertManagerCRDs(t, cmDir)
	startCertManager(t, cmDir)
	ns := namespace(t)
	caIssuer(t, ns, "shared")

	ref := &v1alpha1.IssuerReference{Name: "shared"}
	for _, name := range []string{"a", "b"} {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.EtcdClusterSpec{
			Replicas: ptr.To(int32(3)), Auth: &v1alpha1.AuthSpec{Enabled: true},
			TLS: &v1alpha1.TLSSpec{
				Peer:      &v1alpha1.PeerTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
				Client:    &v1alpha1.ClientTLS{Source: v1alpha1.TLSSourceCertManager, IssuerRef: ref},
				ExtraSANs: localSANs}}}
		if err := k8s.Create(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b"} {
		eventually(t, availableTimeout, "cluster "+name+" Ready with authentication on", func() error {
			c := &v1alpha1.EtcdCluster{}
			if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, c); err != nil {
				return err
			}
			ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
			if c.Status.AuthEnabled == nil || !*c.Status.AuthEnabled || ready == nil || ready.Status != metav1.ConditionTrue {
				return fmt.Errorf("authEnabled %v, Ready %+v", c.Status.AuthEnabled, ready)
			}
			return nil
		})
	}
	certOf := map[string]userCert{}
	for _, name := range []string{"a", "b"} {
		certOf[name] = userCertFromSecret(t, getSecret(t, ns, name+"-operator-client-tls"))
		leaf, err := certs.Parse(getSecret(t, ns, name+"-operator-client-tls").Data["tls.crt"])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cluster %s: operator certificate CN %s", name, leaf.Subject.CommonName)
	}
	put := func(cluster string, u userCert) (string, error) {
		ep := fmt.Sprintf("https://%s-0.%s.%s.svc:2379", cluster, cluster, ns)
		return etcdctl(t, "--endpoints", ep, "--cacert", u.ca, "--cert", u.c, "--key", u.k, "put", "/probe", "x")
	}
	for _, tc := range []struct{ cert, cluster string }{{"a", "a"}, {"b", "b"}} {
		if out, err := put(tc.cluster, certOf[tc.cert]); err != nil {
			t.Fatalf("cluster %s's operator certificate on its own etcd: %v: %s", tc.cert, err, lastLine(out))
		}
	}
	for _, tc := range []struct{ cert, cluster string }{{"a", "b"}, {"b", "a"}} {
		out, err := put(tc.cluster, certOf[tc.cert])
		if err == nil {
			t.Fatalf("cluster %s's operator certificate wrote to cluster %s's etcd: %s", tc.cert, tc.cluster, out)
		}
		t.Logf("cluster %s's operator certificate on cluster %s: refused (%s)", tc.cert, tc.cluster, lastLine(out))
	}
}

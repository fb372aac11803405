package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestDefaultClusterIsSecure: an EtcdCluster created with neither spec.tls nor spec.insecure
// (as the sample is) forms with TLS on both sides: read from etcd, every member advertises
// https peer and client URLs; plain HTTP and a TLS client without a certificate are refused;
// a client presenting a certificate the operator issued (its own, <name>-operator-client-tls)
// is served. The local cluster's operator runs with --default-extra-sans=127.0.0.1, which the
// members' peer certificates need there. The stored spec stays as written.
func TestDefaultClusterIsSecure(t *testing.T) {
	ns := namespace(t)
	start := time.Now()
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	c = waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	t.Logf("3 members with the secure default Available after %s", time.Since(start).Round(time.Millisecond))
	if c.Status.Security != v1alpha1.SecurityTLS || c.Annotations[v1alpha1.AnnotationDefaults] != v1alpha1.DefaultsSecure {
		t.Fatalf("status.security %q, annotations %v: want TLS under the secure defaults' marker", c.Status.Security, c.Annotations)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionInsecureTransport); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Fatalf("InsecureTransport %+v, want False", cond)
	}
	if c.Spec.TLS != nil || c.Spec.NetworkPolicy != nil {
		t.Fatalf("the stored spec was changed: tls %+v, networkPolicy %+v", c.Spec.TLS, c.Spec.NetworkPolicy)
	}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd"}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("the default NetworkPolicy: %v", err)
	}

	// The certificate the operator issued for its own connections, as a client presents it.
	sec := getSecret(t, ns, "etcd-operator-client-tls")
	d := t.TempDir()
	u := userCert{dir: d, ca: filepath.Join(d, "ca.crt"), c: filepath.Join(d, "tls.crt"), k: filepath.Join(d, "tls.key")}
	for f, key := range map[string]string{u.ca: "ca.crt", u.c: "tls.crt", u.k: "tls.key"} {
		if err := os.WriteFile(f, sec.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kp, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.Data["ca.crt"])
	u.tls = &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	clientTLS.Store(ns, u.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })

	// From etcd: https URLs; plain HTTP and no certificate refused; the certificate served.
	checkTLSFromEtcd(t, ns, 3, u)
}

// TestApplicationCertificateIsIssuedAndRevoked: spec.tls.client.certificates gets an
// application a certificate of the cluster's CA without anyone holding the CA's key; etcd
// serves a client presenting it. Removing the entry revokes it: etcd refuses the same
// certificate (a copy the application kept) once the members' Secret volume carries the
// new revocation list, without a restart, while the operator and the cluster go on.
func TestApplicationCertificateIsIssuedAndRevoked(t *testing.T) {
	ns := namespace(t)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
			TLS: &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{Certificates: []v1alpha1.ClientCertificate{{Name: "app"}}}}}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	sec := getSecret(t, ns, "etcd-client-app")
	d := t.TempDir()
	u := userCert{dir: d, ca: filepath.Join(d, "ca.crt"), c: filepath.Join(d, "tls.crt"), k: filepath.Join(d, "tls.key")}
	for f, key := range map[string]string{u.ca: "ca.crt", u.c: "tls.crt", u.k: "tls.key"} {
		if err := os.WriteFile(f, sec.Data[key], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pods := podUIDs(t, ns)
	ep := "https://etcd-0.etcd." + ns + ".svc:2379"
	put := func(key string) (string, error) {
		return etcdctl(t, "--endpoints", ep, "--cacert", u.ca, "--cert", u.c, "--key", u.k, "--command-timeout", "3s", "put", key, "x")
	}
	eventually(t, 30*time.Second, "etcdctl served with the application's certificate", func() error {
		if out, err := put("before"); err != nil {
			return fmt.Errorf("%v: %s", err, lastLine(out))
		}
		return nil
	})

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns)
		c.Spec.TLS.Client.Certificates = nil
		return k8s.Update(context.Background(), c)
	}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	eventually(t, 2*time.Minute, "etcd refusing the revoked certificate", func() error {
		if out, err := put("after"); err == nil {
			return fmt.Errorf("served: %s", lastLine(out))
		}
		return nil
	})
	t.Logf("figures: the revoked certificate refused %s after its entry was removed", time.Since(removed).Round(100*time.Millisecond))
	if got := podUIDs(t, ns); !maps.Equal(got, pods) {
		t.Errorf("members restarted for the revocation: %v, then %v", pods, got)
	}
	waitCondition(t, ns, v1alpha1.ConditionReady, metav1.ConditionTrue, time.Minute)
}

// podUIDs are the UIDs of the member pods of ns, by name.
func podUIDs(t *testing.T, ns string) map[string]types.UID {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, p := range pods.Items {
		out[p.Name] = p.UID
	}
	return out
}

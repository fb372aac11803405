package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// TestMemberNamesResolveToPodIPs dials a real etcd by a member pod's name, which no resolver
// knows: PodAddresses takes the pod's IP from its status (through the manager's cache) and
// both Status over gRPC and the cluster version over /version answer. A pod of another
// subdomain, or one without an IP, is not resolved.
func TestMemberNamesResolveToPodIPs(t *testing.T) {
	const ip = "127.0.61.1"
	etcdproc.Start(t, ip)
	ns := env.Namespace(t)
	ctx := context.Background()
	newPod := func(name, subdomain, podIP string) {
		// The manager caches the pods labeled as etcd-pilot's, as the StatefulSet's are.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}},
			Spec: corev1.PodSpec{Subdomain: subdomain, Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}}}
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if podIP != "" {
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}}
			if err := env.Client.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	newPod("etcd-0", "etcd", ip)
	newPod("other-0", "other", ip)
	newPod("etcd-1", "etcd", "")

	resolve := controllers.PodAddresses(mgr.GetClient())
	endpoint := "http://etcd-0.etcd." + ns + ".svc:2379"
	testutil.Eventually(t, 10*time.Second, "etcd-0's IP in the manager's cache", func() error {
		if got, ok := resolve(ctx, "etcd-0.etcd."+ns+".svc"); !ok || got != ip {
			return fmt.Errorf("etcd-0 resolves to %q %v", got, ok)
		}
		return nil
	})
	for _, host := range []string{"etcd-0.etcd." + ns + ".svc.cluster.local", "etcd-0.etcd." + ns + ".svc.cluster.local."} {
		if got, ok := resolve(ctx, host); !ok || got != ip {
			t.Errorf("%s resolves to %q %v, want %s", host, got, ok, ip)
		}
	}
	for _, host := range []string{"other-0.etcd." + ns + ".svc", "etcd-1.etcd." + ns + ".svc", "etcd-0.etcd." + ns, "etcd-9.etcd." + ns + ".svc", ip} {
		if got, ok := resolve(ctx, host); ok {
			t.Errorf("%s resolves to %q, want no answer", host, got)
		}
	}

	// By name alone the endpoint is not reachable: the test would pass without PodAddresses
	// otherwise.
	plain, err := etcd.Dial(ctx, []string{endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = plain.Status(sctx, endpoint)
	cancel()
	plain.Close()
	if err == nil {
		t.Fatalf("%s answered without PodAddresses: the name resolves by itself and the test shows nothing", endpoint)
	}

	cl, err := etcd.DialVia(resolve)(ctx, []string{endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cl.Status(sctx, endpoint)
	if err != nil {
		t.Fatalf("Status of %s through the pod's IP: %v", endpoint, err)
	}
	if st.Leader == 0 || st.ClusterVersion == "" {
		t.Errorf("Status of %s: leader %x, cluster version %q; want a leader and the cluster version from /version", endpoint, st.Leader, st.ClusterVersion)
	}
	if _, err := cl.MemberList(sctx); err != nil {
		t.Errorf("member list through the pod's IP: %v", err)
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

const availableTimeout = 3 * time.Minute

// createCluster creates an EtcdCluster named "etcd" in ns and returns when it is Available.
func createCluster(t testing.TB, ns string, replicas int32) (*v1alpha1.EtcdCluster, time.Duration) {
	t.Helper()
	c := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(replicas)},
	}
	start := time.Now()
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	c = waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	return c, time.Since(start)
}

// createWith creates the EtcdCluster "etcd" in ns with spec and waits until it is Available.
// spec.insecure is set: the suite's fixtures are plain unless a test asks for spec.tls (most
// are about other things); the secure default has its own test (TestDefaultClusterIsSecure).
func createWith(t testing.TB, ns string, spec v1alpha1.EtcdClusterSpec) *v1alpha1.EtcdCluster {
	t.Helper()
	spec.Insecure = true
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns}, Spec: spec}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	return c
}

// createClaim creates a 1Gi ReadWriteOnce claim name in ns (a backup destination).
func createClaim(t testing.TB, ns, name string) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := k8s.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
}

func getCluster(t testing.TB, ns string) *v1alpha1.EtcdCluster {
	t.Helper()
	c := &v1alpha1.EtcdCluster{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd"}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func waitCondition(t testing.TB, ns, typ string, status metav1.ConditionStatus, timeout time.Duration) *v1alpha1.EtcdCluster {
	t.Helper()
	var c *v1alpha1.EtcdCluster
	eventually(t, timeout, fmt.Sprintf("%s=%s", typ, status), func() error {
		c = getCluster(t, ns)
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil || cond.Status != status {
			return fmt.Errorf("%s is %+v; %s", typ, cond, memberPodsState(ns))
		}
		return nil
	})
	return c
}

// memberPodsState says, for a message, what the member pods of ns and their StatefulSet look
// like now: a condition that waits on them says why.
func memberPodsState(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var parts []string
	sts := &appsv1.StatefulSet{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd"}, sts); err == nil {
		parts = append(parts, fmt.Sprintf("StatefulSet ready %d/%d, observedGeneration %d of %d",
			sts.Status.ReadyReplicas, sts.Status.Replicas, sts.Status.ObservedGeneration, sts.Generation))
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelCluster: "etcd"}); err == nil {
		for _, p := range pods.Items {
			parts = append(parts, fmt.Sprintf("%s: %s ready %v restarts %d", p.Name, p.Status.Phase, podReady(&p), restartCount(&p)))
		}
	}
	return strings.Join(parts, "; ")
}

func endpoint(ns string, ordinal int) string {
	scheme := "http"
	if clientTLSOf(ns) != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://etcd-%d.etcd.%s.svc:2379", scheme, ordinal, ns)
}

func endpoints(ns string, n int) string {
	var eps []string
	for i := 0; i < n; i++ {
		eps = append(eps, endpoint(ns, i))
	}
	return strings.Join(eps, ",")
}

func TestThreeMembersBecomeAvailableAndServe(t *testing.T) {
	ns := namespace(t)
	c, took := createCluster(t, ns, 3)
	t.Logf("3 members Available %s after the apply", took.Round(100*time.Millisecond))

	if _, err := etcdctl(t, "--endpoints", endpoints(ns, 3), "put", "greeting", "hello"); err != nil {
		t.Fatalf("write: %v", err)
	}
	out, err := etcdctl(t, "--endpoints", endpoints(ns, 3), "get", "greeting", "--print-value-only")
	if err != nil || strings.TrimSpace(out) != "hello" {
		t.Fatalf("read: %q %v", out, err)
	}
	out, err = etcdctl(t, "--endpoints", endpoint(ns, 0), "member", "list")
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 2 || strings.Contains(out, "true") {
		t.Fatalf("member list (want 3 started voting members): %q %v", out, err)
	}

	// The status reflects etcd: three healthy members, exactly one leader.
	eventually(t, time.Minute, "status with 3 healthy members and one leader", func() error {
		c = getCluster(t, ns)
		leaders, healthy := 0, 0
		for _, m := range c.Status.Members {
			if m.Leader {
				leaders++
			}
			if m.Healthy {
				healthy++
			}
		}
		if len(c.Status.Members) != 3 || healthy != 3 || leaders != 1 || c.Status.Leader == "" || c.Status.CurrentVersion != "3.6.16" {
			return fmt.Errorf("members %+v leader %q version %q", c.Status.Members, c.Status.Leader, c.Status.CurrentVersion)
		}
		return nil
	})
	waitCondition(t, ns, v1alpha1.ConditionReady, metav1.ConditionTrue, time.Minute)
}

func TestKilledMemberRestartsWithItsData(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	if _, err := etcdctl(t, "--endpoints", endpoints(ns, 3), "put", "durable", "yes"); err != nil {
		t.Fatalf("write: %v", err)
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd-1"}, pod); err != nil {
		t.Fatal(err)
	}
	restarts := restartCount(pod)
	if out, err := local(t, "kill-pod", ns+"/etcd-1"); err != nil {
		t.Fatalf("kill-pod: %v %s", err, out)
	}
	eventually(t, 2*time.Minute, "etcd-1 restarted and ready", func() error {
		p := &corev1.Pod{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "etcd-1"}, p); err != nil {
			return err
		}
		if restartCount(p) <= restarts || !podReady(p) {
			return fmt.Errorf("restarts %d ready %v", restartCount(p), podReady(p))
		}
		return nil
	})
	// A serializable read is answered from the member's own data.
	out, err := etcdctl(t, "--endpoints", endpoint(ns, 1), "get", "durable", "--print-value-only", "--consistency=s")
	if err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("the restarted member lost its data: %q %v", out, err)
	}
	waitCondition(t, ns, v1alpha1.ConditionReady, metav1.ConditionTrue, time.Minute)
}

func TestClusterServesWhileTheOperatorIsStopped(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	if out, err := local(t, "operator", "stop"); err != nil {
		t.Fatalf("operator stop: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := local(t, "operator", "start"); err != nil {
			t.Errorf("operator start: %v %s", err, out)
		}
	})
	for i := 0; i < 10; i++ {
		key := fmt.Sprintf("k%d", i)
		if _, err := etcdctl(t, "--endpoints", endpoints(ns, 3), "put", key, "v"); err != nil {
			t.Fatalf("write %s without the operator: %v", key, err)
		}
	}
	// A member that dies while no operator runs comes back through Kubernetes alone.
	if out, err := local(t, "kill-pod", ns+"/etcd-0"); err != nil {
		t.Fatalf("kill-pod: %v %s", err, out)
	}
	eventually(t, 2*time.Minute, "reads from every member without the operator", func() error {
		for i := 0; i < 3; i++ {
			out, err := etcdctl(t, "--endpoints", endpoint(ns, i), "get", "k9", "--print-value-only")
			if err != nil || strings.TrimSpace(out) != "v" {
				return fmt.Errorf("member %d: %q %v", i, out, err)
			}
		}
		return nil
	})
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

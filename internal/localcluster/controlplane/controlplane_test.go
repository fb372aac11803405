package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// binDirs returns the folders of the Kubernetes and etcd binaries, building what is missing
// with the repository's hack scripts (cached; the first build takes minutes).
func binDirs(t *testing.T) (kube, etcd string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/etcd-pilot/etcd-pilot\n") {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatalf("no go.mod of github.com/etcd-pilot/etcd-pilot above %s", wd)
		}
		root = parent
	}
	build := func(script string, args ...string) string {
		cmd := exec.Command(filepath.Join(root, script), args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", script, args, err)
		}
		return strings.TrimSpace(string(out))
	}
	kube = build("hack/build-kube.sh", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
	etcd = build("hack/build-etcd.sh", "3.6.16")
	return kube, etcd
}

// TestControlPlane starts the control plane and checks that each component does its job: the
// API server serves the kubeconfig's admin, the controller-manager creates a StatefulSet's
// pods, the scheduler binds them to a Node, and the node lifecycle controller marks a node that
// stops reporting not ready within the short grace period. Stop must leave no process behind.
func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	kube, etcd := binDirs(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	cp, err := Start(ctx, Config{Dir: dir, KubeBinDir: kube, EtcdBinDir: etcd, Progress: func(msg string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), msg) }})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()

	// The kubeconfig on disk works on its own (certificate authority and token).
	restCfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restCfg)

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "fake-node", Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	// The status goes in with the Create, as the kubelet registers a node: the API server keeps
	// a new Node's status (only updates of the main resource drop it). A separate UpdateStatus
	// carrying the created resourceVersion raced the controller-manager, whose TTL controller
	// annotates and whose node lifecycle controller taints every new Node at once, and failed
	// with a conflict now and then.
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if readyStatus(created) != corev1.ConditionTrue {
		t.Fatalf("the created node is not Ready, so going NotReady would prove nothing: %+v", created.Status.Conditions)
	}
	// The node lifecycle controller taints a new node not-ready until it sees it Ready; a
	// fake node renews nothing, so the pods tolerate that.
	tolerations := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}

	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](2),
			ServiceName:         "web",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: tolerations,
					Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/none:1"}},
				},
			},
		},
	}
	if _, err := client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "fake-node" {
				bound++
			}
		}
		return bound == 2, nil
	})
	if err != nil {
		t.Fatalf("StatefulSet pods not created and scheduled: %v\ncontroller-manager:\n%s\nscheduler:\n%s", err,
			TailFile(filepath.Join(dir, "logs", "kube-controller-manager.log"), 20), TailFile(filepath.Join(dir, "logs", "kube-scheduler.log"), 20))
	}
	t.Logf("%5.1fs StatefulSet pods created and scheduled", time.Since(start).Seconds())

	// No kubelet renews the fake node's lease: the node lifecycle controller must mark it
	// Unknown within the grace period (20s) plus a monitor period or two.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "fake-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := readyStatus(n)
		return s != "" && s != corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("node never went NotReady: %v", err)
	}
	t.Logf("%5.1fs silent node marked not ready", time.Since(start).Seconds())

	pids := []int{}
	for _, p := range cp.Processes() {
		pids = append(pids, p.Pid())
	}
	cp.Stop()
	stopped = true
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			out, _ := exec.Command("ps", "-o", "pid,stat,cmd", "-p", fmt.Sprint(pid)).CombinedOutput()
			t.Errorf("process %d still exists after Stop:\n%s", pid, out)
		}
	}
	select {
	case err := <-cp.Failed():
		t.Errorf("a component failed: %v", err)
	default:
	}
}

// readyStatus returns the status of n's Ready condition, "" when it has none.
func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

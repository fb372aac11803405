package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// operatorCrashes counts the restarts of the operator's containers in its current pods
// (restartOperator replaces the pods, so the count starts from zero after it).
func operatorCrashes(t *testing.T) int {
	t.Helper()
	n := 0
	for _, p := range operatorPods(t) {
		for _, cs := range p.Status.ContainerStatuses {
			n += int(cs.RestartCount)
		}
	}
	return n
}

// restartOperator restarts the operator with ETCD_PILOT_FAULT_AFTER set to after ("" for
// none): it then exits right after each such membership step, and is restarted.
func restartOperator(t *testing.T, after string) {
	t.Helper()
	logOperatorIfFailed(t)
	if out, err := local(t, "operator", "stop"); err != nil {
		t.Fatalf("operator stop: %v %s", err, out)
	}
	args := []string{"operator", "start", "--clear-env"}
	if after != "" {
		args = []string{"operator", "start", "--env", "ETCD_PILOT_FAULT_AFTER=" + after}
	}
	if out, err := local(t, args...); err != nil {
		t.Fatalf("operator start: %v %s", err, out)
	}
}

// TestOperatorKilledBetweenStepsConverges kills the operator right after each step of a
// scale-out and of a scale-in (a fault point per step kind), while a client writes. Every
// change must still complete, with quorum held, at most one learner, and no acknowledged
// write lost.
func TestOperatorKilledBetweenStepsConverges(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 3)
	scaleTo(t, ns, 3)
	t.Cleanup(func() { restartOperator(t, "") })
	w := startWriter(t, ns, 4)
	s := startSampler(t, ns)
	rounds := []struct{ out, in string }{
		{"RecordIntent", "RecordIntent"},
		{"AddLearner", "RemoveMember"},
		{"ScaleStatefulSet", "ScaleStatefulSet"},
		{"PromoteLearner", "DeletePVC"},
		{"ClearIntent", "ClearIntent"},
	}
	for _, r := range rounds {
		for _, step := range []struct {
			fault string
			n     int32
		}{{r.out, 4}, {r.in, 3}} {
			restartOperator(t, step.fault)
			took := scaleTo(t, ns, step.n)
			if got := operatorCrashes(t); got == 0 {
				t.Fatalf("scaling to %d never reached the fault point after %s", step.n, step.fault)
			} else {
				t.Logf("scaled to %d in %s with the operator killed %d times after %s", step.n, took.Round(100*time.Millisecond), got, step.fault)
			}
		}
	}
	restartOperator(t, "")
	s.finish(t)
	w.finish(t, ns, 3)
}

// TestOperatorKilledBetweenRestoreStepsConverges restores a backup into a new cluster
// (spec.bootstrap) with the operator killed right after each step of one restore step kind:
// every restore still forms one cluster with the snapshot's keys and revision.
func TestOperatorKilledBetweenRestoreStepsConverges(t *testing.T) {
	ns := namespace(t)
	createCluster(t, ns, 1)
	t.Cleanup(func() { restartOperator(t, "") })
	cli := etcdClient(t, ns, 1)
	defer cli.Close()
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	createClaim(t, ns, "backups")
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "etcd", Destination: &v1alpha1.BackupDestination{
			PersistentVolumeClaim: &v1alpha1.PVCDestination{ClaimName: "backups"}}}}
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the backup succeeded", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Status.Phase != v1alpha1.BackupSucceeded {
			return fmt.Errorf("phase %q", b.Status.Phase)
		}
		return nil
	})

	for i, fault := range []string{"BeginRestore", "CreateClaim", "RunRestorePod", "FinishRestore", "CleanUpRestore"} {
		restartOperator(t, fault)
		name := fmt.Sprintf("restored-%d", i)
		start := time.Now()
		r := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(3)), Bootstrap: &v1alpha1.BootstrapSpec{FromBackup: &v1alpha1.BackupReference{Name: b.Name}}}}
		if err := k8s.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Minute, name+" restored, formed, and its restore pods gone", func() error {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(r), r); err != nil {
				return err
			}
			if a := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionAvailable); a == nil || a.Status != metav1.ConditionTrue {
				return fmt.Errorf("Available %+v, restore %+v", a, r.Status.Restore)
			}
			pods := &corev1.PodList{}
			if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "restore", "etcdpilot.io/cluster": name}); err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d restore pods remain", len(pods.Items))
			}
			return nil
		})
		got := operatorCrashes(t)
		if got == 0 {
			t.Fatalf("restoring %s never reached the fault point after %s", name, fault)
		}
		rc := namedClient(t, ns, name, 3)
		keys, rev := keysAt(t, rc, 0)
		rc.Close()
		// No write after the backup: the snapshot is at the source's revision now.
		want, srcRev := keysAt(t, cli, 0)
		sameKeys(t, keys, want)
		if rev != srcRev {
			t.Fatalf("%s is at revision %d, the source at %d", name, rev, srcRev)
		}
		t.Logf("%s restored in %s with the operator killed %d times after %s", name, time.Since(start).Round(100*time.Millisecond), got, fault)
	}
	restartOperator(t, "")
}

// namedClient is an etcd client of the first n members of cluster name in ns.
func namedClient(t testing.TB, ns, name string, n int) *clientv3.Client {
	t.Helper()
	var eps []string
	for k := 0; k < n; k++ {
		eps = append(eps, fmt.Sprintf("http://%s-%d.%s.%s.svc:2379", name, k, name, ns))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialName)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

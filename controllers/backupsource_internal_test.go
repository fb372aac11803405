package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
)

// backupFake is three voters etcd-0..2 (IDs 1..3) led by etcd-0, which committed index 100;
// each member has applied up to applied[k].
func backupFake(applied [3]uint64) *etcd.Fake {
	f := &etcd.Fake{State: etcd.Cluster{ClusterID: 7}, Statuses: map[string]etcd.MemberStatus{}}
	for k := uint64(0); k < 3; k++ {
		ep := fmt.Sprintf("http://etcd-%d.etcd.ns.svc:2379", k)
		f.State.Members = append(f.State.Members, etcd.Member{ID: k + 1, Name: fmt.Sprintf("etcd-%d", k), ClientURLs: []string{ep}})
		f.Statuses[ep] = etcd.MemberStatus{ID: k + 1, ClusterID: 7, Leader: 1, RaftIndex: 100, AppliedIndex: applied[k]}
	}
	return f
}

// TestBackupSourceWaitsForTheCommittedIndex (issue 25, path 6): no member has applied the
// leader's committed index read at the start; the pass reads their status again (keeping that
// index) and takes the first follower that applied it, or says which member applied what.
func TestBackupSourceWaitsForTheCommittedIndex(t *testing.T) {
	ctx := context.Background()
	f := backupFake([3]uint64{95, 90, 99})
	r := &EtcdBackupReconciler{DialEtcd: etcd.FakeDialer(f), EtcdTimeout: time.Second}
	start := observeFake(t, f)
	if _, _, behind := backupplan.PickSource(*start, 0); !behind {
		t.Fatal("PickSource does not say that waiting may help")
	}
	// Meanwhile the leader committed more, which etcd-1 applies: the backup still needs only
	// index 100, read at its start.
	go func() {
		time.Sleep(3 * backupCatchUpPoll)
		f.Edit(func(_ *etcd.Cluster, sts map[string]etcd.MemberStatus) {
			for ep, st := range sts {
				st.RaftIndex = 300
				if strings.Contains(ep, "etcd-1.") {
					st.AppliedIndex = 120
				}
				sts[ep] = st
			}
		})
	}()
	src, why := r.awaitApplied(ctx, *start, nil)
	if why != "" || src.Member.Name != "etcd-1" || src.Committed != 100 {
		t.Fatalf("got %s (committed %d), why %q; want etcd-1 at committed index 100", src.Member.Name, src.Committed, why)
	}

	f = backupFake([3]uint64{95, 90, 99})
	r.DialEtcd = etcd.FakeDialer(f)
	began := time.Now()
	src, why = r.awaitApplied(ctx, *observeFake(t, f), nil)
	if src.Member.Name != "" || !strings.Contains(why, "etcd-2 applied up to index 99, short of the leader's committed index 100") ||
		!strings.Contains(why, "after waiting up to") {
		t.Fatalf("nobody catches up: got %s, why %q", src.Member.Name, why)
	}
	if d := time.Since(began); d < backupCatchUpTimeout || d > backupCatchUpTimeout+2*time.Second {
		t.Fatalf("waited %s, want about %s", d, backupCatchUpTimeout)
	}
}

// TestBackupPodChecksTheMember: the pod that writes to a claim is told which member and
// which applied index to expect, and a report from another member is not a success.
func TestBackupPodChecksTheMember(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd"}}
	d := &v1alpha1.PVCDestination{ClaimName: "backups"}
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", CreationTimestamp: metav1.Now()}}
	r := &EtcdBackupReconciler{Timeout: time.Hour}
	src := backupplan.Source{Member: etcd.Member{ID: 2, Name: "etcd-1"}, Endpoint: "http://etcd-1.etcd.ns.svc:2379", Committed: 100}
	r.running(b, time.Now(), src, "pvc://backups/x")
	if b.Status.MemberID != "2" || b.Status.CommittedIndex != 100 || b.Status.Member != "etcd-1" {
		t.Fatalf("status records %+v", b.Status)
	}
	args := strings.Join(r.backupPod(b, c, d, src).Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--member-id=2") || !strings.Contains(args, "--applied-index=100") {
		t.Fatalf("the backup pod is not told what to expect: %s", args)
	}

	rep, _ := json.Marshal(backup.Report{MemberID: "3", Member: "etcd-1", Size: 10, SHA256: "x", Revision: 5})
	pod := r.backupPod(b, c, d, src)
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: backupContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(rep)}}}}
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(pod).Build()
	if _, err := r.takeToClaim(ctx, b, c, d, time.Now()); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionComplete)
	if b.Status.Phase == v1alpha1.BackupSucceeded || cond == nil || !strings.Contains(cond.Message, `from member "3", not from member 2`) {
		t.Fatalf("a snapshot of another member: phase %s, %+v", b.Status.Phase, cond)
	}
}

package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// defragFixture is three members etcd-0..2 (IDs 1..3) led by etcd-0, each at raft and applied
// index 1000 with a 100 MiB database, behind a fake etcd, and an EtcdCluster in a fake API.
func defragFixture(t *testing.T) (*EtcdClusterReconciler, *etcd.Fake, *v1alpha1.EtcdCluster) {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd"}}
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(c).Build()
	f := &etcd.Fake{State: etcd.Cluster{ClusterID: 7}, Statuses: map[string]etcd.MemberStatus{}}
	for k := uint64(0); k < 3; k++ {
		ep := fmt.Sprintf("http://etcd-%d.etcd.ns.svc:2379", k)
		f.State.Members = append(f.State.Members, etcd.Member{ID: k + 1, Name: fmt.Sprintf("etcd-%d", k), ClientURLs: []string{ep}})
		f.Statuses[ep] = etcd.MemberStatus{ID: k + 1, ClusterID: 7, Leader: 1, RaftIndex: 1000, AppliedIndex: 1000, DBSize: 100 << 20, DBSizeInUse: 10 << 20}
	}
	r := &EtcdClusterReconciler{Client: cl, Scheme: s, Recorder: events.NewFakeRecorder(100), DialEtcd: etcd.FakeDialer(f)}
	r.init()
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	return r, f, c
}

// observe reads the fake as a pass would.
func observeFake(t *testing.T, f *etcd.Fake) *etcd.Observed {
	t.Helper()
	ctx := context.Background()
	cl, _ := f.MemberList(ctx)
	o := &etcd.Observed{Cluster: cl, Status: map[uint64]etcd.MemberStatus{}, StatusErr: map[uint64]error{}}
	for _, m := range cl.Members {
		if st, err := f.Status(ctx, m.ClientURLs[0]); err == nil {
			o.Status[m.ID] = st
		} else {
			o.StatusErr[m.ID] = err
		}
	}
	return o
}

func storedRecord(t *testing.T, r *EtcdClusterReconciler, c *v1alpha1.EtcdCluster) (string, bool) {
	t.Helper()
	got := &v1alpha1.EtcdCluster{}
	if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	raw, ok := got.Annotations[observe.DefragmentationAnnotation]
	return raw, ok
}

// TestDefragmentationIsRecordedBeforeItStarts (issue 25, path 5): the executor stores the
// defragmentation on the EtcdCluster before it calls etcd, so a call that outlives its
// deadline (or an operator that stops during it) leaves a record; while the record stands and
// the member's applied index stays frozen, the gate refuses to take a second member down;
// once etcd shows the member moving again, the next pass removes the record.
func TestDefragmentationIsRecordedBeforeItStarts(t *testing.T) {
	ctx := context.Background()
	r, f, c := defragFixture(t)
	ep1 := "http://etcd-1.etcd.ns.svc:2379"
	step := plan.Step{Kind: plan.Defragment, Member: "etcd-1", ID: 2, Reason: v1alpha1.ReasonDefragmenting}

	// The call outlives its client deadline: etcd goes on defragmenting.
	f.ErrDefragment = map[string]error{ep1: context.DeadlineExceeded}
	stale := c.DeepCopy()
	if err := r.exec.ExecuteMembership(ctx, c, render.Topology{}, membership.Observation{Etcd: observeFake(t, f)}, step, &r.compacted); err == nil {
		t.Fatal("a defragmentation past its deadline is no error")
	}
	raw, ok := storedRecord(t, r, c)
	if !ok {
		t.Fatal("no record of the defragmentation that may still run")
	}
	rec := plan.ParseDefragmentation(raw)
	if rec.Unreadable != "" || rec.Member != "etcd-1" || rec.ID != 2 || rec.AppliedIndex != 1000 || rec.DBSize != 100<<20 || rec.Since.IsZero() {
		t.Fatalf("recorded %s", raw)
	}

	// The next pass (after an operator restart, say): the cluster committed up to 1200, which
	// etcd-1 knows but cannot apply. Its committed index keeps up; it still counts as down.
	f.Edit(func(_ *etcd.Cluster, sts map[string]etcd.MemberStatus) {
		for ep, st := range sts {
			st.RaftIndex, st.AppliedIndex = 1200, 1200
			if ep == ep1 {
				st.AppliedIndex = 1000
			}
			sts[ep] = st
		}
	})
	got := getFresh(t, r, c)
	d, why, err := defragmentation(ctx, r, got, observeFake(t, f))
	if err != nil || d == nil || !strings.Contains(why, "applied index stays at 1000 while the leader committed 1200") {
		t.Fatalf("a frozen member's record: %+v %q %v", d, why, err)
	}
	mo := membership.Observation{Etcd: observeFake(t, f), StatefulSet: "etcd", Desired: 3, StsReplicas: 3, Bootstrapped: true, LearnerMaxLag: membership.LearnerMaxLag}
	for k := int32(0); k < 3; k++ {
		mo.Pods = append(mo.Pods, plan.Pod{Name: fmt.Sprintf("etcd-%d", k), Ordinal: k, Exists: true, Running: true, Ready: true, NodeReady: true, PVCExists: true})
	}
	ev := mo.Evidence()
	ev.Defragmentation = d
	for _, s := range []plan.Step{
		{Kind: plan.Defragment, Member: "etcd-2", ID: 3, Reason: v1alpha1.ReasonDefragmenting},
		{Kind: plan.DeletePod, Member: "etcd-2", Reason: v1alpha1.ReasonRollingOut},
	} {
		if g := plan.Gate(s, ev); g.Kind != plan.Wait || !strings.Contains(g.Message, "DefragmentationCountsAsDisruption") {
			t.Fatalf("%s %s while etcd-1 is frozen: %+v", s.Kind, s.Member, g)
		}
	}

	// A second operator replica deciding from a stale read stores nothing and calls nothing.
	f.ErrDefragment = nil
	calls := f.CallCount("Defragment")
	if err := r.exec.ExecuteMembership(ctx, stale, render.Topology{}, membership.Observation{Etcd: observeFake(t, f)}, plan.Step{Kind: plan.Defragment, Member: "etcd-2", ID: 3,
		Reason: v1alpha1.ReasonDefragmenting}, &r.compacted); !apierrors.IsConflict(err) {
		t.Fatalf("a defragmentation decided from a stale read: %v, want a conflict", err)
	}
	if f.CallCount("Defragment") != calls {
		t.Fatal("etcd was called although the record could not be stored")
	}

	// etcd-1's applied index moves while it still holds its database (an AuthStatus entry
	// needs none): the record stands until it serves a read.
	f.Edit(func(_ *etcd.Cluster, sts map[string]etcd.MemberStatus) {
		st := sts[ep1]
		st.AppliedIndex = 1001
		sts[ep1] = st
	})
	f.ErrReads = map[string]error{ep1: context.DeadlineExceeded}
	got = getFresh(t, r, c)
	if d, why, err := defragmentation(ctx, r, got, observeFake(t, f)); err != nil || d == nil || !strings.Contains(why, "serves no read of its database yet") {
		t.Fatalf("a member that applies an entry while defragmenting: %+v %q %v", d, why, err)
	}
	if _, ok := storedRecord(t, r, c); !ok {
		t.Fatal("the record went while the member held its database")
	}

	// etcd-1 applies again and serves reads: the record goes.
	f.ErrReads = nil
	f.Edit(func(_ *etcd.Cluster, sts map[string]etcd.MemberStatus) {
		st := sts[ep1]
		st.AppliedIndex = 1200
		sts[ep1] = st
	})
	got = getFresh(t, r, c)
	if d, why, err := defragmentation(ctx, r, got, observeFake(t, f)); err != nil || d != nil || why != "" {
		t.Fatalf("a member that applies again: %+v %q %v", d, why, err)
	}
	if raw, ok := storedRecord(t, r, c); ok {
		t.Fatalf("the record of a finished defragmentation stays: %s", raw)
	}

	// A call that returns successfully removes its own record.
	got = getFresh(t, r, c)
	if err := r.exec.ExecuteMembership(ctx, got, render.Topology{}, membership.Observation{Etcd: observeFake(t, f)}, step, &r.compacted); err != nil {
		t.Fatal(err)
	}
	if raw, ok := storedRecord(t, r, c); ok {
		t.Fatalf("the record of a successful defragmentation stays: %s", raw)
	}
	if f.CallCount("Defragment") != calls+1 {
		t.Fatalf("Defragment called %d times, want %d", f.CallCount("Defragment"), calls+1)
	}
}

// defragmentation is a pass's look at the defragmentation record, as reconcileMembership
// takes it: the record read with the EtcdCluster, removed by the executor when etcd shows it
// over; one that stands is returned with what it waits for.
func defragmentation(ctx context.Context, r *EtcdClusterReconciler, c *v1alpha1.EtcdCluster, e *etcd.Observed) (*plan.Defragmentation, string, error) {
	// The observation asks the recorded member for a read of its database (observe.Members).
	cl, err := r.DialEtcd(ctx, nil, nil)
	if err != nil {
		return nil, "", err
	}
	observe.ReadsOfDefragmented(ctx, cl, time.Second, c, render.Topology{ClientScheme: "http", Service: "etcd", Namespace: "ns", ClientPort: 2379}, e)
	d, why, over := observe.Defragmentation(c, e)
	if !over {
		return d, why, nil
	}
	if err := r.exec.EndDefragmentation(ctx, c, d, why); err != nil {
		return nil, "", err
	}
	return nil, "", nil
}

func getFresh(t *testing.T, r *EtcdClusterReconciler, c *v1alpha1.EtcdCluster) *v1alpha1.EtcdCluster {
	t.Helper()
	got := &v1alpha1.EtcdCluster{}
	if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	return got
}

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// BenchmarkTimeToAvailable measures, on the local cluster, the time from creating an
// EtcdCluster to its Available condition, for 3, 5 and 7 members, and reports the local
// cluster's own start time. Run it with `make bench-e2e` (one iteration per size: each
// iteration is a whole cluster).
func BenchmarkTimeToAvailable(b *testing.B) {
	for _, n := range []int32{3, 5, 7} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var total time.Duration
			sums := map[string]float64{}
			for i := 0; i < b.N; i++ {
				ns := namespace(b)
				tl := startTimeline(b, ns)
				_, took := createCluster(b, ns, n)
				total += took
				tl.mark("Available (seen by the benchmark)")
				tl.finish(b, fmt.Sprintf("%d members to Available", n))
				tl.phases(b, sums, map[string]string{
					"s-statefulset": "StatefulSet created",
					"s-first-pod":   "pod etcd-0 created",
					"s-all-serving": fmt.Sprintf("all %d member pods serving", n),
					"s-leader":      "leader elected",
					"s-all-voters":  fmt.Sprintf("%d started voters", n),
				})
				if d, ok := tl.lastWithPrefix("pod etcd-"); ok {
					sums["s-last-pod-event"] += d.Seconds()
				}
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-to-available")
			reportPhases(b, sums)
			b.ReportMetric(upStart.Seconds(), "s-local-up")
		})
	}
}

// BenchmarkMembershipStep measures one scale-out step (3 to 4 members: learner added, pod
// started, caught up, promoted) and one replacement of a member whose volume was deleted, on
// the local cluster. Run it with `make bench-e2e`.
func BenchmarkMembershipStep(b *testing.B) {
	b.Run("scale-out-one-member", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			ns := namespace(b)
			createCluster(b, ns, 3)
			scaleTo(b, ns, 3)
			total += scaleTo(b, ns, 4)
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s-per-step")
	})
	// replace-member: a member lost from a running cluster. replace-member-just-formed: the
	// same right after the cluster formed, while etcd still refuses member adds (see
	// etcdHealthInterval), so the replaced pod runs etcd before its learner exists.
	for _, settled := range []bool{true, false} {
		name := "replace-member"
		if !settled {
			name = "replace-member-just-formed"
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			sums := map[string]float64{}
			for i := 0; i < b.N; i++ {
				ns := namespace(b)
				createCluster(b, ns, 3)
				scaleTo(b, ns, 3)
				if settled {
					waitMembersRunningFor(b, ns, 3, etcdHealthInterval+2*time.Second)
				}
				tl := startTimeline(b, ns)
				waitTimelineSettled(b, tl, 3)
				tl.setOrigin(time.Now())
				tl.mark("claim and pod etcd-1 deleted")
				total += replaceByDeletingVolume(b, ns, "etcd-1")
				tl.mark("replaced (seen by the benchmark)")
				tl.finish(b, "replacing etcd-1 whose volume was deleted")
				tl.phases(b, sums, map[string]string{
					"s-removed":  "member etcd-1 (",
					"s-learner":  "learner added",
					"s-promoted": "learner promoted",
				})
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-per-replacement")
			reportPhases(b, sums)
		})
	}
}

// etcdHealthInterval is etcd's HealthInterval (5 s, fixed in etcdserver): with
// strict reconfiguration checks on (the default), etcd refuses a member add until the member
// that takes it has been connected to a quorum of voters for that long.
const etcdHealthInterval = 5 * time.Second

// waitMembersRunningFor waits until each of the n member pods of the cluster in ns has run its
// etcd container for at least age (container start times are whole seconds, so the margin a
// caller adds should cover one). The replacement benchmark measures what a member lost from a
// running cluster costs, not etcd's own refusal of member changes in a cluster's first
// seconds (see etcdHealthInterval), which a replacement right after formation would include.
func waitMembersRunningFor(t testing.TB, ns string, n int, age time.Duration) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("%d member pods running for %s", n, age), func() error {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name != "etcd" || cs.State.Running == nil {
					continue
				}
				if d := time.Since(cs.State.Running.StartedAt.Time); d < age {
					return fmt.Errorf("pod %s has run etcd for %s", p.Name, d.Round(100*time.Millisecond))
				}
				running++
			}
		}
		if running < n {
			return fmt.Errorf("%d of %d member pods run etcd", running, n)
		}
		return nil
	})
}

// BenchmarkUpgrade measures the upgrade of a 3-member cluster from etcd 3.5.35 to 3.6.16 while
// a client writes sequentially (500 ms per write): the upgrade's duration, the longest gap
// between acknowledged writes, and the leader changes (raft terms the writes went through).
// Run it with `make bench-e2e`.
func BenchmarkUpgrade(b *testing.B) {
	var took, gap time.Duration
	var terms, changes float64
	sums := map[string]float64{}
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		createVersioned(b, ns, "3.5.35", nil)
		tl := startTimeline(b, ns)
		waitTimelineSettled(b, tl, 3)
		run := upgrade(b, ns, "3.6.16")
		tl.setOrigin(run.start)
		tl.mark("upgraded (seen by the benchmark)")
		tl.finish(b, "upgrading 3 members from 3.5.35 to 3.6.16")
		tl.phases(b, sums, map[string]string{"s-cluster-version": "cluster version 3.6.0"})
		for _, pod := range []string{"etcd-0", "etcd-1", "etcd-2"} {
			if d, ok := tl.lastWithPrefix("etcd " + pod + " caught up"); ok {
				sums["s-"+pod+"-caught-up"] += d.Seconds()
			}
		}
		took += run.took
		gap = max(gap, run.gap)
		terms += float64(run.termChanges)
		changes += float64(run.leaderChanges)
	}
	n := float64(b.N)
	b.ReportMetric(took.Seconds()/n, "s-per-upgrade")
	b.ReportMetric(float64(gap.Milliseconds()), "ms-longest-write-gap")
	b.ReportMetric(terms/n, "leader-changes")
	b.ReportMetric(changes/n, "leader-changes-seen-by-operator")
	reportPhases(b, sums)
}

// BenchmarkTLSTimeToAvailable is BenchmarkTimeToAvailable for 3 members with peer and client
// TLS from the operator's CA (the CA and three leaves issued before the members start), and
// with authentication on as well (Available, then root, the operator's user and auth on, read
// from status.conditions: Progressing false again).
func BenchmarkTLSTimeToAvailable(b *testing.B) {
	for _, withAuth := range []bool{false, true} {
		b.Run(fmt.Sprintf("auth=%v", withAuth), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				ns := namespace(b)
				spec := v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
					TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs}}
				if withAuth {
					spec.Auth = &v1alpha1.AuthSpec{Enabled: true}
				}
				start := time.Now()
				createWith(b, ns, spec)
				if withAuth {
					// The root Secret exists from the first auth step on; Progressing stays
					// True (EnablingAuth) until etcd's auth is on.
					eventually(b, time.Minute, "the root user's Secret", func() error {
						return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.RootAuthSecretName("etcd")}, &corev1.Secret{})
					})
					waitCondition(b, ns, v1alpha1.ConditionProgressing, metav1.ConditionFalse, time.Minute)
				}
				total += time.Since(start)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-to-available")
		})
	}
}

// BenchmarkCARotation measures a CA rotation of a 3-member cluster with peer and client TLS
// from the operator's CA, from the annotation to the last member ready on the new CA alone
// (two restart rounds and the re-issue of every leaf between them), while a client writes.
func BenchmarkCARotation(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		createWith(b, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3)),
			TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, ExtraSANs: localSANs}})
		oldCAs := operatorCAs(b, ns)
		w := startWriter(b, ns, 3)
		w.waitAcked(b, 20)
		start := time.Now()
		c := getCluster(b, ns)
		patch := client.MergeFrom(c.DeepCopy())
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.AnnotationRotateCA, "bench")
		if err := k8s.Patch(context.Background(), c, patch); err != nil {
			b.Fatal(err)
		}
		waitCARotated(b, ns, oldCAs)
		total += time.Since(start)
		w.finish(b, ns, 3)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-rotation")
}

// BenchmarkPeerTLSSwitch measures turning peer TLS on and then off on a live 3-member
// cluster (three restart rounds and three peer URL moves each way), while a client writes.
func BenchmarkPeerTLSSwitch(b *testing.B) {
	var on, off time.Duration
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		createWith(b, ns, v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(3))})
		w := startWriter(b, ns, 3)
		w.waitAcked(b, 20)
		start := time.Now()
		setPeerTLS(b, ns, true)
		servesPeer(b, ns, "https")
		on += time.Since(start)
		start = time.Now()
		setPeerTLS(b, ns, false)
		servesPeer(b, ns, "http")
		off += time.Since(start)
		w.finish(b, ns, 3)
	}
	b.ReportMetric(on.Seconds()/float64(b.N), "s-peer-tls-on")
	b.ReportMetric(off.Seconds()/float64(b.N), "s-peer-tls-off")
}

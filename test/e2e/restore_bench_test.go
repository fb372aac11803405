package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/minio"
)

const (
	// restoreBenchDBSize is the database size every source member reaches before the backup.
	restoreBenchDBSize = 512 << 20
	// restoreBenchValueSize is the size of each value written: under etcd's default request
	// limit of 1.5 MiB.
	restoreBenchValueSize = 1 << 20
	// restoreBenchWriters is how many goroutines write at once.
	restoreBenchWriters = 8
	// restoreBenchTimeout bounds the restored cluster's way to Available.
	restoreBenchTimeout = 15 * time.Minute
)

// restoreBenchSpec is the spec of every cluster of the benchmark: the source, the empty one and
// the restored one differ only in the source's backup destination and the restored one's
// bootstrap. The volumes are 4Gi: a source member holds the database and as much again in
// its write-ahead log, and a restore pod stages the snapshot next to the restored database.
func restoreBenchSpec() v1alpha1.EtcdClusterSpec {
	return v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(3)), Storage: v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("4Gi"))}}
}

// BenchmarkRestoreTimeToAvailable measures, on the local cluster, what restoring a 512 MiB
// database costs over forming an empty cluster: a 3-member source cluster is filled until
// every member's database (etcd's own Status) holds at least 512 MiB in use, a one-shot
// EtcdBackup stores its snapshot in MinIO, and the source is deleted. Then each iteration
// creates an empty 3-member cluster and one with spec.bootstrap.fromObject naming the backup's
// object, and times both to Available. The restored cluster must be at the backup's revision,
// hold as many keys as were written, and agree with the source's HashKV at that revision.
//
// Metrics: empty-s and restore-s (creation to Available), backup-MiB, and the restore's
// phases as this benchmark saw them (polling every 100 ms): begin-s (creation until
// status.restore appears), restore-pods-s (until status.restore is Restored: claims, restore
// pods fetching the object and running etcdutl), formation-s (Restored until Available), and
// from the restore pods' container times (whole seconds) the slowest pod's fetch-s
// (restore-prepare: download, verify, stage) and etcdutl-s.
//
// The setup (about 512 MiB written three times over, one backup) runs once per call, outside
// the timer; run it with -benchtime=1x.
func BenchmarkRestoreTimeToAvailable(b *testing.B) {
	b.StopTimer()
	setupStart := time.Now()
	srv := minio.Start(b)
	src := namespace(b)
	spec := restoreBenchSpec()
	spec.Backup = s3Backups(b, src, srv, "@yearly", 3)
	if err := k8s.Create(context.Background(), &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: src}, Spec: spec}); err != nil {
		b.Fatal(err)
	}
	waitCondition(b, src, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	cli := etcdClient(b, src, 3)
	defer cli.Close()

	fillStart := time.Now()
	keys, sizes := fillDatabase(b, cli, src, restoreBenchDBSize)
	filled := time.Since(fillStart)
	b.Logf("source: %d values of %s in %s (%.1f MiB/s); %s", keys, mib(restoreBenchValueSize), filled.Round(100*time.Millisecond),
		float64(keys)*restoreBenchValueSize/(1<<20)/filled.Seconds(), describeSizes(sizes))

	backupStart := time.Now()
	bk := oneShotBackup(b, src, "bench")
	backupTook := time.Since(backupStart)
	b.Logf("backup: %s, revision %d, etcd %s, from %s, to Succeeded in %s", mib(bk.Status.Size), bk.Status.Revision, bk.Status.EtcdVersion,
		bk.Status.Member, backupTook.Round(100*time.Millisecond))
	wantKeys, _ := countKeysAt(b, cli, bk.Status.Revision)
	if wantKeys < int64(keys) {
		b.Fatalf("the source holds %d keys at the backup's revision %d; %d were written before it", wantKeys, bk.Status.Revision, keys)
	}
	wantHash := hashAt(b, cli, endpoint(src, 0), bk.Status.Revision)
	cli.Close()
	// The source goes before the measurements: its members, database and log would otherwise
	// share the two cores and the disk with the clusters being timed.
	deleteNamespaceAndWait(b, src)
	b.Logf("setup in %s", time.Since(setupStart).Round(time.Second))

	key := strings.TrimPrefix(bk.Status.Location, "s3://"+srv.Bucket+"/")
	var empty, restored, begin, pods, formation, fetch, etcdutl time.Duration
	for i := 0; i < b.N; i++ {
		b.StartTimer()
		ns := namespace(b)
		start := time.Now()
		if err := k8s.Create(context.Background(), &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns}, Spec: restoreBenchSpec()}); err != nil {
			b.Fatal(err)
		}
		waitCondition(b, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
		e := time.Since(start)
		empty += e
		b.Logf("empty: 3 members Available in %s", e.Round(100*time.Millisecond))

		dst := namespace(b)
		logPodsOnFailure(b, dst)
		b.StopTimer()
		s3 := *s3Backups(b, dst, srv, "@yearly", 3).Destination.S3 // the credentials Secret in dst
		b.StartTimer()
		r := restoreBenchSpec()
		r.Bootstrap = &v1alpha1.BootstrapSpec{FromObject: &v1alpha1.SnapshotObject{S3: s3, Key: key, EtcdVersion: bk.Status.EtcdVersion, SHA256: bk.Status.SHA256}}
		tl := watchRestore(b, dst, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: dst}, Spec: r})
		b.StopTimer()
		restored += tl.available
		begin += tl.restoring
		pods += tl.restored - tl.restoring
		formation += tl.available - tl.restored
		f, u := tl.slowestPod()
		fetch += f
		etcdutl += u
		tl.log(b)

		// Evidence from the restored etcd itself: the backup's revision, every key, the same
		// keyspace hash as the source's at that revision.
		waitVoters(b, dst, 3, 2*time.Minute)
		rcli := etcdClient(b, dst, 3)
		count, rev := countKeysAt(b, rcli, 0)
		if rev != bk.Status.Revision || count != wantKeys {
			b.Fatalf("the restored cluster is at revision %d with %d keys; the backup at revision %d with %d", rev, count, bk.Status.Revision, wantKeys)
		}
		for m := 0; m < 3; m++ {
			if h := hashAt(b, rcli, endpoint(dst, m), bk.Status.Revision); h != wantHash {
				b.Fatalf("etcd-%d of the restored cluster hashes the keyspace at revision %d to %x; the source to %x", m, bk.Status.Revision, h, wantHash)
			}
		}
		rcli.Close()
		b.Logf("restored: revision %d, %d keys, HashKV %x on every member, as the source at the backup", rev, count, wantHash)
	}
	n := float64(b.N)
	b.ReportMetric(empty.Seconds()/n, "empty-s")
	b.ReportMetric(restored.Seconds()/n, "restore-s")
	b.ReportMetric(float64(bk.Status.Size)/(1<<20), "backup-MiB")
	b.ReportMetric(begin.Seconds()/n, "begin-s")
	b.ReportMetric(pods.Seconds()/n, "restore-pods-s")
	b.ReportMetric(formation.Seconds()/n, "formation-s")
	b.ReportMetric(fetch.Seconds()/n, "fetch-s")
	b.ReportMetric(etcdutl.Seconds()/n, "etcdutl-s")
	b.ReportMetric(0, "ns/op") // the whole iteration (two clusters) is not a figure of its own
}

// fillDatabase writes values of restoreBenchValueSize under new keys, restoreBenchWriters at
// a time, until every member of the 3-member cluster in ns reports at least target bytes of
// its database in use. It returns the number of keys written (one put each) and the sizes.
func fillDatabase(t testing.TB, cli *clientv3.Client, ns string, target int64) (int, map[string]memberSize) {
	t.Helper()
	value := strings.Repeat("v", restoreBenchValueSize)
	deadline := time.Now().Add(10 * time.Minute)
	written := 0
	for {
		sizes, err := readSizes(cli, ns, 3)
		if err != nil {
			t.Fatal(err)
		}
		least := int64(target)
		for _, s := range sizes {
			least = min(least, s.inUse)
		}
		if least >= target {
			return written, sizes
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d values the members' databases are %s, short of %s", written, describeSizes(sizes), mib(target))
		}
		// What the least filled member lacks, and a little more: a member applies and commits
		// its backend a moment after the put is acknowledged.
		batch := int((target-least)/restoreBenchValueSize) + restoreBenchWriters
		var next atomic.Int64
		next.Store(int64(written))
		end := int64(written + batch)
		var wg sync.WaitGroup
		errs := make(chan error, restoreBenchWriters)
		for w := 0; w < restoreBenchWriters; w++ {
			wg.Go(func() {
				for {
					k := next.Add(1) - 1
					if k >= end {
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := cli.Put(ctx, fmt.Sprintf("/bench/fill/%06d", k), value)
					cancel()
					if err != nil {
						errs <- fmt.Errorf("put /bench/fill/%06d: %w", k, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		written += batch
	}
}

// hashAt is the HashKV of the member at ep at revision rev.
func hashAt(t testing.TB, cli *clientv3.Client, ep string, rev int64) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := cli.HashKV(ctx, ep, rev)
	if err != nil {
		t.Fatalf("HashKV of %s at revision %d: %v", ep, rev, err)
	}
	return resp.Hash
}

// countKeysAt counts the keys of the cluster at revision rev (0: the newest) without reading
// their values, and returns the revision of the answer.
func countKeysAt(t testing.TB, cli *clientv3.Client, rev int64) (int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithCountOnly()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(ctx, "\x00", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count, resp.Header.Revision
}

// deleteNamespaceAndWait deletes ns and waits until its pods are gone.
func deleteNamespaceAndWait(t testing.TB, ns string) {
	t.Helper()
	err := k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the pods of namespace "+ns+" are gone", func() error {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods remain", len(pods.Items))
		}
		return nil
	})
}

// restoreTimeline is what the benchmark saw of one restore, as offsets from the creation of
// the EtcdCluster: restoring, restored and available when it first saw status.restore,
// status.restore Restored and Available True (polling every 100 ms); the restore pods as last
// seen; status.restore at the end.
type restoreTimeline struct {
	created                        time.Time
	restoring, restored, available time.Duration
	pods                           map[string]*corev1.Pod
	firstPod                       map[string]time.Duration
	status                         *v1alpha1.RestoreStatus
}

// watchRestore creates c and polls it and its restore pods every 100 ms until it is Available.
func watchRestore(t testing.TB, ns string, c *v1alpha1.EtcdCluster) *restoreTimeline {
	t.Helper()
	tl := &restoreTimeline{created: time.Now(), pods: map[string]*corev1.Pod{}, firstPod: map[string]time.Duration{}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, restoreBenchTimeout, "the restored cluster is Available", func() error {
		now := time.Since(tl.created)
		list := &corev1.PodList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/component": "restore"}); err != nil {
			return err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if _, ok := tl.firstPod[p.Name]; !ok {
				tl.firstPod[p.Name] = now
			}
			tl.pods[p.Name] = p
		}
		got := getCluster(t, ns)
		tl.status = got.Status.Restore
		if r := got.Status.Restore; r != nil {
			if tl.restoring == 0 {
				tl.restoring = now
			}
			switch {
			case r.Phase == v1alpha1.RestoreFailed:
				t.Fatalf("the restore failed: %+v", r)
			case r.Phase == v1alpha1.RestoreRestored && tl.restored == 0:
				tl.restored = now
			}
		}
		a := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAvailable)
		if a == nil || a.Status != metav1.ConditionTrue {
			return fmt.Errorf("Available %+v, status.restore %+v", a, got.Status.Restore)
		}
		tl.available = now
		return nil
	})
	if tl.restored == 0 {
		tl.restored = tl.available // Restored and Available seen in the same poll
	}
	return tl
}

// containerSpan is one container's run, from its terminated state (whole seconds).
func containerSpan(statuses []corev1.ContainerStatus, name string) (start, end time.Time, ok bool) {
	for _, cs := range statuses {
		if cs.Name == name && cs.State.Terminated != nil {
			return cs.State.Terminated.StartedAt.Time, cs.State.Terminated.FinishedAt.Time, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// slowestPod is the longest restore-prepare and the longest etcdutl run among the restore pods.
func (tl *restoreTimeline) slowestPod() (fetch, etcdutl time.Duration) {
	for _, p := range tl.pods {
		if s, e, ok := containerSpan(p.Status.InitContainerStatuses, "prepare"); ok {
			fetch = max(fetch, e.Sub(s))
		}
		if s, e, ok := containerSpan(p.Status.InitContainerStatuses, "restore"); ok {
			etcdutl = max(etcdutl, e.Sub(s))
		}
	}
	return fetch, etcdutl
}

// log prints the timeline: the phases seen, status.restore's own times, and each restore pod's
// containers (whole seconds, as the kubelet reports them), as offsets from the creation.
func (tl *restoreTimeline) log(t testing.TB) {
	t.Helper()
	at := func(x time.Time) string {
		if x.IsZero() {
			return "?"
		}
		return fmt.Sprintf("+%.0fs", x.Sub(tl.created.Truncate(time.Second)).Seconds())
	}
	d := func(x time.Duration) string { return fmt.Sprintf("+%.1fs", x.Seconds()) }
	t.Logf("restore timeline (from the creation of the EtcdCluster):")
	t.Logf("  %-8s status.restore seen (Restoring)", d(tl.restoring))
	var names []string
	for n := range tl.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := tl.pods[n]
		line := fmt.Sprintf("  %-8s pod %s created (%s), last seen %s:", d(tl.firstPod[n]), n, at(p.CreationTimestamp.Time), p.Status.Phase)
		for _, c := range []struct {
			name     string
			statuses []corev1.ContainerStatus
		}{{"prepare", p.Status.InitContainerStatuses}, {"restore", p.Status.InitContainerStatuses}, {"finish", p.Status.ContainerStatuses}} {
			if s, e, ok := containerSpan(c.statuses, c.name); ok {
				line += fmt.Sprintf(" %s %s..%s", c.name, at(s), at(e))
			}
		}
		t.Log(line)
	}
	t.Logf("  %-8s status.restore seen Restored", d(tl.restored))
	t.Logf("  %-8s Available", d(tl.available))
	if r := tl.status; r != nil {
		var done time.Time
		if r.CompletionTime != nil {
			done = r.CompletionTime.Time
		}
		t.Logf("  status.restore: startTime %s, completionTime %s, attempts %d, revision %d", at(r.StartTime.Time), at(done), r.Attempts, r.Revision)
	}
}

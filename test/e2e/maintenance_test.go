package e2e

// The maintenance planner end to end: defragmentation of a fragmented database under write
// load, and the recovery from a NOSPACE alarm. The sizes, the alarms and the leader are read
// from etcd's own Status and AlarmList; the operator's status is only logged.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// mib formats a byte count for logs.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// memberSize is one member's answer to Status.
type memberSize struct {
	id            uint64
	dbSize, inUse int64
	leader        uint64
}

// readSizes asks each of the n members of the cluster in ns for its Status, by name (etcd-0,
// ...); it fails when one does not answer.
func readSizes(cli *clientv3.Client, ns string, n int) (map[string]memberSize, error) {
	out := map[string]memberSize{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, endpoint(ns, i))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("status of etcd-%d: %w", i, err)
		}
		out[fmt.Sprintf("etcd-%d", i)] = memberSize{id: st.Header.MemberId, dbSize: st.DbSize, inUse: st.DbSizeInUse, leader: st.Leader}
	}
	return out, nil
}

func describeSizes(s map[string]memberSize) string {
	var parts []string
	for name, m := range s {
		parts = append(parts, fmt.Sprintf("%s %s (%s in use)", name, mib(m.dbSize), mib(m.inUse)))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// sizeWatch asks every member for its Status every 100 ms, each member on its own, and
// remembers when each one's database was last seen at least at a threshold and first seen
// below it, and the leader each raft term had. The times bracket the shrink: a request sent
// at lastBig still found the database large, an answer received at firstSmall found it small,
// so the member shrank between the two.
type sizeWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	lastBig    map[string]time.Time
	firstSmall map[string]time.Time
	smallest   map[string]int64
	// terms counts, per raft term, the answers naming each leader. etcd's Status reads the
	// term and the leader one after the other, so an answer during a hand-over may pair the
	// old term with the new leader: a term's leader is the one most answers name.
	terms map[uint64]map[uint64]int
}

func watchSizes(t testing.TB, cli *clientv3.Client, ns string, n int, threshold int64) *sizeWatch {
	ctx, cancel := context.WithCancel(context.Background())
	sw := &sizeWatch{cancel: cancel, lastBig: map[string]time.Time{}, firstSmall: map[string]time.Time{}, smallest: map[string]int64{},
		terms: map[uint64]map[uint64]int{}}
	for i := 0; i < n; i++ {
		name, ep := fmt.Sprintf("etcd-%d", i), endpoint(ns, i)
		sw.wg.Go(func() {
			for ctx.Err() == nil {
				sent := time.Now()
				sctx, scancel := context.WithTimeout(ctx, time.Second)
				st, err := cli.Status(sctx, ep)
				scancel()
				got := time.Now()
				if err == nil {
					sw.mu.Lock()
					if st.DbSize >= threshold {
						sw.lastBig[name] = sent
					} else if _, ok := sw.firstSmall[name]; !ok {
						sw.firstSmall[name] = got
					}
					if s, ok := sw.smallest[name]; !ok || st.DbSize < s {
						sw.smallest[name] = st.DbSize
					}
					if st.Leader != 0 {
						if sw.terms[st.RaftTerm] == nil {
							sw.terms[st.RaftTerm] = map[uint64]int{}
						}
						sw.terms[st.RaftTerm][st.Leader]++
					}
					sw.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	t.Cleanup(sw.stop)
	return sw
}

func (sw *sizeWatch) stop() { sw.cancel(); sw.wg.Wait() }

// leaderOf is the leader most answers named in term (0 when none did).
func (sw *sizeWatch) leaderOf(term uint64) uint64 {
	var leader uint64
	most := 0
	for id, n := range sw.terms[term] {
		if n > most || (n == most && id < leader) {
			leader, most = id, n
		}
	}
	return leader
}

// fill writes count values of size bytes under prefix, perTxn of them in one transaction.
func fill(ctx context.Context, cli *clientv3.Client, prefix string, count, size, perTxn int) error {
	value := strings.Repeat("x", size)
	for i := 0; i < count; i += perTxn {
		var ops []clientv3.Op
		for j := i; j < min(i+perTxn, count); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%05d", prefix, j), value))
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("put %s%05d..: %w", prefix, i, err)
		}
	}
	return nil
}

// hashesAgree waits until every member reports the same HashKV at the current revision: the
// members' keyspaces are identical.
func hashesAgree(t testing.TB, cli *clientv3.Client, ns string, n int) {
	t.Helper()
	eventually(t, 30*time.Second, "the same HashKV on every member", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "w0")
		if err != nil {
			return err
		}
		rev := resp.Header.Revision
		hashes := map[uint32][]string{}
		for i := 0; i < n; i++ {
			h, err := cli.HashKV(ctx, endpoint(ns, i), rev)
			if err != nil {
				return fmt.Errorf("HashKV of etcd-%d at revision %d: %w", i, rev, err)
			}
			hashes[h.Hash] = append(hashes[h.Hash], fmt.Sprintf("etcd-%d", i))
		}
		if len(hashes) != 1 {
			return fmt.Errorf("members disagree at revision %d: %v", rev, hashes)
		}
		return nil
	})
}

// TestDefragmentationUnderWriteLoadShrinksTheDatabase: a 3-member cluster whose database
// holds 48 MiB of values, then deletes them and compacts (as a user's auto-compaction would:
// the planner compacts only under a NOSPACE alarm), so that most of each member's file is free
// pages, above minFragmentedSize (16Mi) and fragmentedPercent (50). The operator defragments
// every member, one at a time, while a client writes throughout: each member's DbSize, read
// from etcd, drops below half of what it was, no acknowledged write is lost, a quorum of
// voters stays healthy, and the members' keyspaces stay identical. When etcd reports exactly
// two raft terms while it ran (one leader change: the hand-over before the leader's turn),
// the member that led in the first is checked to have shrunk last.
func TestDefragmentationUnderWriteLoadShrinksTheDatabase(t *testing.T) {
	const (
		values    = 192
		valueSize = 256 << 10
	)
	ns := namespace(t)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To[int32](3),
			Maintenance: v1alpha1.MaintenanceSpec{Defragmentation: v1alpha1.DefragmentationSpec{
				FragmentedPercent: 50, MinFragmentedSize: ptr.To(resource.MustParse("16Mi")),
			}}}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, ns, 3, availableTimeout)
	cli := etcdClient(t, ns, 3)
	defer cli.Close()
	w := startWriter(t, ns, 3)

	ctx := context.Background()
	start := time.Now()
	if err := fill(ctx, cli, "fill/", values, valueSize, 4); err != nil {
		t.Fatal(err)
	}
	// The high-water mark only shrinks by a defragmentation, which nothing triggers before the
	// values are deleted and compacted: these are the sizes before.
	before, err := readSizes(cli, ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s in %d values in %s; before: %s", mib(values*valueSize), values, time.Since(start).Round(100*time.Millisecond), describeSizes(before))
	var smallestBefore int64 = -1
	for name, m := range before {
		if m.dbSize < values*valueSize*3/4 { // a follower may not have applied the last values yet
			t.Fatalf("%s's database is %s after %s were written", name, mib(m.dbSize), mib(values*valueSize))
		}
		if smallestBefore < 0 || m.dbSize < smallestBefore {
			smallestBefore = m.dbSize
		}
	}
	threshold := smallestBefore / 2
	sw := watchSizes(t, cli, ns, 3, threshold)
	s := startSampler(t, ns)

	del, err := cli.Delete(ctx, "fill/", clientv3.WithPrefix())
	if err != nil || del.Deleted != values {
		t.Fatalf("delete: %v (%+v)", err, del)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	compacted := time.Now()
	fragmented, err := readSizes(cli, ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted and compacted to revision %d: %s", del.Header.Revision, describeSizes(fragmented))

	var after map[string]memberSize
	eventually(t, 2*time.Minute, "every member's database below half its size", func() error {
		var err error
		if after, err = readSizes(cli, ns, 3); err != nil {
			return err
		}
		for name, m := range after {
			if m.dbSize >= threshold {
				return fmt.Errorf("%s is %s, not below %s yet; %s", name, mib(m.dbSize), mib(threshold), describeSizes(after))
			}
		}
		return nil
	})
	took := time.Since(compacted)
	// The writer goes on a little: the cluster serves after the last defragmentation.
	w.mu.Lock()
	acked := len(w.acked)
	w.mu.Unlock()
	eventually(t, 10*time.Second, "writes acknowledged after the defragmentations", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < acked+20 {
			return fmt.Errorf("%d writes acknowledged since", len(w.acked)-acked)
		}
		return nil
	})
	sw.stop()
	r := s.finish(t)
	w.finish(t, ns, 3)
	hashesAgree(t, cli, ns, 3)

	for name, m := range before {
		t.Logf("%s: %s before, %s after (%s in use), smallest seen %s", name, mib(m.dbSize), mib(after[name].dbSize), mib(after[name].inUse), mib(sw.smallest[name]))
	}
	order := []string{"etcd-0", "etcd-1", "etcd-2"}
	sort.Slice(order, func(i, j int) bool { return sw.firstSmall[order[i]].Before(sw.firstSmall[order[j]]) })
	var steps []string
	for _, name := range order {
		steps = append(steps, fmt.Sprintf("%s shrank by %s", name, sw.firstSmall[name].Sub(compacted).Round(100*time.Millisecond)))
	}
	t.Logf("every member defragmented %s after the compaction: %s", took.Round(100*time.Millisecond), strings.Join(steps, ", "))

	// The leader last: the bracket of its shrink must not end before a follower's begins.
	// Checked only when the members reported exactly two raft terms, that is one leader change,
	// which the hand-over before the leader's defragmentation must be: another election would
	// make "the leader" ambiguous.
	first := uint64(0)
	for term := range sw.terms {
		if first == 0 || term < first {
			first = term
		}
	}
	var leaderName string
	for name, m := range before {
		if m.id == sw.leaderOf(first) {
			leaderName = name
		}
	}
	if len(sw.terms) == 2 && leaderName != "" {
		for name := range before {
			if name != leaderName && sw.firstSmall[leaderName].Before(sw.lastBig[name]) {
				t.Errorf("%s, which led, shrank (seen at %s) before %s did (still large at %s)", leaderName,
					sw.firstSmall[leaderName].Format("15:04:05.000"), name, sw.lastBig[name].Format("15:04:05.000"))
			}
		}
		t.Logf("%s led until the hand-over and was defragmented last", leaderName)
	} else {
		t.Logf("the members reported %d raft terms while the defragmentation ran; the leader-last order is not checked", len(sw.terms))
	}
	t.Logf("figures: longest gap between acknowledged writes %s, %d leader changes; fewest healthy voters %d of %d over %d samples",
		w.longestGap().Round(time.Millisecond), w.termChanges(), r.FewestHealthyVoters, r.VotersThen, r.Samples)
}

// TestNoSpaceAlarmIsRaisedByASmallQuotaAndCleared: a 3-member cluster with a 16Mi space quota
// is written to until etcd refuses a put with "database space exceeded" and lists a NOSPACE
// alarm. The values are deleted (etcd allows deletions under the alarm), and the operator
// recovers by itself (compact, defragment, disarm): etcd's alarm list becomes empty, every
// member's database is back under 80% of the quota, a put succeeds again, and no write etcd
// acknowledged meanwhile is lost.
func TestNoSpaceAlarmIsRaisedByASmallQuotaAndCleared(t *testing.T) {
	const (
		quota     = 16 << 20
		valueSize = 256 << 10
	)
	ns := namespace(t)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To[int32](3),
			Etcd: v1alpha1.EtcdSettings{QuotaBackendBytes: resource.NewQuantity(quota, resource.BinarySI)}}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, ns, 3, availableTimeout)
	cli := etcdClient(t, ns, 3)
	defer cli.Close()
	w := startWriter(t, ns, 3)
	ctx := context.Background()

	// Write until etcd refuses.
	start := time.Now()
	value := strings.Repeat("x", valueSize)
	written := 0
	for {
		if written*valueSize > 4*quota {
			t.Fatalf("%s written and no NOSPACE: the quota is not in force", mib(int64(written*valueSize)))
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Put(pctx, fmt.Sprintf("fill/%05d", written), value)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) {
			t.Logf("etcd refused the put of value %d (%s written in %s): %v", written, mib(int64(written*valueSize)), time.Since(start).Round(100*time.Millisecond), err)
			break
		}
		if err != nil {
			t.Fatalf("put %d: %v", written, err)
		}
		written++
	}
	raised := time.Now()
	alarms := func() ([]string, error) {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := cli.AlarmList(actx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, a := range resp.Alarms {
			out = append(out, fmt.Sprintf("%s on %x", a.Alarm, a.MemberID))
		}
		sort.Strings(out)
		return out, nil
	}
	var active []string
	eventually(t, 10*time.Second, "a NOSPACE alarm in etcd's alarm list", func() error {
		var err error
		if active, err = alarms(); err != nil {
			return err
		}
		for _, a := range active {
			if strings.HasPrefix(a, "NOSPACE") {
				return nil
			}
		}
		return fmt.Errorf("alarms %v", active)
	})
	full, err := readSizes(cli, ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd lists %v; %s", active, describeSizes(full))

	// Deletions are allowed under the alarm.
	del, err := cli.Delete(ctx, "fill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("delete under the NOSPACE alarm: %v", err)
	}
	t.Logf("deleted %d values under the alarm (revision %d)", del.Deleted, del.Header.Revision)
	if now, err := alarms(); err == nil {
		t.Logf("alarms right after the delete: %v", now)
	}

	// The operator recovers: the alarm list is empty and a put succeeds. What the operator
	// says meanwhile is logged, not trusted.
	seen := map[string]bool{}
	var reasons []string
	eventually(t, 2*time.Minute, "the alarm disarmed and a put accepted", func() error {
		for _, typ := range []string{v1alpha1.ConditionProgressing, v1alpha1.ConditionDegraded} {
			if cond := meta.FindStatusCondition(getCluster(t, ns).Status.Conditions, typ); cond != nil && !seen[typ+cond.Reason] {
				seen[typ+cond.Reason] = true
				reasons = append(reasons, fmt.Sprintf("%s %s %s after the alarm: %s", typ, cond.Reason, time.Since(raised).Round(100*time.Millisecond), cond.Message))
			}
		}
		active, err := alarms()
		if err != nil {
			return err
		}
		if len(active) > 0 {
			return fmt.Errorf("alarms %v", active)
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := cli.Put(pctx, "after-the-alarm", "yes"); err != nil {
			return fmt.Errorf("put: %w", err)
		}
		return nil
	})
	took := time.Since(raised)
	for _, r := range reasons {
		t.Logf("operator: %s", r)
	}
	after, err := readSizes(cli, ns, 3)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range after {
		if m.dbSize > quota*8/10 {
			t.Errorf("%s's database is %s after the recovery, above 80%% of the %s quota", name, mib(m.dbSize), mib(quota))
		}
	}
	t.Logf("alarm cleared and writes accepted %s after it was raised; %s", took.Round(100*time.Millisecond), describeSizes(after))
	w.finish(t, ns, 3)
	hashesAgree(t, cli, ns, 3)
}

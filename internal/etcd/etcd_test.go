package etcd_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// startEtcd runs a real one-member etcd on a loopback address of its own and returns its
// client URL. The binary comes from $ETCD or bin/etcd/v3.6.16 (hack/build-etcd.sh).
func startEtcd(t *testing.T, ip string) string {
	t.Helper()
	bin := os.Getenv("ETCD")
	if bin == "" {
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "bin", "etcd", "v3.6.16", "etcd")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("etcd binary missing (%v): run hack/build-etcd.sh or make tools", err)
	}
	client := fmt.Sprintf("http://%s:2379", ip)
	peer := fmt.Sprintf("http://%s:2380", ip)
	cmd := exec.Command(bin,
		"--name=m0", "--data-dir="+t.TempDir(),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--listen-metrics-urls="+fmt.Sprintf("http://%s:2381", ip),
		"--initial-cluster=m0="+peer, "--initial-cluster-state=new", "--log-level=error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start etcd: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(fmt.Sprintf("http://%s:2381/readyz", ip))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("etcd at %s did not become ready", client)
	return ""
}

func TestClientAgainstRealEtcd(t *testing.T) {
	ep := startEtcd(t, "127.0.31.1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := etcd.Dial(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cl, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Members) != 1 || cl.Members[0].Name != "m0" || cl.ClusterID == 0 || cl.Members[0].IsLearner {
		t.Fatalf("member list %+v", cl)
	}
	st, err := c.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != cl.Members[0].ID || st.Leader != st.ID || !strings.HasPrefix(st.Version, "3.6.") || st.DBSize == 0 {
		t.Fatalf("status %+v", st)
	}
	// The cluster version comes from /version; a one-member cluster sets it at once (a few
	// seconds after start at most).
	deadline := time.Now().Add(10 * time.Second)
	for st.ClusterVersion == "" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if st, err = c.Status(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if st.ClusterVersion != "3.6.0" {
		t.Fatalf("cluster version %q, want 3.6.0", st.ClusterVersion)
	}
	if got := (etcd.Observed{Status: map[uint64]etcd.MemberStatus{st.ID: st}}).ClusterVersion(); got != "3.6.0" {
		t.Fatalf("Observed.ClusterVersion() = %q", got)
	}

	// AdvanceLog appends entries without touching a key.
	revBefore := kvRevision(t, ep)
	if err := c.AdvanceLog(ctx, 300); err != nil {
		t.Fatal(err)
	}
	after, err := c.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	if after.AppliedIndex < st.AppliedIndex+300 {
		t.Fatalf("applied index %d -> %d, want at least 300 more", st.AppliedIndex, after.AppliedIndex)
	}
	if rev := kvRevision(t, ep); rev != revBefore {
		t.Fatalf("AdvanceLog changed the key-value store: revision %d -> %d", revBefore, rev)
	}

	// A learner counts for no vote, so adding one to a single member keeps quorum.
	learner, err := c.AddLearner(ctx, []string{"http://127.0.31.2:2380"})
	if err != nil {
		t.Fatal(err)
	}
	if !learner.IsLearner || learner.ID == 0 {
		t.Fatalf("learner %+v", learner)
	}
	obs, _, err := etcd.ObserveEndpoints(ctx, c, []string{ep}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Cluster.Members) != 2 || obs.Leader() != st.ID {
		t.Fatalf("observed %+v leader %x", obs.Cluster.Members, obs.Leader())
	}
	if _, ok := obs.StatusErr[learner.ID]; !ok {
		t.Fatalf("an unstarted learner must be reported as not answering: %+v", obs.StatusErr)
	}
	if _, ok := obs.Status[cl.Members[0].ID]; !ok {
		t.Fatalf("the running member did not answer: %+v", obs.StatusErr)
	}

	// A learner that has not caught up cannot be promoted.
	if err := c.Promote(ctx, learner.ID); err == nil {
		t.Fatalf("promoting a learner that never started succeeded")
	}
	if err := c.Remove(ctx, learner.ID); err != nil {
		t.Fatal(err)
	}
	// Removing a member that is already gone is success: a retried step converges.
	if err := c.Remove(ctx, learner.ID); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	cl, err = c.MemberList(ctx)
	if err != nil || len(cl.Members) != 1 {
		t.Fatalf("after remove: %+v %v", cl, err)
	}
}

func TestObserveFailsWithoutAnyMember(t *testing.T) {
	ctx := context.Background()
	c, err := etcd.Dial(ctx, []string{"http://127.0.31.9:2379"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, _, err := etcd.ObserveEndpoints(ctx, c, []string{"http://127.0.31.9:2379"}, 500*time.Millisecond); err == nil {
		t.Fatal("observing a cluster that does not exist succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Observe took %s; its per-call timeout must bound it", d)
	}
}

func TestFakeInjectsErrors(t *testing.T) {
	f := &etcd.Fake{ErrMemberList: fmt.Errorf("injected"), Statuses: map[string]etcd.MemberStatus{"a": {ID: 1, Leader: 1}}}
	if _, reached, err := etcd.ObserveEndpoints(context.Background(), f, []string{"a"}, time.Second); err == nil || reached != 1 {
		t.Fatalf("injected member list error was not returned (%v), or the member that answered not counted (%d)", err, reached)
	}
	f = &etcd.Fake{
		State:     etcd.Cluster{ClusterID: 1, Members: []etcd.Member{{ID: 1, Name: "a", ClientURLs: []string{"a"}}, {ID: 2, Name: "b", ClientURLs: []string{"b"}}}},
		Statuses:  map[string]etcd.MemberStatus{"a": {ID: 1, Leader: 1}, "b": {ID: 2, Leader: 1}},
		ErrStatus: map[string]error{"b": fmt.Errorf("injected")},
	}
	obs, _, err := etcd.ObserveEndpoints(context.Background(), f, []string{"a", "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Leader() != 1 || obs.StatusErr[2] == nil || len(obs.Status) != 1 {
		t.Fatalf("observed %+v", obs)
	}
}

// TestObserveEndpointsWithoutALeaderDoesNotWait: members that answer but know no leader (no
// quorum, or forming) are counted, and the member list, which would wait for its timeout, is
// not asked.
func TestObserveEndpointsWithoutALeaderDoesNotWait(t *testing.T) {
	f := &etcd.Fake{
		State:    etcd.Cluster{ClusterID: 1, Members: []etcd.Member{{ID: 1, Name: "a", ClientURLs: []string{"a"}}, {ID: 2, Name: "b", ClientURLs: []string{"b"}}}},
		Statuses: map[string]etcd.MemberStatus{"a": {ID: 1, Errors: []string{"etcdserver: no leader"}}},
	}
	_, reached, err := etcd.ObserveEndpoints(context.Background(), f, []string{"a", "b"}, time.Second)
	if err == nil || reached != 1 {
		t.Fatalf("err %v, reached %d; want an error and 1", err, reached)
	}
	if n := f.Calls["MemberList"]; n != 0 {
		t.Fatalf("the member list was asked %d times without a leader", n)
	}
}

func TestLeaderDisagreementIsNoLeader(t *testing.T) {
	o := etcd.Observed{Status: map[uint64]etcd.MemberStatus{1: {Leader: 1}, 2: {Leader: 2}}}
	if o.Leader() != 0 {
		t.Fatalf("members disagree on the leader, but Leader() = %x", o.Leader())
	}
}

func TestIDsRoundTrip(t *testing.T) {
	id := uint64(0x8e9e05c52164694d)
	got, err := etcd.ParseID(etcd.FormatID(id))
	if err != nil || got != id || etcd.FormatID(id) != "8e9e05c52164694d" {
		t.Fatalf("FormatID/ParseID: %s %x %v", etcd.FormatID(id), got, err)
	}
}

// kvRevision is the key-value store's revision at ep.
func kvRevision(t *testing.T, ep string) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

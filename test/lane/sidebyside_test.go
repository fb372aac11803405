package lane

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

// The side-by-side comparison runs only when given another operator: a binary of
// etcd-io/etcd-operator (built from its repository, which is not on the module proxy) and its
// CRD. It is a measurement, printed, not a pass/fail check of the other operator:
//
//	go test ./test/lane -run '^TestSideBySide$' -v -lane.peer-bin BIN -lane.peer-crd CRD.yaml
var (
	peerBin = flag.String("lane.peer-bin", "", "etcd-io/etcd-operator's binary, for TestSideBySide")
	peerCRD = flag.String("lane.peer-crd", "", "etcd-io/etcd-operator's EtcdCluster CRD (operator.etcd.io_etcdclusters.yaml), for TestSideBySide")
)

// peerImage is the other operator's image in the lane: its binary as /manager, run as the
// nonroot user, as its own Dockerfile does.
const peerImage = "etcd-pilot.local/peer-etcd-operator:lane"

// peerArchive writes the other operator's image archive into dir, for the lane's nodes.
func peerArchive(dir string) (string, error) {
	file := filepath.Join(dir, "peer-etcd-operator.tar")
	_, err := realnode.WriteArchiveFile(file, realnode.Image{
		Name:   peerImage,
		Files:  []realnode.File{{Path: "/manager", Mode: 0o755, Source: *peerBin}},
		Config: realnode.ImageConfig{User: "65532:65532", Entrypoint: []string{"/manager"}},
	})
	return file, err
}

var peerGVR = schema.GroupVersionResource{Group: "operator.etcd.io", Version: "v1alpha1", Resource: "etcdclusters"}

// figures are one operator's measurements; a zero duration is "did not happen" (with why).
type figures struct {
	create, scale, upgrade, replace time.Duration
	upgradeNote, replaceNote        string
	upgradeGap                      time.Duration
	upgradeLeaderChanges            int
	upgradeLost, upgradeAcked       int
	scaleSteps                      []string
}

// healthyVoters asks every endpoint for its status and returns the voters that answered,
// the leader and the versions, read from etcd.
func healthyVoters(cli *clientv3.Client, eps []string) (voters int, leader uint64, versions map[string]string) {
	versions = map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return 0, 0, versions
	}
	voter := map[uint64]bool{}
	for _, m := range ml.Members {
		if !m.IsLearner {
			voter[m.ID] = true
		}
	}
	for _, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil && voter[st.Header.MemberId] {
			voters++
			leader = st.Leader
			versions[ep] = st.Version
		}
	}
	return voters, leader, versions
}

func plainEndpoints(ns, name string, n int) []string {
	var eps []string
	for i := range n {
		eps = append(eps, fmt.Sprintf("http://%s-%d.%s.%s.svc.cluster.local:2379", name, i, name, ns))
	}
	return eps
}

func plainClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// waitVoters polls etcd until n voters answer (and every one runs version, when set), up to
// timeout; it returns how long it took, or 0.
func waitVoters(cli *clientv3.Client, eps []string, n int, version string, timeout time.Duration, onLeader func(uint64)) time.Duration {
	start := time.Now()
	for time.Since(start) < timeout {
		voters, leader, versions := healthyVoters(cli, eps)
		if onLeader != nil && leader != 0 {
			onLeader(leader)
		}
		ok := voters >= n
		if version != "" {
			running := 0
			for _, v := range versions {
				if v == version {
					running++
				}
			}
			ok = ok && running >= n
		}
		if ok {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond) // the sampling interval of the measurement
	}
	return 0
}

// measure runs the sequence on one operator's cluster: create 3 (to 3 healthy voters in
// etcd), scale to 5, a one-minor upgrade under a writer, and the loss of a member's node.
func measure(t *testing.T, ns, name string, create, scale, upgrade func()) figures {
	var f figures
	eps5 := plainEndpoints(ns, name, 5)
	start := time.Now()
	create()
	cli := plainClient(t, eps5)
	if d := waitVoters(cli, eps5[:3], 3, "", 5*time.Minute, nil); d > 0 {
		f.create = time.Since(start)
	} else {
		t.Fatalf("%s/%s: 3 healthy voters not within 5m", ns, name)
	}
	before := map[uint64]bool{}
	if ml, err := cli.MemberList(tctx(t)); err == nil {
		for _, m := range ml.Members {
			before[m.ID] = true
		}
	} else {
		t.Fatal(err)
	}
	start = time.Now()
	scale()
	// Each member's steps, as etcd's member list shows them (read every 100 ms while the
	// scale runs): listed (as a learner or a voter), started (named), voting.
	steps := watchMemberSteps(cli, start, before)
	if d := waitVoters(cli, eps5, 5, "", 5*time.Minute, nil); d == 0 {
		t.Fatalf("%s/%s: 5 healthy voters not within 5m", ns, name)
	}
	f.scale = time.Since(start)
	f.scaleSteps = steps()

	w := startWriter(cli, "/compare/"+ns)
	w.waitAcked(t, 50)
	leaders := map[uint64]bool{}
	last := uint64(0)
	changes := 0
	start = time.Now()
	upgrade()
	if d := waitVoters(cli, eps5, 5, "3.7.3", 4*time.Minute, func(l uint64) {
		if last != 0 && l != last {
			changes++
		}
		last, leaders[l] = l, true
	}); d > 0 {
		f.upgrade = d
	} else {
		_, _, versions := healthyVoters(cli, eps5)
		f.upgradeNote = fmt.Sprintf("not upgraded within 4m (members run %v)", sortedValues(versions))
	}
	w.waitAcked(t, 20) // writes go through the members as they are now
	acked, _, longest := w.Stop()
	f.upgradeGap, f.upgradeLeaderChanges, f.upgradeAcked = longest, changes, len(acked)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	resp, err := cli.Get(ctx, "/compare/"+ns+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err == nil {
		have := map[string]bool{}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = true
		}
		for _, k := range acked {
			if !have[k] {
				f.upgradeLost++
			}
		}
	}

	// The node of the member with the highest ordinal that does not lead.
	_, leader, _ := healthyVoters(cli, eps5)
	victim, node := "", ""
	for i := 4; i >= 0 && victim == ""; i-- {
		pod := fmt.Sprintf("%s-%d", name, i)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := cli.Status(ctx, eps5[i])
		cancel()
		if err == nil && st.Header.MemberId == leader {
			continue
		}
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err == nil {
			victim, node = pod, p.Spec.NodeName
		}
	}
	start = time.Now()
	if out, err := exec.Command(localBin, "node", "stop", node, "--dir", laneDir).CombinedOutput(); err != nil {
		t.Fatalf("node stop %s: %v: %s", node, err, out)
	}
	defer func() { _ = exec.Command(localBin, "node", "start", node, "--dir", laneDir).Run() }()
	ids := func() map[uint64]bool {
		out := map[uint64]bool{}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if ml, err := cli.MemberList(ctx); err == nil {
			for _, m := range ml.Members {
				out[m.ID] = true
			}
		}
		return out
	}
	before = ids()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		voters, _, _ := healthyVoters(cli, eps5)
		newMember := false
		for id := range ids() {
			if !before[id] {
				newMember = true
			}
		}
		if voters == 5 && newMember {
			f.replace = time.Since(start)
			break
		}
		time.Sleep(time.Second) // the sampling interval; the loop ends at its deadline
	}
	if f.replace == 0 {
		voters, _, _ := healthyVoters(cli, eps5)
		f.replaceNote = fmt.Sprintf("%s (node %s stopped) not replaced within 4m: %d healthy voters", victim, node, voters)
	}
	return f
}

// watchMemberSteps reads etcd's member list every 100 ms from start until the returned func
// is called, and returns then, in order, when each member not in initial was first listed,
// first had a name (its etcd started and published it) and first voted.
func watchMemberSteps(cli *clientv3.Client, start time.Time, initial map[uint64]bool) func() []string {
	stop, done := make(chan struct{}), make(chan struct{})
	type seen struct{ listed, named, voting time.Duration }
	first := map[uint64]*seen{}
	var order []uint64
	go func() {
		defer close(done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ml, err := cli.MemberList(ctx)
			cancel()
			at := time.Since(start)
			if err == nil {
				for _, m := range ml.Members {
					if initial[m.ID] {
						continue
					}
					s := first[m.ID]
					if s == nil {
						s = &seen{listed: at}
						first[m.ID] = s
						order = append(order, m.ID)
					}
					if s.named == 0 && m.Name != "" {
						s.named = at
					}
					if s.voting == 0 && !m.IsLearner {
						s.voting = at
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // the sampling interval
			}
		}
	}()
	return func() []string {
		close(stop)
		<-done
		var out []string
		for _, id := range order {
			s := first[id]
			out = append(out, fmt.Sprintf("%x listed %.1fs, started %.1fs, voting %.1fs", id, s.listed.Seconds(), s.named.Seconds(), s.voting.Seconds()))
		}
		return out
	}
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestSideBySide measures etcd-pilot and etcd-io/etcd-operator on the same lane, with the
// same etcd release and the same plain (no TLS) cluster, one after the other.
func TestSideBySide(t *testing.T) {
	if *peerBin == "" || *peerCRD == "" {
		t.Skip("no other operator given (-lane.peer-bin, -lane.peer-crd)")
	}
	ctx := context.Background()
	// etcd-pilot: a plain cluster, members replaced 10 s after their node is lost.
	restrictedNamespace(t, "cmp-pilot")
	pilot := measure(t, "cmp-pilot", "etcd", func() {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "cmp-pilot", Name: "etcd"},
			Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptrTo[int32](3), Version: "3.6.16",
				Membership: v1alpha1.MembershipSpec{ReplaceAfter: &metav1.Duration{Duration: 10 * time.Second}}}}
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := k8s.Patch(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "cmp-pilot", Name: "etcd"}},
			rawPatch(`{"spec":{"replicas":5}}`)); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := k8s.Patch(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "cmp-pilot", Name: "etcd"}},
			rawPatch(`{"spec":{"version":"3.7.3"}}`)); err != nil {
			t.Fatal(err)
		}
	})

	// etcd-pilot's cluster goes before the other operator's is measured: it shares the nodes,
	// and the other run's node stop must not take members of both.
	if err := k8s.Delete(ctx, &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "cmp-pilot", Name: "etcd"}}); err != nil {
		t.Fatal(err)
	}

	// etcd-io/etcd-operator: its CRD, cluster-admin for its service account (its own role is
	// narrower; this measures speed, not permissions), one replica, no leader election, and
	// its clusters in a namespace at the baseline Pod Security level: its member pods set no
	// security context, which the restricted level refuses.
	installPeer(t)
	peer := measure(t, "cmp-peer", "etcd", func() {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "operator.etcd.io/v1alpha1", "kind": "EtcdCluster",
			"metadata": map[string]any{"name": "etcd", "namespace": "cmp-peer"},
			"spec":     map[string]any{"size": int64(3), "version": "v3.6.16", "storageSpec": map[string]any{"volumeSizeRequest": "1Gi"}},
		}}
		if _, err := dyn(t).Resource(peerGVR).Namespace("cmp-peer").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if _, err := dyn(t).Resource(peerGVR).Namespace("cmp-peer").Patch(ctx, "etcd", types.MergePatchType, []byte(`{"spec":{"size":5}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if _, err := dyn(t).Resource(peerGVR).Namespace("cmp-peer").Patch(ctx, "etcd", types.MergePatchType, []byte(`{"spec":{"version":"v3.7.3"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	row := func(what string, a, b time.Duration, bNote string) string {
		as, bs, ratio := "-", "-", "-"
		if a > 0 {
			as = fmt.Sprintf("%.1f s", a.Seconds())
		}
		if b > 0 {
			bs = fmt.Sprintf("%.1f s", b.Seconds())
			if a > 0 {
				ratio = fmt.Sprintf("%.2f", a.Seconds()/b.Seconds())
			}
		} else if bNote != "" {
			bs = bNote
		}
		return fmt.Sprintf("| %s | %s | %s | %s |", what, as, bs, ratio)
	}
	lines := []string{
		"| figure | etcd-pilot | etcd-io/etcd-operator | ratio |",
		"|---|---|---|---|",
		row("create to 3 healthy voters", pilot.create, peer.create, ""),
		row("scale 3 -> 5 (5 healthy voters)", pilot.scale, peer.scale, ""),
		row("upgrade 3.6.16 -> 3.7.3 under a writer", pilot.upgrade, peer.upgrade, peer.upgradeNote),
		fmt.Sprintf("| upgrade: longest write gap, leader changes, acknowledged writes lost | %s, %d, %d of %d | %s, %d, %d of %d | |",
			pilot.upgradeGap.Round(time.Millisecond), pilot.upgradeLeaderChanges, pilot.upgradeLost, pilot.upgradeAcked,
			peer.upgradeGap.Round(time.Millisecond), peer.upgradeLeaderChanges, peer.upgradeLost, peer.upgradeAcked),
		row("a member's node stopped, to 5 healthy voters again", pilot.replace, peer.replace, peer.replaceNote),
	}
	t.Logf("side by side on the real-node lane, etcd 3.6.16, plain clusters, 2 cores:\n%s\netcd-pilot scale steps: %s\netcd-io/etcd-operator scale steps: %s\n%s",
		strings.Join(lines, "\n"), strings.Join(pilot.scaleSteps, "; "), strings.Join(peer.scaleSteps, "; "), pilot.replaceNote)
}

func dyn(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func rawPatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

// installPeer installs the other operator and waits for its pod to be Ready.
func installPeer(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(*peerCRD)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := sigsyaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	ax, err := apiextensionsclient.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, ns := range []string{"peer-system", "cmp-peer"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := kube.CoreV1().ServiceAccounts("peer-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "peer"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "peer-etcd-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "peer", Namespace: "peer-system"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "peer-etcd-operator"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "peer-etcd-operator", Namespace: "peer-system"},
		Spec: appsv1.DeploymentSpec{Replicas: ptrTo[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "peer",
				Containers: []corev1.Container{{Name: "manager", Image: peerImage, ImagePullPolicy: corev1.PullNever,
					Args: []string{"--health-probe-bind-address=:8081", "--metrics-bind-address=0"}}},
			}}}}
	if _, err := kube.AppsV1().Deployments("peer-system").Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, time.Second, "etcd-io/etcd-operator running", func() error {
		d, err := kube.AppsV1().Deployments("peer-system").Get(ctx, "peer-etcd-operator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("%d available", d.Status.AvailableReplicas)
		}
		return nil
	})
}

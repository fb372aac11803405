package lane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

var metav1ListAll = metav1.ListOptions{}

func clientScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

// eventually retries f every interval until it returns nil or timeout passes.
func eventually(t *testing.T, timeout, interval time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(interval) // the poll interval of a wait that ends on its condition or timeout
	}
}

// restrictedNamespace creates ns enforcing the restricted Pod Security profile, deleted when
// the test ends.
func restrictedNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
}

func getCluster(t *testing.T, ns, name string) *v1alpha1.EtcdCluster {
	t.Helper()
	c := &v1alpha1.EtcdCluster{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitAvailable waits until the cluster's status says Available with n ready members of
// version (any when empty), for the current generation.
func waitAvailable(t *testing.T, ns, name string, n int32, version string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, time.Second, fmt.Sprintf("EtcdCluster %s/%s Available with %d members %s", ns, name, n, version), func() error {
		c := &v1alpha1.EtcdCluster{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, "Available")
		if cond == nil || cond.Status != metav1.ConditionTrue || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("not Available: %+v (status of generation %d of %d)", cond, c.Status.ObservedGeneration, c.Generation)
		}
		if c.Status.ReadyReplicas != n || (version != "" && c.Status.CurrentVersion != version) {
			return fmt.Errorf("%d ready, version %q", c.Status.ReadyReplicas, c.Status.CurrentVersion)
		}
		return nil
	})
}

func secretData(t *testing.T, ns, name string) map[string][]byte {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// memberEndpoints are the members' client URLs by their DNS names under the headless Service.
func memberEndpoints(ns, name string, n int) []string {
	var eps []string
	for i := range n {
		eps = append(eps, fmt.Sprintf("https://%s-%d.%s.%s.svc.cluster.local:2379", name, i, name, ns))
	}
	return eps
}

// etcdClient connects over TLS with the application certificate Secret certSecret, as root
// (the password from the cluster's root Secret) when auth is on.
func etcdClient(t *testing.T, ns, name, certSecret string, endpoints []string, auth bool) *clientv3.Client {
	t.Helper()
	d := secretData(t, ns, certSecret)
	cert, err := tls.X509KeyPair(d["tls.crt"], d["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(d["ca.crt"]) {
		t.Fatal("no CA in " + certSecret)
	}
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialTimeout: 5 * time.Second,
		// As a production client: a member whose connection went silent (a partitioned node)
		// is left out of the round robin once keepalive notices.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	}
	if auth {
		root := secretData(t, ns, v1alpha1.RootAuthSecretName(name))
		cfg.Username, cfg.Password = string(root["username"]), string(root["password"])
	}
	// With credentials, New authenticates at once; a Service's rules may still be on their
	// way into kube-proxy's tables.
	var cli *clientv3.Client
	deadline := time.Now().Add(time.Minute)
	for {
		if cli, err = clientv3.New(cfg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd client of %v: %v", endpoints, err)
		}
		t.Logf("etcd client of %v: %v; again", endpoints, err)
		time.Sleep(2 * time.Second)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// writer writes keys until stopped and records the acknowledged ones.
type writer struct {
	cli     *clientv3.Client
	prefix  string
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	acked   []string
	failed  int
	longest time.Duration
}

func startWriter(cli *clientv3.Client, prefix string) *writer {
	w := &writer{cli: cli, prefix: prefix, stop: make(chan struct{})}
	w.done.Go(func() {
		lastOK := time.Now()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			key := fmt.Sprintf("%s/%06d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := cli.Put(ctx, key, key)
			cancel()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, key)
				if gap := time.Since(lastOK); gap > w.longest {
					w.longest = gap
				}
				lastOK = time.Now()
			} else {
				w.failed++
			}
			w.mu.Unlock()
			// The writer's pace: about 100 writes a second, a steady load, not a flood.
			time.Sleep(10 * time.Millisecond)
		}
	})
	return w
}

// waitAcked waits until n more writes than now are acknowledged: the writer is under way
// (before a fault or a change), or still getting writes through (after one).
func (w *writer) waitAcked(t *testing.T, n int) {
	t.Helper()
	w.mu.Lock()
	target := len(w.acked) + n
	w.mu.Unlock()
	eventually(t, time.Minute, 50*time.Millisecond, fmt.Sprintf("%d more acknowledged writes", n), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) < target {
			return fmt.Errorf("%d of %d", len(w.acked), target)
		}
		return nil
	})
}

func (w *writer) Stop() ([]string, int, time.Duration) {
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed, w.longest
}

// checkAcked reads every acknowledged key back from each member alone (serializable reads
// after a linearizable one that makes each member catch up).
func checkAcked(t *testing.T, cli *clientv3.Client, prefix string, acked []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	var lost []string
	for _, k := range acked {
		if !have[k] {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes lost, first %s", len(lost), len(acked), lost[0])
	}
}

// TestSecureClusterOnRealNodes is the README's cluster on real nodes: peer and client TLS from
// the operator with no extra names (no 127.0.0.1: members dial each other from their pod
// addresses, which the cluster's DNS maps back to their names), auth on, the members under
// restricted Pod Security; then a one-minor upgrade under a writer, and the loss of a node.
func TestSecureClusterOnRealNodes(t *testing.T) {
	const ns, name = "secure", "etcd"
	// A member lost with its node is replaced 10 s after the node goes NotReady.
	took := createLaneCluster(t, ns, name, 3, 10*time.Second, func(s *v1alpha1.EtcdClusterSpec) {
		s.Auth = &v1alpha1.AuthSpec{Enabled: true}
	})
	t.Logf("3 members Available with TLS and auth in %.1fs", took.Seconds())

	// The certificates name the members by DNS only.
	for _, secret := range []string{v1alpha1.PeerTLSSecretName(name), name + "-server-tls"} {
		block, _ := pem.Decode(secretData(t, ns, secret)["tls.crt"])
		if block == nil {
			t.Fatalf("no certificate in %s", secret)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if len(cert.IPAddresses) > 0 {
			t.Fatalf("%s names IP addresses %v: the lane must form without them", secret, cert.IPAddresses)
		}
	}

	// Auth comes on after the members form: the root Secret first, then etcd refuses a client
	// without credentials.
	eventually(t, 2*time.Minute, time.Second, "auth on in etcd", func() error {
		if _, err := kube.CoreV1().Secrets(ns).Get(context.Background(), v1alpha1.RootAuthSecretName(name), metav1.GetOptions{}); err != nil {
			return err
		}
		anon := etcdClient(t, ns, name, name+"-client-app", memberEndpoints(ns, name, 3), false)
		defer anon.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := anon.Put(ctx, "/lane/anonymous", "x"); err == nil {
			return errors.New("a write without credentials was accepted")
		}
		return nil
	})
	// Through the client Service (kube-proxy) and by each member's name (CoreDNS).
	svc := etcdClient(t, ns, name, name+"-client-app", []string{fmt.Sprintf("https://%s-client.%s.svc.cluster.local:2379", name, ns)}, true)
	if _, err := svc.Put(tctx(t), "/lane/hello", "real nodes"); err != nil {
		t.Fatalf("write through the client Service: %v", err)
	}
	cli := etcdClient(t, ns, name, name+"-client-app", memberEndpoints(ns, name, 3), true)
	clusterID := uint64(0)
	for _, ep := range memberEndpoints(ns, name, 3) {
		st, err := cli.Status(tctx(t), ep)
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if clusterID == 0 {
			clusterID = st.Header.ClusterId
		} else if st.Header.ClusterId != clusterID {
			t.Fatalf("%s is in cluster %x, not %x", ep, st.Header.ClusterId, clusterID)
		}
	}

	t.Run("UpgradeUnderWrites", func(t *testing.T) {
		w := startWriter(cli, "/lane/upgrade")
		w.waitAcked(t, 50)
		start := time.Now()
		patch := client.MergeFrom(getCluster(t, ns, name).DeepCopy())
		up := getCluster(t, ns, name)
		up.Spec.Version = "3.7.3"
		if err := k8s.Patch(context.Background(), up, patch); err != nil {
			t.Fatal(err)
		}
		waitAvailable(t, ns, name, 3, "3.7.3", 8*time.Minute)
		took := time.Since(start)
		w.waitAcked(t, 50) // writes go through the upgraded members too
		acked, failed, longest := w.Stop()
		checkAcked(t, cli, "/lane/upgrade", acked)
		for _, ep := range memberEndpoints(ns, name, 3) {
			st, err := cli.Status(tctx(t), ep)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version != "3.7.3" || st.Header.ClusterId != clusterID {
				t.Fatalf("%s runs %s in cluster %x after the upgrade", ep, st.Version, st.Header.ClusterId)
			}
		}
		t.Logf("upgrade 3.6.16 -> 3.7.3 in %.1fs: %d writes acknowledged and all readable, %d failed, longest write gap %s",
			took.Seconds(), len(acked), failed, longest.Round(time.Millisecond))
	})

	t.Run("NodeLoss", func(t *testing.T) {
		// A member that does not lead, so the scenario is the node's loss and not an election.
		c := getCluster(t, ns, name)
		var victim string
		for _, m := range c.Status.Members {
			if !m.Leader {
				victim = m.Name
				break
			}
		}
		pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), victim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node := pod.Spec.NodeName
		w := startWriter(cli, "/lane/nodeloss")
		start := time.Now()
		if out, err := exec.Command(localBin, "node", "stop", node, "--dir", laneDir).CombinedOutput(); err != nil {
			t.Fatalf("node stop %s: %v: %s", node, err, out)
		}
		t.Cleanup(func() { _ = exec.Command(localBin, "node", "start", node, "--dir", laneDir).Run() })
		// The two members left keep quorum: writes go on.
		w.waitAcked(t, 100)
		eventually(t, 10*time.Minute, 2*time.Second, fmt.Sprintf("member %s replaced away from stopped node %s", victim, node), func() error {
			p, err := kube.CoreV1().Pods(ns).Get(context.Background(), victim, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName == node || p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s on %q", victim, p.Spec.NodeName)
			}
			c := &v1alpha1.EtcdCluster{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, "Available")
			if c.Status.ReadyReplicas != 3 || cond == nil || cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("%d ready", c.Status.ReadyReplicas)
			}
			return nil
		})
		took := time.Since(start)
		acked, failed, longest := w.Stop()
		checkAcked(t, cli, "/lane/nodeloss", acked)
		ml, err := cli.MemberList(tctx(t))
		if err != nil {
			t.Fatal(err)
		}
		voters := 0
		for _, m := range ml.Members {
			if !m.IsLearner {
				voters++
			}
		}
		if voters != 3 || len(ml.Members) != 3 || ml.Header.ClusterId != clusterID {
			t.Fatalf("after the replacement etcd lists %d members, %d voters, cluster %x", len(ml.Members), voters, ml.Header.ClusterId)
		}
		t.Logf("member %s replaced after node %s stopped in %.1fs: %d writes acknowledged and all readable, %d failed, longest gap %s",
			victim, node, took.Seconds(), len(acked), failed, longest.Round(time.Millisecond))
	})
}

// createLaneCluster creates, in a new namespace at the restricted Pod Security level, the
// lanes' usual cluster: n members of etcd 3.6.16 with client TLS from the operator and an "app"
// client certificate, the lane's network allowed as clients, members replaced replaceAfter after
// they are lost (0: the default). edit changes the spec before it is created. It waits until
// the cluster is Available and returns how long that took from the create.
func createLaneCluster(t *testing.T, ns, name string, n int32, replaceAfter time.Duration, edit func(*v1alpha1.EtcdClusterSpec)) time.Duration {
	t.Helper()
	waitNodesSchedulable(t)
	restrictedNamespace(t, ns)
	c := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.EtcdClusterSpec{
			Replicas:      ptrTo(n),
			Version:       "3.6.16",
			TLS:           &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{Certificates: []v1alpha1.ClientCertificate{{Name: "app"}}}},
			NetworkPolicy: laneHostAllowed(),
		},
	}
	if replaceAfter > 0 {
		c.Spec.Membership.ReplaceAfter = &metav1.Duration{Duration: replaceAfter}
	}
	if edit != nil {
		edit(&c.Spec)
	}
	created := time.Now()
	if err := k8s.Create(tctx(t), c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, ns, name, n, c.Spec.Version, 5*time.Minute)
	return time.Since(created)
}

// waitNodesSchedulable waits until every node is Ready and carries no taint that keeps pods
// off it. A scenario before may have stopped a node or cut what it receives, and the node
// lifecycle controller lifts its unreachable/not-ready taints only some seconds after the
// kubelet reports again: a cluster created in that window is placed on the other nodes (CI
// once put five members 3/2/0 while lane-node-2 was still tainted).
func waitNodesSchedulable(t *testing.T) {
	t.Helper()
	eventually(t, 3*time.Minute, time.Second, "every node Ready and untainted", func() error {
		nodes, err := kube.CoreV1().Nodes().List(tctx(t), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(nodes.Items) == 0 {
			return fmt.Errorf("no nodes")
		}
		for _, n := range nodes.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
			if n.Spec.Unschedulable {
				return fmt.Errorf("node %s cordoned", n.Name)
			}
			for _, tn := range n.Spec.Taints {
				if tn.Effect == corev1.TaintEffectNoSchedule || tn.Effect == corev1.TaintEffectNoExecute {
					return fmt.Errorf("node %s tainted %s:%s", n.Name, tn.Key, tn.Effect)
				}
			}
		}
		return nil
	})
}

// membersOf reads etcd's member list: the cluster's ID and its members' IDs.
func membersOf(t *testing.T, cli *clientv3.Client) (clusterID uint64, ids map[uint64]bool) {
	t.Helper()
	ml, err := cli.MemberList(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	ids = map[uint64]bool{}
	for _, m := range ml.Members {
		ids[m.ID] = true
	}
	return ml.Header.ClusterId, ids
}

// tctx is a context for one call to etcd, cancelled when the test ends.
func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ptrTo[T any](v T) *T { return &v }

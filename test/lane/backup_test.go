package lane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/minio"
)

// s3CredentialsSecret stores the server's credentials in ns under the keys the operator reads.
func s3CredentialsSecret(t *testing.T, ns string, s *minio.Server) v1alpha1.SecretReference {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		StringData: map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	return v1alpha1.SecretReference{Name: sec.Name}
}

// laneRange is the lane's bridge network, where MinIO listens; TestMain allows the operator to
// reach it (and nothing else a tenant names) over plain HTTP.
const laneRange = "10.200.0.0/24"

// requireOutboundPolicy fails unless the operator's pods run with the outbound policy TestMain
// gives the lane through the chart's outbound values: without it, a backup to the plain-HTTP
// MinIO fails with EndpointRefused, which would say nothing about backups on real nodes.
func requireOutboundPolicy(t *testing.T) {
	t.Helper()
	pods, err := kube.CoreV1().Pods("etcd-pilot-system").List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=etcd-pilot"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no operator pod in etcd-pilot-system")
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			allowed, insecure := false, false
			for _, a := range c.Args {
				if list, ok := strings.CutPrefix(a, "--allowed-endpoints="); ok && slices.Contains(strings.Split(list, ","), laneRange) {
					allowed = true
				}
				insecure = insecure || a == "--allow-insecure-endpoints"
			}
			if !allowed || !insecure {
				t.Fatalf("operator pod %s runs %s without --allowed-endpoints=%s and --allow-insecure-endpoints (the chart's outbound values): %q",
					p.Name, c.Name, laneRange, c.Args)
			}
		}
	}
}

// snapshotIntegrity checks, without the operator's code, that data is an etcd snapshot: a
// bbolt file (the magic of its first meta page) followed by the sha256 etcd appends to the
// snapshots it streams.
func snapshotIntegrity(data []byte) error {
	const bboltMagic, metaMagicOffset = 0xED0CDAED, 16 // the page header, then the meta page's magic
	if len(data) < 4096+sha256.Size {
		return fmt.Errorf("%d bytes: too small for a bbolt file and its hash", len(data))
	}
	if m := binary.LittleEndian.Uint32(data[metaMagicOffset:]); m != bboltMagic {
		return fmt.Errorf("bbolt magic %#x, want %#x", m, bboltMagic)
	}
	body, trailer := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], trailer) {
		return fmt.Errorf("the trailing sha256 %x is not that of the %d bytes before it (%x)", trailer, len(body), sum)
	}
	return nil
}

// restorePodsSeen records, while a restore runs, where its pods ran and how each of their
// containers ended: the pods are deleted once the cluster formed.
type restorePodsSeen struct {
	mu   sync.Mutex
	pods map[string]string // pod name -> "node: container image exit code, ..."
}

// watchRestorePods lists the restore pods of ns every half second until stop is closed.
func watchRestorePods(ns string, stop <-chan struct{}) *restorePodsSeen {
	seen := &restorePodsSeen{pods: map[string]string{}}
	go func() {
		for {
			pods := &corev1.PodList{}
			if err := k8s.List(context.Background(), pods, client.InNamespace(ns),
				client.MatchingLabels{"app.kubernetes.io/component": "restore"}); err == nil {
				seen.mu.Lock()
				for _, p := range pods.Items {
					var parts []string
					for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
						state := "not finished"
						if term := cs.State.Terminated; term != nil {
							state = fmt.Sprintf("exit %d", term.ExitCode)
						}
						parts = append(parts, fmt.Sprintf("%s (%s) %s", cs.Name, cs.Image, state))
					}
					if len(parts) > 0 {
						seen.pods[p.Name] = p.Spec.NodeName + ": " + strings.Join(parts, ", ")
					}
				}
				seen.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return seen
}

func (s *restorePodsSeen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for name, what := range s.pods {
		lines = append(lines, name+" on "+what)
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}

// keysUnder reads every key under prefix from cli in one linearizable read, with the revision
// it was read at.
func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) (map[string]string, int64) {
	t.Helper()
	resp, err := cli.Get(tctx(t), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("failed to read %s*: %v", prefix, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out, resp.Header.Revision
}

// TestBackupToMinIOAndRestoreOnRealNodes is the README's backup and restore on real nodes: a
// 3-member cluster with the secure defaults holding a few thousand keys is backed up by a
// one-shot EtcdBackup to an S3 store (MinIO on the lane's bridge, plain HTTP, which the lane's
// operator is allowed to reach); the stored object is read back and checked on its own; a new
// cluster in another restricted namespace is bootstrapped from that object, its restore pods
// running the operator's image (prepare, finish) and etcd's (etcdutl) under restricted Pod
// Security on the lane's nodes. The new cluster holds every key with its value, read from
// etcd, at a revision no lower than the backup's, under a cluster ID of its own, and not the
// write made after the backup.
func TestBackupToMinIOAndRestoreOnRealNodes(t *testing.T) {
	const (
		src, dst, name = "backup-src", "backup-dst", "etcd"
		version        = "3.6.16"
		prefix         = "/lane/backup/"
		// 3000 keys of 4 KiB make a snapshot of more than one 8 MiB upload part.
		keys, valueSize = 3000, 4096
	)
	requireOutboundPolicy(t)
	s3 := minio.StartOn(t, realnode.BridgeIP)
	t.Logf("MinIO at %s", s3.Endpoint)
	secure := func() *v1alpha1.TLSSpec {
		return &v1alpha1.TLSSpec{Client: &v1alpha1.ClientTLS{Certificates: []v1alpha1.ClientCertificate{{Name: "app"}}}}
	}
	appCert := v1alpha1.ClientCertificateSecretName(name, "app")

	restrictedNamespace(t, src)
	srcCreds := s3CredentialsSecret(t, src, s3)
	if err := k8s.Create(context.Background(), &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: name},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: ptrTo[int32](3), Version: version, TLS: secure(), NetworkPolicy: laneHostAllowed()},
	}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, src, name, 3, version, 5*time.Minute)
	srcCli := etcdClient(t, src, name, appCert, memberEndpoints(src, name, 3), false)

	// Distinct values, so that a key restored with another key's value shows.
	written := make(map[string]string, keys)
	for i := range keys {
		k := fmt.Sprintf("%s%05d", prefix, i)
		written[k] = k + strings.Repeat("v", valueSize-len(k))
	}
	writeStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for k := range work {
				if _, err := srcCli.Put(ctx, k, written[k]); err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
				}
			}
		})
	}
	for k := range written {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d keys of %d bytes written in %.1fs", keys, valueSize, time.Since(writeStart).Seconds())
	srcID := clusterIDOf(t, srcCli)

	// A one-shot backup with its own destination, as the README's "Backups" section shows.
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: "before-restore"},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: name, Destination: &v1alpha1.BackupDestination{S3: &v1alpha1.S3Destination{
			Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: "lane/" + src, CredentialsSecret: srcCreds,
		}}}}
	backupStart := time.Now()
	if err := k8s.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// Polled often: the backup of a few MiB takes about a second, and its status times are
	// whole seconds.
	eventually(t, 3*time.Minute, 200*time.Millisecond, "EtcdBackup "+b.Name+" Succeeded", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		switch b.Status.Phase {
		case v1alpha1.BackupSucceeded:
			return nil
		case v1alpha1.BackupFailed:
			t.Fatalf("backup failed after %d attempts: %+v (operator logs under %s)", b.Status.Attempts, b.Status.Conditions, filepath.Join(laneDir, "logs"))
		}
		return fmt.Errorf("phase %q: %+v", b.Status.Phase, b.Status.Conditions)
	})
	backupTook := time.Since(backupStart)
	// A write after the backup succeeded: the restored cluster must not have it.
	const after = "/lane/after-backup"
	if _, err := srcCli.Put(tctx(t), after, "x"); err != nil {
		t.Fatal(err)
	}

	// The stored object, read back from MinIO: present, not empty, an intact etcd snapshot,
	// and the bytes the backup's status describes.
	loc := "s3://" + s3.Bucket + "/"
	if !strings.HasPrefix(b.Status.Location, loc) {
		t.Fatalf("backup location %q is not in bucket %s", b.Status.Location, s3.Bucket)
	}
	key := strings.TrimPrefix(b.Status.Location, loc)
	obj, err := s3.Client(t).GetObject(context.Background(), s3.Bucket, key, miniogo.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatalf("failed to read object %s from MinIO: %v", key, err)
	}
	if len(data) == 0 {
		t.Fatalf("object %s is empty", key)
	}
	if err := snapshotIntegrity(data); err != nil {
		t.Fatalf("object %s is not an intact etcd snapshot: %v", key, err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != b.Status.SHA256 || int64(len(data)) != b.Status.Size {
		t.Fatalf("object %s: sha256 %s, %d bytes; the backup records %s, %d bytes", key, got, len(data), b.Status.SHA256, b.Status.Size)
	}
	if b.Status.EtcdVersion != version || b.Status.Revision <= int64(keys) {
		t.Fatalf("backup status: etcd %q, revision %d after %d writes", b.Status.EtcdVersion, b.Status.Revision, keys)
	}
	t.Logf("backup %s: %d bytes at revision %d from %s, Succeeded %.1fs after its creation (%d attempts)",
		key, len(data), b.Status.Revision, b.Status.Member, backupTook.Seconds(), b.Status.Attempts)

	// A new cluster in another namespace, bootstrapped from the object.
	restrictedNamespace(t, dst)
	dstCreds := s3CredentialsSecret(t, dst, s3)
	stop := make(chan struct{})
	seen := watchRestorePods(dst, stop)
	restoreStart := time.Now()
	if err := k8s.Create(context.Background(), &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: dst, Name: name},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: ptrTo[int32](3), Version: version, TLS: secure(), NetworkPolicy: laneHostAllowed(),
			Bootstrap: &v1alpha1.BootstrapSpec{FromObject: &v1alpha1.SnapshotObject{
				S3:          v1alpha1.S3Destination{Endpoint: s3.Endpoint, Bucket: s3.Bucket, CredentialsSecret: dstCreds},
				Key:         key,
				EtcdVersion: b.Status.EtcdVersion,
				SHA256:      b.Status.SHA256,
			}}},
	}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, dst, name, 3, version, 6*time.Minute)
	restoreTook := time.Since(restoreStart)
	close(stop)
	t.Logf("restored cluster Available %.1fs after its creation; restore pods: %s", restoreTook.Seconds(), seen)

	// The evidence is etcd's: every key with its value, at a revision no lower than the
	// backup's, in a cluster of its own whose members all agree on it.
	dstCli := etcdClient(t, dst, name, appCert, memberEndpoints(dst, name, 3), false)
	got, rev := keysUnder(t, dstCli, prefix)
	var diff []string
	for k, v := range written {
		if g, ok := got[k]; !ok {
			diff = append(diff, k+" missing")
		} else if g != v {
			diff = append(diff, fmt.Sprintf("%s has a value of %d bytes that is not the one written", k, len(g)))
		}
	}
	if len(got) != len(written) {
		diff = append(diff, fmt.Sprintf("%d keys under %s, %d written", len(got), prefix, len(written)))
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		t.Fatalf("the restored cluster differs from what was written (%d differences), first: %v", len(diff), diff[:min(5, len(diff))])
	}
	if resp, err := dstCli.Get(tctx(t), after); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the write made after the backup: %v, %d keys in the restored cluster", err, len(resp.Kvs))
	}
	if rev < b.Status.Revision {
		t.Fatalf("the restored cluster is at revision %d, before the backup's %d", rev, b.Status.Revision)
	}
	dstID := clusterIDOf(t, dstCli)
	if dstID == srcID {
		t.Fatalf("the restored cluster has the source's cluster ID %x", srcID)
	}
	ml, err := dstCli.MemberList(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			t.Fatalf("member %s (%x) of the restored cluster is a learner", m.Name, m.ID)
		}
	}
	for _, ep := range memberEndpoints(dst, name, 3) {
		st, err := dstCli.Status(tctx(t), ep)
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if st.Header.ClusterId != dstID {
			t.Fatalf("%s is in cluster %x, not the restored cluster %x", ep, st.Header.ClusterId, dstID)
		}
	}
	if len(ml.Members) != 3 {
		t.Fatalf("the restored cluster lists %d members", len(ml.Members))
	}
	t.Logf("restored: %d keys read back at revision %d (backup's %d), cluster %x (source %x), 3 voters",
		len(got), rev, b.Status.Revision, dstID, srcID)
}

// clusterIDOf is the cluster ID in the header of a member list answered through a quorum.
func clusterIDOf(t *testing.T, cli *clientv3.Client) uint64 {
	t.Helper()
	resp, err := cli.MemberList(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.ClusterId
}

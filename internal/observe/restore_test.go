package observe

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLostQuorumCountsFromTheFirstPassThatSawIt: the time a cluster has been without quorum
// counts from the first pass that saw it lost, until a pass sees it back; clusters are apart.
func TestLostQuorumCountsFromTheFirstPassThatSawIt(t *testing.T) {
	var l LostQuorum
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := l.LostSince("a"); !got.IsZero() {
		t.Fatalf("nothing seen yet: lost since %s", got)
	}
	if got := l.Observe("a", true, t0); !got.Equal(t0) {
		t.Fatalf("first pass without quorum: %s, want %s", got, t0)
	}
	if got := l.Observe("a", true, t0.Add(time.Minute)); !got.Equal(t0) {
		t.Fatalf("a later pass moved the start to %s", got)
	}
	if got := l.LostSince("b"); !got.IsZero() {
		t.Fatalf("another cluster: lost since %s", got)
	}
	if got := l.Observe("a", false, t0.Add(2*time.Minute)); !got.IsZero() || !l.LostSince("a").IsZero() {
		t.Fatalf("quorum back: lost since %s", l.LostSince("a"))
	}
	if got := l.Observe("a", true, t0.Add(3*time.Minute)); !got.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("lost again: counts from %s", got)
	}
}

// TestRecoveryPodsHoldersOfData: under claims, the claim holds the data and its stamp (a pod
// without a claim holds none); under emptyDir storage, the pod does; a terminated pod holds no
// claim; objects of other StatefulSets are not members.
func TestRecoveryPodsHoldersOfData(t *testing.T) {
	stamp := map[string]string{MemberIDAnnotation: "a1"}
	now := metav1.Now()
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-0", UID: "p0", Annotations: stamp}},
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-2", UID: "p2"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-0"}},
	}
	claims := []corev1.PersistentVolumeClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "data-etcd-0", UID: "c0", Annotations: stamp}},
		{ObjectMeta: metav1.ObjectMeta{Name: "data-etcd-1", UID: "c1", DeletionTimestamp: &now}},
		{ObjectMeta: metav1.ObjectMeta{Name: "backups"}},
	}
	got := recoveryPods("etcd", false, pods, claims)
	if len(got) != 3 || got[0].Name != "etcd-0" || got[1].Name != "etcd-1" || got[2].Name != "etcd-2" {
		t.Fatalf("ordinals %+v", got)
	}
	if p := got[0]; !p.Exists || !p.PVCExists || p.PVCUID != "c0" || p.DataStamp != "a1" || !p.PVCHeld {
		t.Fatalf("etcd-0: %+v", p)
	}
	if p := got[1]; p.Exists || !p.PVCExists || !p.PVCDeleting || p.DataStamp != "" || !p.NodeReady {
		t.Fatalf("etcd-1 (a claim being deleted, no pod): %+v", p)
	}
	if p := got[2]; !p.Exists || p.PVCHeld || p.PVCExists {
		t.Fatalf("etcd-2 (terminated, no claim): %+v", p)
	}

	got = recoveryPods("etcd", true, pods, claims)
	if len(got) != 2 {
		t.Fatalf("emptyDir: claims are no members' data: %+v", got)
	}
	if p := got[0]; !p.Ephemeral || !p.PVCExists || p.PVCUID != "p0" || p.DataStamp != "a1" {
		t.Fatalf("emptyDir etcd-0: %+v", p)
	}
}

// TestRestorePodReports: a failed restore pod says what its first failed container reported
// (or its exit reason), and a prepare container that succeeded reports the snapshot's revision.
func TestRestorePodReports(t *testing.T) {
	term := func(name string, code int32, msg, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, Reason: reason}}}
	}
	pod := &corev1.Pod{Status: corev1.PodStatus{Message: "evicted",
		InitContainerStatuses: []corev1.ContainerStatus{term("prepare", 0, `{"revision": 42}`, "Completed"), term("restore", 2, " \n", "Error")}}}
	if got, want := restorePodMessage(pod), "container restore exited with code 2: Error"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if got := restoredRevision(pod); got != 42 {
		t.Fatalf("revision %d, want 42", got)
	}
	pod.Status.InitContainerStatuses = nil
	if got := restorePodMessage(pod); got != "evicted" {
		t.Fatalf("no container failed: message %q", got)
	}
	if got := restoredRevision(pod); got != 0 {
		t.Fatalf("no report: revision %d", got)
	}
}

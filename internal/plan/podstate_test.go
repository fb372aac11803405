package plan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodStateReadsTheEtcdContainerByName (path 7 of issue 9): a sidecar listed after the etcd
// container must not decide whether the member runs, restarts or crash loops.
func TestPodStateReadsTheEtcdContainerByName(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	crashing := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}
	pod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: statuses}}
	}
	tests := []struct {
		name             string
		pod              *corev1.Pod
		running, looping bool
		restarts         int32
		ready            bool
	}{
		{"etcd runs, a crashing sidecar listed after it", pod(
			corev1.ContainerStatus{Name: "etcd", State: running, RestartCount: 0, Ready: true},
			corev1.ContainerStatus{Name: "zz-proxy", State: crashing, RestartCount: 7}), true, false, 0, true},
		{"etcd crash loops, a running sidecar listed after it", pod(
			corev1.ContainerStatus{Name: "etcd", State: crashing, RestartCount: 4},
			corev1.ContainerStatus{Name: "zz-logs", State: running, Ready: true}), false, true, 4, false},
		{"a sidecar listed before etcd", pod(
			corev1.ContainerStatus{Name: "aa-proxy", State: crashing, RestartCount: 9},
			corev1.ContainerStatus{Name: "etcd", State: running, RestartCount: 1, Ready: true}), true, false, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Pod{}
			PodState(p, tt.pod)
			if p.Running != tt.running || p.CrashLooping != tt.looping || p.RestartCount != tt.restarts || p.Ready != tt.ready {
				t.Fatalf("running %v crash looping %v restarts %d ready %v; want %v %v %d %v",
					p.Running, p.CrashLooping, p.RestartCount, p.Ready, tt.running, tt.looping, tt.restarts, tt.ready)
			}
		})
	}
}

// TestPodStateReadsCreationAndLastExit: the creation time and when the etcd container last
// ended (its current termination, else its last one), whatever a sidecar did.
func TestPodStateReadsCreationAndLastExit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ended := func(d time.Duration) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: metav1.NewTime(t0.Add(d - time.Second)), FinishedAt: metav1.NewTime(t0.Add(d))}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "etcd", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: ended(3 * time.Second)}, RestartCount: 1},
		{Name: "zz-proxy", LastTerminationState: corev1.ContainerState{Terminated: ended(9 * time.Second)}},
	}}}
	p := &Pod{}
	PodState(p, pod)
	if !p.CreatedAt.Equal(t0) || !p.LastExitAt.Equal(t0.Add(3*time.Second)) || !p.CrashLooping {
		t.Fatalf("created %v last exit %v crash looping %v", p.CreatedAt, p.LastExitAt, p.CrashLooping)
	}
	if !p.LastExitRunAt.Equal(t0.Add(2*time.Second)) || !p.RunAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("in back-off: the ended run started %v, the latest run %v; want both %v", p.LastExitRunAt, p.RunAt, t0.Add(2*time.Second))
	}
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: ended(5 * time.Second)}
	PodState(p, pod)
	if !p.LastExitAt.Equal(t0.Add(5*time.Second)) || !p.LastExitRunAt.Equal(t0.Add(4*time.Second)) {
		t.Errorf("terminated now: last exit %v of the run started %v", p.LastExitAt, p.LastExitRunAt)
	}
	// Running again after an exit: the latest run is the one running; the exit is the last one.
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(20 * time.Second))}}
	PodState(p, pod)
	if !p.RunAt.Equal(t0.Add(20*time.Second)) || !p.LastExitRunAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("running again: latest run %v, ended run %v", p.RunAt, p.LastExitRunAt)
	}
	pod.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "etcd", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}
	PodState(p, pod)
	if !p.LastExitAt.IsZero() || !p.LastExitRunAt.IsZero() || !p.RunAt.Equal(t0) {
		t.Errorf("never ended: last exit %v (run %v) kept from before, latest run %v", p.LastExitAt, p.LastExitRunAt, p.RunAt)
	}
	pod.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "etcd", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	PodState(p, pod)
	if !p.RunAt.IsZero() {
		t.Errorf("never ran: latest run %v kept from before", p.RunAt)
	}
}

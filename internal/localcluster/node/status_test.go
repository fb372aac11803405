package node

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func exited(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func waiting(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func backingOff(name string, code int32) corev1.ContainerStatus {
	s := waiting(name, reasonCrashLoopBackOff)
	s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code}
	return s
}

func TestPodPhase(t *testing.T) {
	type cs = []corev1.ContainerStatus
	const (
		always    = corev1.RestartPolicyAlways
		onFailure = corev1.RestartPolicyOnFailure
		never     = corev1.RestartPolicyNever
	)
	tests := []struct {
		name     string
		policy   corev1.RestartPolicy
		init     cs
		main     cs
		terminal bool
		want     corev1.PodPhase
	}{
		{"creating", always, nil, cs{waiting("a", reasonContainerCreating)}, false, corev1.PodPending},
		{"image unknown", always, nil, cs{waiting("a", reasonErrImagePull)}, false, corev1.PodPending},
		{"one of two started", always, nil, cs{running("a"), waiting("b", reasonContainerCreating)}, false, corev1.PodPending},
		{"running", always, nil, cs{running("a"), running("b")}, false, corev1.PodRunning},
		{"crash looping is running", always, nil, cs{backingOff("a", 1)}, false, corev1.PodRunning},
		{"exit 0 under Always restarts", always, nil, cs{exited("a", 0)}, false, corev1.PodRunning},
		{"exit 0 under OnFailure", onFailure, nil, cs{exited("a", 0)}, false, corev1.PodSucceeded},
		{"exit 1 under OnFailure restarts", onFailure, nil, cs{exited("a", 1)}, false, corev1.PodRunning},
		{"exit 1 under Never", never, nil, cs{exited("a", 1)}, false, corev1.PodFailed},
		{"exit 0 under Never", never, nil, cs{exited("a", 0)}, false, corev1.PodSucceeded},
		{"one still running", never, nil, cs{exited("a", 1), running("b")}, false, corev1.PodRunning},
		{"all exit 0 under Never", never, nil, cs{exited("a", 0), exited("b", 0)}, false, corev1.PodSucceeded},
		{"one of two failed under Never", never, nil, cs{exited("a", 0), exited("b", 1)}, false, corev1.PodFailed},
		{"init running", always, cs{running("i")}, cs{waiting("a", reasonPodInitializing)}, false, corev1.PodPending},
		{"init failed under Never", never, cs{exited("i", 2)}, cs{waiting("a", reasonPodInitializing)}, false, corev1.PodFailed},
		{"init failed under Always retries", always, cs{backingOff("i", 2)}, cs{waiting("a", reasonPodInitializing)}, false, corev1.PodPending},
		{"init done", never, cs{exited("i", 0)}, cs{running("a")}, false, corev1.PodRunning},
		{"deleted after clean exits", always, nil, cs{exited("a", 0)}, true, corev1.PodSucceeded},
		{"deleted after a kill", always, nil, cs{exited("a", 143)}, true, corev1.PodFailed},
		{"deleted before starting", always, nil, cs{waiting("a", reasonErrImagePull)}, true, corev1.PodFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podPhase(tt.policy, tt.init, tt.main, tt.terminal); got != tt.want {
				t.Errorf("podPhase = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestRestartDelayDoublesFromTheSecondRestart(t *testing.T) {
	base, max := 10*time.Second, 5*time.Minute
	want := []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for crashes, w := range want {
		if got := restartDelay(crashes, base, max); got != w {
			t.Errorf("restartDelay(%d) = %s, want %s", crashes, got, w)
		}
	}
	if got := restartDelay(1000, base, max); got != max {
		t.Errorf("restartDelay(1000) = %s, want %s", got, max)
	}
}

func TestShouldRestart(t *testing.T) {
	tests := []struct {
		policy corev1.RestartPolicy
		init   bool
		code   int32
		want   bool
	}{
		{corev1.RestartPolicyAlways, false, 0, true},
		{corev1.RestartPolicyAlways, false, 1, true},
		{corev1.RestartPolicyOnFailure, false, 0, false},
		{corev1.RestartPolicyOnFailure, false, 137, true},
		{corev1.RestartPolicyNever, false, 1, false},
		{corev1.RestartPolicyAlways, true, 0, false},
		{corev1.RestartPolicyAlways, true, 1, true},
		{corev1.RestartPolicyNever, true, 1, false},
	}
	for _, tt := range tests {
		if got := shouldRestart(tt.policy, tt.init, tt.code); got != tt.want {
			t.Errorf("shouldRestart(%s, init=%v, %d) = %v, want %v", tt.policy, tt.init, tt.code, got, tt.want)
		}
	}
}

func TestDesiredStatusKeepsTransitionTimesAndForeignConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "a"}}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		}},
	}
	ready := running("a")
	ready.Ready = true
	v := podView{ip: "127.77.0.9", sandboxReady: true, initialized: true, startTime: t0, statuses: []corev1.ContainerStatus{ready}}

	s := desiredStatus(pod, v, t0)
	if s.Phase != corev1.PodRunning || s.PodIP != "127.77.0.9" || s.HostIP != hostIP || !s.StartTime.Equal(&t0) {
		t.Fatalf("status = %+v", s)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.DisruptionTarget, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if c, ok := findCondition(s.Conditions, ct); !ok || c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}

	// Nothing changed a minute later: the status is equal, times included.
	pod.Status = s
	again := desiredStatus(pod, v, t1)
	if c, _ := findCondition(again.Conditions, corev1.PodReady); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("Ready moved to %s without a change", c.LastTransitionTime)
	}

	// The container turns unready: Ready and ContainersReady move, the others stay.
	v.statuses[0].Ready = false
	changed := desiredStatus(pod, v, t1)
	for _, ct := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		c, _ := findCondition(changed.Conditions, ct)
		if c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [a]" || !c.LastTransitionTime.Equal(&t1) {
			t.Errorf("condition %s = %+v, want False since t1", ct, c)
		}
	}
	if c, _ := findCondition(changed.Conditions, corev1.PodInitialized); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("Initialized moved to %s", c.LastTransitionTime)
	}
}

func TestDesiredStatusHonoursReadinessGates(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "a"}},
		ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}},
	}}
	ready := running("a")
	ready.Ready = true
	v := podView{sandboxReady: true, initialized: true, statuses: []corev1.ContainerStatus{ready}}
	s := desiredStatus(pod, v, metav1.Now())
	if c, _ := findCondition(s.Conditions, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" {
		t.Errorf("Ready = %+v, want False for the gate", c)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue}}
	s = desiredStatus(pod, v, metav1.Now())
	if c, _ := findCondition(s.Conditions, corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want True once the gate is", c)
	}
}

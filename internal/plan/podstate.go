package plan

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// EtcdContainer is the name of the etcd container in a member pod. Other containers (a
// service mesh's proxy, a log shipper, a platform team's sidecar) say nothing about the member.
const EtcdContainer = "etcd"

// PodState fills p from the member pod: existence, readiness, the etcd container's state
// (found by name, whatever other containers the pod has), the template revision.
func PodState(p *Pod, pod *corev1.Pod) {
	p.Exists, p.Deleting, p.UID = true, pod.DeletionTimestamp != nil, string(pod.UID)
	p.Revision = pod.Labels[appsv1.ControllerRevisionHashLabelKey]
	p.FailingSince, p.CreatedAt = pod.CreationTimestamp.Time, pod.CreationTimestamp.Time
	p.LastExitAt, p.LastExitRunAt, p.RunAt = time.Time{}, time.Time{}, time.Time{}
	p.Running, p.Started, p.CrashLooping, p.RestartCount, p.Problem = false, false, false, 0, ""
	for _, cond := range pod.Status.Conditions {
		switch {
		case cond.Type == corev1.PodReady:
			p.Ready = cond.Status == corev1.ConditionTrue
			if !p.Ready && !cond.LastTransitionTime.IsZero() {
				p.FailingSince = cond.LastTransitionTime.Time
			}
		case cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse:
			p.Problem = strings.TrimSpace(cond.Reason + ": " + cond.Message)
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			p.Problem = "init container " + cs.Name + ": " + ContainerProblem(cs)
			p.CrashLooping = w.Reason == "CrashLoopBackOff"
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != EtcdContainer {
			continue
		}
		// The etcd container's own readiness: the pod's Ready condition needs every
		// container, sidecars included.
		p.Running, p.Ready = cs.State.Running != nil, cs.Ready
		p.Started = p.Running && cs.Started != nil && *cs.Started
		p.RestartCount = cs.RestartCount
		p.CrashLooping = cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
		if t := cs.State.Terminated; t != nil {
			p.LastExitAt, p.LastExitRunAt = t.FinishedAt.Time, t.StartedAt.Time
		} else if t := cs.LastTerminationState.Terminated; t != nil {
			p.LastExitAt, p.LastExitRunAt = t.FinishedAt.Time, t.StartedAt.Time
		}
		p.RunAt = p.LastExitRunAt
		if r := cs.State.Running; r != nil {
			p.RunAt = r.StartedAt.Time
		}
		if prob := ContainerProblem(cs); prob != "" || p.Running {
			p.Problem = prob
		}
	}
}

// ContainerProblem describes why a container does not run: its waiting reason and message and
// how it last ended. Empty when it runs.
func ContainerProblem(cs corev1.ContainerStatus) string {
	if cs.State.Running != nil {
		return ""
	}
	var parts []string
	if w := cs.State.Waiting; w != nil && w.Reason != "" {
		s := w.Reason
		if w.Message != "" {
			s += ": " + w.Message
		}
		parts = append(parts, s)
	}
	last := cs.LastTerminationState.Terminated
	if t := cs.State.Terminated; t != nil {
		last = t
	}
	if last != nil {
		s := fmt.Sprintf("last exit code %d", last.ExitCode)
		if last.Reason != "" {
			s += " (" + last.Reason + ")"
		}
		if msg := strings.TrimSpace(last.Message); msg != "" {
			if len(msg) > 300 {
				msg = "..." + msg[len(msg)-300:]
			}
			s += ": " + msg
		}
		parts = append(parts, s)
	}
	if cs.RestartCount > 0 {
		parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
	}
	return strings.Join(parts, "; ")
}

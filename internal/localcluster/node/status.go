package node

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is what the node observes of a pod, the input of desiredStatus.
type podView struct {
	ip           string
	sandboxReady bool   // IP, names and volumes are set up
	setupMessage string // why the sandbox is not ready, if known
	initialized  bool   // every init container succeeded
	terminal     bool   // the pod's processes ended for good (the pod is being deleted)
	startTime    metav1.Time
	initStatuses []corev1.ContainerStatus
	statuses     []corev1.ContainerStatus
}

// desiredStatus is the status the node reports for pod given what it observes: the pod's
// current status with the node-owned fields (IPs, phase, start time, container statuses and
// the kubelet's conditions) replaced. Condition transition times move to now only when a
// condition's status changes, so equal observations give an equal status.
func desiredStatus(pod *corev1.Pod, v podView, now metav1.Time) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.HostIP = hostIP
	s.HostIPs = []corev1.HostIP{{IP: hostIP}}
	if v.ip != "" {
		s.PodIP = v.ip
		s.PodIPs = []corev1.PodIP{{IP: v.ip}}
	}
	if s.StartTime == nil {
		st := v.startTime
		s.StartTime = &st
	}
	s.InitContainerStatuses = append([]corev1.ContainerStatus(nil), v.initStatuses...)
	s.ContainerStatuses = append([]corev1.ContainerStatus(nil), v.statuses...)
	containers := len(pod.Spec.InitContainers) + len(pod.Spec.Containers) + len(pod.Spec.EphemeralContainers)
	limitTerminationMessages(s.InitContainerStatuses, containers)
	limitTerminationMessages(s.ContainerStatuses, containers)
	if s.Phase != corev1.PodSucceeded && s.Phase != corev1.PodFailed {
		s.Phase = podPhase(pod.Spec.RestartPolicy, v.initStatuses, v.statuses, v.terminal)
	}

	if _, ok := findCondition(s.Conditions, corev1.PodScheduled); !ok {
		s.Conditions = setCondition(s.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, now)
	}
	sandbox := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}
	if !v.sandboxReady {
		sandbox.Status = corev1.ConditionFalse
		sandbox.Message = v.setupMessage
	}
	s.Conditions = setCondition(s.Conditions, sandbox, now)

	initialized := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
	if !v.initialized {
		initialized.Status = corev1.ConditionFalse
		initialized.Reason = "ContainersNotInitialized"
		initialized.Message = "containers with incomplete status: " + names(v.initStatuses, func(c corev1.ContainerStatus) bool {
			return c.State.Terminated == nil || c.State.Terminated.ExitCode != 0
		})
	}
	s.Conditions = setCondition(s.Conditions, initialized, now)

	ready := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	unready := names(v.statuses, func(c corev1.ContainerStatus) bool { return !c.Ready })
	switch {
	case s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed:
		ready.Status, ready.Reason = corev1.ConditionFalse, "PodCompleted"
	case !v.initialized:
		ready.Status, ready.Reason = corev1.ConditionFalse, "ContainersNotInitialized"
		ready.Message = initialized.Message
	case unready != "[]":
		ready.Status, ready.Reason = corev1.ConditionFalse, "ContainersNotReady"
		ready.Message = "containers with unready status: " + unready
	}
	s.Conditions = setCondition(s.Conditions, ready, now)

	podReady := ready
	podReady.Type = corev1.PodReady
	if podReady.Status == corev1.ConditionTrue {
		var missing []string
		for _, g := range pod.Spec.ReadinessGates {
			if c, ok := findCondition(s.Conditions, g.ConditionType); !ok || c.Status != corev1.ConditionTrue {
				missing = append(missing, string(g.ConditionType))
			}
		}
		if len(missing) > 0 {
			podReady.Status, podReady.Reason = corev1.ConditionFalse, "ReadinessGatesNotReady"
			podReady.Message = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", missing)
		}
	}
	s.Conditions = setCondition(s.Conditions, podReady, now)
	return s
}

// podPhase is the pod's phase from its container statuses, as the kubelet's getPhase computes
// it for regular init containers: Pending until every container has started once, Running
// while any runs or will be restarted, Succeeded or Failed once everything ended for good.
// terminal says the pod's containers will not run again whatever the restart policy.
func podPhase(policy corev1.RestartPolicy, initStatuses, statuses []corev1.ContainerStatus, terminal bool) corev1.PodPhase {
	pendingInit, failedInit := 0, 0
	for _, s := range initStatuses {
		switch {
		case s.State.Terminated != nil:
			if s.State.Terminated.ExitCode != 0 {
				failedInit++
			}
		case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
			if s.LastTerminationState.Terminated.ExitCode != 0 {
				failedInit++
			}
		default:
			pendingInit++
		}
	}
	if failedInit > 0 && (policy == corev1.RestartPolicyNever || terminal) {
		return corev1.PodFailed
	}
	running, waiting, stopped, succeeded := 0, 0, 0, 0
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
			stopped++
		default:
			waiting++
		}
	}
	switch {
	case terminal && running == 0 && stopped > 0 && stopped == succeeded && waiting == 0:
		return corev1.PodSucceeded
	case terminal:
		return corev1.PodFailed
	case pendingInit > 0 || waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0 && policy == corev1.RestartPolicyAlways:
		return corev1.PodRunning
	case stopped > 0 && stopped == succeeded:
		return corev1.PodSucceeded
	case stopped > 0 && policy == corev1.RestartPolicyNever:
		return corev1.PodFailed
	case stopped > 0:
		return corev1.PodRunning // OnFailure: a failed container is restarting
	default:
		return corev1.PodPending
	}
}

// setCondition sets c in conds (replacing the condition of its type), moving its transition
// time to now only when its status changes.
func setCondition(conds []corev1.PodCondition, c corev1.PodCondition, now metav1.Time) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime = conds[i].LastTransitionTime
		c.LastProbeTime = conds[i].LastProbeTime
		if conds[i].Status != c.Status || c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		out := append([]corev1.PodCondition{}, conds...)
		out[i] = c
		return out
	}
	c.LastTransitionTime = now
	return append(append([]corev1.PodCondition{}, conds...), c)
}

func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) (corev1.PodCondition, bool) {
	for _, c := range conds {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

// names lists, as the kubelet's condition messages do, the containers that match.
func names(statuses []corev1.ContainerStatus, match func(corev1.ContainerStatus) bool) string {
	var out []string
	for _, s := range statuses {
		if match(s) {
			out = append(out, s.Name)
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

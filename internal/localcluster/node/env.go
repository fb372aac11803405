package node

import (
	"context"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// containerEnv resolves a container's environment as the kubelet does: envFrom sources first,
// then env in order, where a value's $(VAR) references see the variables defined before it.
// ip is the pod's IP (status.podIP may not be written yet).
func (w *podWorker) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string) (map[string]string, error) {
	env := map[string]string{}
	// The kubelet's service variables come first: envFrom and env may override them.
	if host, port, err := net.SplitHostPort(w.n.cfg.APIServer); err == nil {
		env["KUBERNETES_SERVICE_HOST"] = host
		env["KUBERNETES_SERVICE_PORT"] = port
		env["KUBERNETES_SERVICE_PORT_HTTPS"] = port
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.n.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && ptr.Deref(from.ConfigMapRef.Optional, false) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("failed to get configmap %s: %w", from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := w.n.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && ptr.Deref(from.SecretRef.Optional, false) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("failed to get secret %s: %w", from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for k, v := range data {
			if name := from.Prefix + k; !strings.Contains(name, "=") {
				env[name] = v
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = expand(e.Value, mapLookup(env))
			continue
		}
		v, ok, err := w.envSource(ctx, pod, c, e.ValueFrom, ip)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env[e.Name] = v
		}
	}
	return env, nil
}

// envSource resolves a valueFrom; ok is false for a missing optional key.
func (w *podWorker) envSource(ctx context.Context, pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource, ip string) (value string, ok bool, err error) {
	switch {
	case src.FieldRef != nil:
		v, err := podField(pod, src.FieldRef.FieldPath, ip)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := w.resourceField(c, src.ResourceFieldRef)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		optional := ptr.Deref(ref.Optional, false)
		cm, err := w.n.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && optional {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("failed to get configmap %s: %w", ref.Name, err)
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %s has no key %q", ref.Name, ref.Key)
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		optional := ptr.Deref(ref.Optional, false)
		s, err := w.n.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && optional {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("failed to get secret %s: %w", ref.Name, err)
		}
		if v, ok := s.Data[ref.Key]; ok {
			return string(v), true, nil
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
	default:
		return "", false, fmt.Errorf("unsupported valueFrom source")
	}
}

// podField is the downward API value of a pod field path. ip stands for status.podIP.
func podField(pod *corev1.Pod, fieldPath, ip string) (string, error) {
	if key, ok := subscript(fieldPath, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(fieldPath, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	case "status.podIP", "status.podIPs":
		return ip, nil
	default:
		return "", fmt.Errorf("unsupported field path %q", fieldPath)
	}
}

// subscript parses prefix['key'].
func subscript(fieldPath, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(fieldPath, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap renders a map as the downward API does: key="value" lines, sorted by key.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// resourceField is a resourceFieldRef's value: the container's limit or request, divided by
// the divisor and rounded up; a missing limit stands for the node's allocatable amount.
func (w *podWorker) resourceField(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		q, ok = w.n.nodeStatus().Allocatable[corev1.ResourceName(name)]
	}
	if !ok {
		return "0", nil
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == string(corev1.ResourceCPU) {
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
}

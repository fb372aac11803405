// Package podsecurity holds every pod a render would run, and the pods the operator creates
// itself, to a Kubernetes Pod Security Standards level, restricted unless the cluster admin
// chose otherwise with the operator's --pod-security-level. The standard's checks are the
// upstream policy library's (k8s.io/pod-security-admission/policy, what the API server's
// PodSecurity admission runs); to them the package adds etcd-pilot's rules on identity: no
// service-account token in the pod, and no service account but the render's own (or the
// namespace's default). It is pure: objects in, a list of what is refused out.
//
// A render is the embedded chart or a platform team's chart with a tenant's values and
// spec.chart.patches on top; the tenant may want out of the namespace through it. The chart's
// values schema keeps the embedded chart's pods restricted, but neither a patch nor a chart
// from spec.chart.source goes through that schema: this check runs on the final objects.
package podsecurity

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Level is a Pod Security Standards level. The zero value is Restricted: whoever builds a
// render without choosing gets the strictest.
type Level string

// The levels, strictest first.
const (
	// Restricted is the standard's restricted profile and etcd-pilot's identity rules.
	Restricted Level = "restricted"
	// Baseline is the standard's baseline profile (no privileged containers, host
	// namespaces, hostPath volumes, host ports or added capabilities beyond the default set)
	// and etcd-pilot's identity rules.
	Baseline Level = "baseline"
	// Privileged checks nothing.
	Privileged Level = "privileged"
)

// Levels are the values --pod-security-level takes, strictest first.
var Levels = []Level{Restricted, Baseline, Privileged}

// ParseLevel reads a level by its name; empty is Restricted.
func ParseLevel(s string) (Level, error) {
	if s == "" {
		return Restricted, nil
	}
	for _, l := range Levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("failed to parse the Pod Security level %q: want restricted, baseline or privileged", s)
}

// OrRestricted returns l, or Restricted when l is empty.
func (l Level) OrRestricted() Level {
	if l == "" {
		return Restricted
	}
	return l
}

// DefaultServiceAccount is the ServiceAccount of a pod that names none: the namespace's own.
// A pod may use it (without its token) whatever the render holds.
const DefaultServiceAccount = "default"

// Error lists every refused field of every pod a render or the operator would run.
type Error struct {
	// Level is the level the pods were held to.
	Level Level
	// Violations each name the object, where its pod spec is, and the container and field.
	Violations []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("the render runs pods outside the %s Pod Security level the operator holds every render to (only the operator's --pod-security-level, set by the cluster admin, relaxes it): %s",
		e.Level, strings.Join(e.Violations, "; "))
}

// Check holds the pod specs of objs (a render after its patches) to level, and returns nil or
// an *Error naming every refused field. Pod specs are found wherever an object holds one,
// whatever its kind: a map with a list of containers (spec of a Pod, spec.template.spec of a
// StatefulSet, Deployment, DaemonSet, ReplicaSet or Job, spec.jobTemplate.spec.template.spec
// of a CronJob, the same inside a custom resource). A pod may run as a ServiceAccount that
// objs hold, or as the namespace's default one (see identity).
func Check(objs []*unstructured.Unstructured, level Level) error {
	level = level.OrRestricted()
	if level == Privileged {
		return nil
	}
	accounts := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" && o.GroupVersionKind().Group == "" {
			accounts[o.GetName()] = true
		}
	}
	var out []string
	for _, o := range objs {
		where := o.GetKind() + " " + o.GetName()
		walk(o.Object, "", func(path string, meta, spec map[string]any) {
			out = append(out, checkUnstructured(where, path, meta, spec, level, accounts)...)
		})
	}
	return errorOf(level, out)
}

// CheckPod holds a pod the operator builds (a backup or restore pod) to level: it runs as the
// namespace's default ServiceAccount, without a token.
func CheckPod(pod *corev1.Pod, level Level) error {
	level = level.OrRestricted()
	if level == Privileged {
		return nil
	}
	where := "Pod " + pod.Name + ": spec"
	out := evaluate(where, &pod.ObjectMeta, &pod.Spec, level)
	out = append(out, identity(where, &pod.Spec, nil)...)
	return errorOf(level, out)
}

func errorOf(level Level, violations []string) error {
	if len(violations) == 0 {
		return nil
	}
	return &Error{Level: level, Violations: violations}
}

// walk calls found with every pod spec under m (one holding a list of containers), the
// dotted path to it, and the metadata next to it (the pod template's), if any. It does not
// look inside a pod spec: none holds another.
func walk(m map[string]any, path string, found func(path string, meta, spec map[string]any)) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // one order of messages for one render
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		switch v := m[k].(type) {
		case map[string]any:
			if isPodSpec(v) {
				meta, _ := m["metadata"].(map[string]any)
				found(p, meta, v)
				continue
			}
			walk(v, p, found)
		case []any:
			for i, item := range v {
				if im, ok := item.(map[string]any); ok {
					walk(im, p+"["+strconv.Itoa(i)+"]", found)
				}
			}
		}
	}
}

func isPodSpec(m map[string]any) bool {
	_, ok := m["containers"].([]any)
	return ok
}

// checkUnstructured reads one pod spec (and its template's metadata) as the API server would
// and checks it. What cannot be read as a pod spec is refused: the API server would read it
// some way, and the check must have seen that way.
func checkUnstructured(where, path string, meta, spec map[string]any, level Level, accounts map[string]bool) []string {
	at := where + ": " + path
	ps := &corev1.PodSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, ps); err != nil {
		return []string{fmt.Sprintf("%s cannot be read as a pod spec: %v", at, err)}
	}
	om := &metav1.ObjectMeta{}
	if meta != nil {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(meta, om); err != nil {
			return []string{fmt.Sprintf("%s: the pod template's metadata cannot be read: %v", at, err)}
		}
	}
	return append(evaluate(at, om, ps, level), identity(at, ps, accounts)...)
}

// evaluator runs the upstream checks; built once (the registry is immutable).
var evaluator = sync.OnceValues(func() (policy.Evaluator, error) {
	return policy.NewEvaluator(policy.DefaultChecks(), nil)
})

// evaluate runs the Pod Security Standards' checks of level at the latest policy version.
// Each refusal reads "<where>: <what> (<which containers, volumes or fields>)".
func evaluate(where string, meta *metav1.ObjectMeta, spec *corev1.PodSpec, level Level) []string {
	e, err := evaluator()
	if err != nil {
		// The library refuses its own check list: refuse everything rather than pass it.
		return []string{fmt.Sprintf("%s: the Pod Security checks could not be built: %v", where, err)}
	}
	lv := psaapi.LevelVersion{Level: psaapi.Level(level), Version: psaapi.LatestVersion()}
	var out []string
	for _, r := range e.EvaluatePod(lv, meta, spec) {
		if r.Allowed {
			continue
		}
		msg := where + ": " + r.ForbiddenReason
		if r.ForbiddenReason == "" {
			msg = where + ": " + policy.UnknownForbiddenReason
		}
		if r.ForbiddenDetail != "" {
			msg += " (" + r.ForbiddenDetail + ")"
		}
		out = append(out, msg)
	}
	return out
}

// identity is etcd-pilot's own rule set on a pod's Kubernetes identity. etcd and the
// operator's agents need no Kubernetes API access: the token is not mounted automatically.
// The pod runs as a ServiceAccount of the render (the operator creates it and never takes an
// existing one over, so it holds only what the tenant grants it) or as the namespace's
// default, never as one a tenant picks (a ServiceAccount others granted roles or a cloud
// identity). A projected token (for a sidecar that talks to another service) needs an
// audience, so it is no Kubernetes API token by default, and the render's own ServiceAccount,
// never the default one.
func identity(where string, spec *corev1.PodSpec, rendered map[string]bool) []string {
	var out []string
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		out = append(out, where+".automountServiceAccountToken must be false: etcd-pilot's pods need no Kubernetes API access, and a token would give the pod the ServiceAccount's permissions")
	}
	account := DefaultServiceAccount
	for _, field := range []struct{ name, value string }{{"serviceAccountName", spec.ServiceAccountName}, {"serviceAccount", spec.DeprecatedServiceAccount}} {
		if field.value == "" {
			continue
		}
		account = field.value
		if field.value != DefaultServiceAccount && !rendered[field.value] {
			own := "it creates none"
			if len(rendered) > 0 {
				own = "it creates " + strings.Join(sortedKeys(rendered), ", ")
			}
			out = append(out, fmt.Sprintf("%s.%s %q is neither a ServiceAccount of this render (%s) nor %s",
				where, field.name, field.value, own, DefaultServiceAccount))
		}
	}
	for i, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for j, s := range v.Projected.Sources {
			switch {
			case s.ServiceAccountToken == nil:
			case s.ServiceAccountToken.Audience == "":
				out = append(out, fmt.Sprintf("%s.volumes[%d] %q: sources[%d].serviceAccountToken needs an audience (without one it is a Kubernetes API token, which etcd-pilot's pods do not need)", where, i, v.Name, j))
			case !rendered[account]:
				out = append(out, fmt.Sprintf("%s.volumes[%d] %q: sources[%d].serviceAccountToken is a token of ServiceAccount %s, which this render does not create: only the render's own ServiceAccount may be projected", where, i, v.Name, j, account))
			}
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

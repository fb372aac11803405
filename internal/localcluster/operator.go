package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// The operator's Deployment, as config/default installs it.
const (
	OperatorNamespace  = "etcd-pilot-system"
	OperatorDeployment = "etcd-pilot"
	// OperatorContainer is the Deployment's container that runs the manager.
	OperatorContainer = "manager"
	// operatorReadyTimeout bounds the wait for the first operator pod to be Ready at start.
	operatorReadyTimeout = 2 * time.Minute
	// operatorStopTimeout bounds the wait for the operator's pods to be gone after a scale
	// to zero (their grace period is 10 s).
	operatorStopTimeout = time.Minute
)

// operator is the operator installed from config/default: a Deployment whose pods the process
// nodes run from the operator's image (OperatorBinary), under the ServiceAccount, roles and
// bindings of config/, with a projected service-account token. Stopping it scales the
// Deployment to zero; starting it scales it back, with the extra environment tests ask for.
type operator struct {
	c *Cluster

	mu       sync.Mutex
	replicas int32           // the Deployment's replicas as installed
	baseEnv  []corev1.EnvVar // the manager container's env as installed
	extra    []string        // KEY=VALUE added by StartOperator
}

// DefaultExtraSANsArg is the operator argument the local cluster adds before
// Options.OperatorArgs: members reach each other's peer port from 127.0.0.1.
const DefaultExtraSANsArg = "--default-extra-sans=127.0.0.1"

// installOperator applies config/default with kubectl, as a user installs the operator (with
// DefaultExtraSANsArg and Options.OperatorArgs added to the manager's args), and waits until one of its pods is Ready.
func (c *Cluster) installOperator(ctx context.Context) error {
	kubectl := filepath.Join(c.opts.Binaries.Kube, "kubectl")
	dir := filepath.Join(c.opts.Binaries.Root, "config", "default")
	// Members dial each other from 127.0.0.1 here (process nodes share the host's network):
	// the certificates of a cluster that gets TLS by default name it too. The caller's args
	// come after it (the flag package keeps a repeated flag's last value).
	args := append([]string{DefaultExtraSANsArg}, c.opts.OperatorArgs...)
	build := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	build.Stderr = &stderr
	manifest, err := build.Output()
	if err != nil {
		return fmt.Errorf("failed to build config/default (kubectl kustomize): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if manifest, err = withOperatorArgs(manifest, args); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifest)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failed to install the operator (kubectl apply -k config/default): %w: %s", err, strings.TrimSpace(out.String()))
	}
	c.log.Info("applied config/default", "output", out.String())
	d, err := c.client.AppsV1().Deployments(OperatorNamespace).Get(ctx, OperatorDeployment, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("config/default installed no Deployment %s/%s: %w", OperatorNamespace, OperatorDeployment, err)
	}
	mgr := operatorContainer(d)
	if mgr == nil {
		return fmt.Errorf("the Deployment %s/%s of config/default has no container %q", OperatorNamespace, OperatorDeployment, OperatorContainer)
	}
	c.operator = &operator{c: c, replicas: ptr.Deref(d.Spec.Replicas, 1), baseEnv: slices.Clone(mgr.Env)}
	return c.operator.waitReady(ctx, operatorReadyTimeout)
}

// withOperatorArgs returns the manifest (YAML documents) with args added to the manager
// container's of the operator's Deployment; an error when it has none.
func withOperatorArgs(manifest []byte, args []string) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out bytes.Buffer
	found := false
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("failed to read config/default's objects: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		if u.GetKind() == "Deployment" && u.GetName() == OperatorDeployment {
			containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
			for i, c := range containers {
				ctr, ok := c.(map[string]any)
				if !ok || ctr["name"] != OperatorContainer {
					continue
				}
				have, _, _ := unstructured.NestedStringSlice(ctr, "args")
				all := make([]any, 0, len(have)+len(args))
				for _, a := range append(have, args...) {
					all = append(all, a)
				}
				ctr["args"] = all
				containers[i], found = ctr, true
			}
			if !found {
				return nil, fmt.Errorf("the Deployment %s of config/default has no container %q", OperatorDeployment, OperatorContainer)
			}
			if err := unstructured.SetNestedSlice(obj, containers, "spec", "template", "spec", "containers"); err != nil {
				return nil, err
			}
		}
		b, err := sigsyaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	if !found {
		return nil, fmt.Errorf("config/default has no Deployment %s to add %q to", OperatorDeployment, args)
	}
	return out.Bytes(), nil
}

func operatorContainer(d *appsv1.Deployment) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == OperatorContainer {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// pods lists the operator's pods.
func (o *operator) pods(ctx context.Context) ([]corev1.Pod, error) {
	d, err := o.c.client.AppsV1().Deployments(OperatorNamespace).Get(ctx, OperatorDeployment, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	list, err := o.c.client.CoreV1().Pods(OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitReady waits until a pod of the operator is Ready.
func (o *operator) waitReady(ctx context.Context, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := o.pods(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d pods, none Ready", len(pods))
		for _, p := range pods {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no pod of the operator's Deployment %s/%s became Ready within %s (%s; see the node logs in %s): %w",
			OperatorNamespace, OperatorDeployment, timeout, last, filepath.Join(o.c.opts.Dir, "nodes"), err)
	}
	return nil
}

// update changes the Deployment with f, retrying on conflicts.
func (o *operator) update(ctx context.Context, f func(d *appsv1.Deployment) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		deps := o.c.client.AppsV1().Deployments(OperatorNamespace)
		d, err := deps.Get(ctx, OperatorDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := f(d); err != nil {
			return err
		}
		_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
}

// stop scales the Deployment to zero and waits until its pods are gone: the operator's
// processes have exited (SIGTERM: the leader releases its lease).
func (o *operator) stop(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.update(ctx, func(d *appsv1.Deployment) error {
		d.Spec.Replicas = new(int32)
		return nil
	}); err != nil {
		return fmt.Errorf("failed to scale the operator's Deployment to 0: %w", err)
	}
	var left int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, operatorStopTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := o.pods(ctx)
		if err != nil {
			return false, nil
		}
		left = len(pods)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d pods of the operator still exist %s after scaling it to 0: %w", left, operatorStopTimeout, err)
	}
	return nil
}

// start scales the Deployment back to its installed replicas, with extra (KEY=VALUE) added to
// the manager's environment when extra is not nil (an empty extra drops earlier ones).
func (o *operator) start(ctx context.Context, extra []string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if extra != nil {
		for _, kv := range extra {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
			}
		}
		o.extra = slices.Clone(extra)
	}
	env := slices.Clone(o.baseEnv)
	for _, kv := range o.extra {
		k, v, _ := strings.Cut(kv, "=")
		env = slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == k })
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	err := o.update(ctx, func(d *appsv1.Deployment) error {
		mgr := operatorContainer(d)
		if mgr == nil {
			return fmt.Errorf("the operator's Deployment has no container %q", OperatorContainer)
		}
		mgr.Env = env
		d.Spec.Replicas = &o.replicas
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to scale the operator's Deployment to %d: %w", o.replicas, err)
	}
	return nil
}

// StopOperator stops the operator until StartOperator: its Deployment is scaled to zero.
func (c *Cluster) StopOperator() error {
	if c.operator == nil {
		return errors.New("this local cluster runs no operator (it was started with --operator=false)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), operatorStopTimeout+10*time.Second)
	defer cancel()
	return c.operator.stop(ctx)
}

// StartOperator starts the operator again after StopOperator: its Deployment is scaled back.
// env (KEY=VALUE) is added to the operator's environment from now on (tests set
// ETCD_PILOT_FAULT_AFTER with it); nil keeps the environment it had, empty drops what
// earlier calls added.
func (c *Cluster) StartOperator(env []string) error {
	if c.operator == nil {
		return errors.New("this local cluster runs no operator (it was started with --operator=false)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.operator.start(ctx, env)
}

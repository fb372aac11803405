package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// SandboxCommand, when set, starts the sandbox `render --live` renders a chart from the cluster
// in (charts.Budget.Command); nil runs this executable. Tests built with the race detector
// set it (internal/testutil/sandboxcmd).
var SandboxCommand []string

// liveFlags make render read the cluster: the live EtcdCluster (its UID gives the cluster
// token and the owner references), the chart ConfigMap of spec.chart.source with the cluster's
// capabilities, and the live StatefulSet whose claim templates the operator keeps.
type liveFlags struct {
	on         bool
	name       string
	namespace  string
	kubeconfig string
	// egress holds the pull of an OCI chart to the operator's outbound policy: pass the
	// manager's --allowed-endpoints and --allow-insecure-endpoints to pull what it pulls.
	egress egress.Flags
}

func (l *liveFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&l.on, "live", false, "read the live EtcdCluster (--name, --namespace; or the one -f names, with the file's spec) and what the operator reads besides it, and print exactly what the operator applies")
	fs.StringVar(&l.name, "name", "", "with --live and no -f: the EtcdCluster's name")
	fs.StringVar(&l.namespace, "namespace", "default", "with --live and no -f: the EtcdCluster's namespace")
	fs.StringVar(&l.namespace, "n", "default", "same as --namespace")
	fs.StringVar(&l.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	l.egress.Bind(fs)
}

func (l *liveFlags) render(ctx context.Context, in *inputFlags, embedded *charts.Renderer, stdin io.Reader, chartDir bool, level podsecurity.Level) ([]*unstructured.Unstructured, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = l.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("failed to create a client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create a discovery client: %w", err)
	}
	var c *v1alpha1.EtcdCluster
	stored := &v1alpha1.EtcdCluster{}
	if in.file != "" {
		if c, err = ReadCluster(in.file, stdin); err != nil {
			return nil, err
		}
		err = cl.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, stored)
		switch {
		case apierrors.IsNotFound(err):
			// Not created yet: it gets a UID, and so a token, only when created.
			return nil, fmt.Errorf("EtcdCluster %s/%s does not exist yet: its cluster token and owner references come from the UID it gets when created; render without --live shows the rest", c.Namespace, c.Name)
		case err != nil:
			return nil, fmt.Errorf("failed to get EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		// The file's spec over the live object's identity and status: what the operator
		// applies once the file is applied.
		c.UID, c.Generation, c.ResourceVersion, c.Status = stored.UID, stored.Generation, stored.ResourceVersion, stored.Status
		// Created under secure defaults or before them: the stored object says.
		delete(c.Annotations, v1alpha1.AnnotationDefaults)
		if values.SecureDefaults(stored) {
			values.MarkSecureDefaults(c)
		}
	} else {
		if l.name == "" {
			return nil, errors.New("--live needs --name (and --namespace), or -f with the manifest")
		}
		if err := cl.Get(ctx, types.NamespacedName{Namespace: l.namespace, Name: l.name}, stored); err != nil {
			return nil, fmt.Errorf("failed to get EtcdCluster %s/%s: %w", l.namespace, l.name, err)
		}
		c = stored
	}
	if !controllerutil.ContainsFinalizer(stored, v1alpha1.FinalizerName) {
		// The operator has not seen it yet: it marks it when it does.
		values.MarkSecureDefaults(c)
	}
	op, err := in.operator.operator()
	if err != nil {
		return nil, err
	}
	c = values.Effective(c, op)
	vals, err := in.values(c)
	if err != nil {
		return nil, err
	}
	r := embedded
	if !chartDir {
		policy, err := l.egress.Policy()
		if err != nil {
			return nil, err
		}
		// The tenant's chart renders in a sandbox with the operator's default budget.
		sb := charts.NewSandbox(charts.Budget{Command: SandboxCommand})
		if r, err = render.ChartFor(ctx, cl, disco, embedded, c, policy, sb); err != nil {
			return nil, err
		}
	}
	objs, err := render.DesiredFromValues(r, c, vals, level)
	if err != nil {
		return nil, err
	}
	sts := &appsv1.StatefulSet{}
	err = cl.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return objs, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get StatefulSet %s/%s: %w", c.Namespace, c.Name, err)
	}
	return objs, render.PinClaimTemplates(objs, sts)
}

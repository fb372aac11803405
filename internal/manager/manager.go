// Package manager builds the controller-runtime manager that runs etcd-pilot's controllers,
// with the cache and scheme they need. main and the envtest suites share it.
package manager

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Options configure the manager.
type Options struct {
	// MetricsAddr and ProbeAddr are listen addresses; "0" disables them.
	MetricsAddr string
	ProbeAddr   string
	// MetricsSecure serves metrics over HTTPS to clients the API server authenticates
	// (TokenReview) and authorizes (SubjectAccessReview: get on the /metrics URL), as
	// kubebuilder does; the operator's role grants it the two reviews.
	MetricsSecure bool
	// LeaderElect turns on leader election, for running more than one replica.
	LeaderElect bool
	// LeaderElectionNamespace is where the lease lives (default: the in-cluster namespace).
	LeaderElectionNamespace string
	// WatchNamespace limits the operator to one namespace; empty watches all.
	WatchNamespace string
	// ChartDir renders a chart from disk instead of the embedded one.
	ChartDir string
	// DialEtcd opens etcd clients (default etcd.DialVia the member pods' IPs).
	DialEtcd etcd.Dialer
	// EtcdTimeout bounds each etcd call (default 3s).
	EtcdTimeout time.Duration
	// AfterStep is called after every step the operator carried out (crash-safety tests).
	AfterStep func(kind string)
	// AgentImage is the operator's own image, run by the pods that write backups to claims.
	AgentImage string
	// BackupTimeout bounds one backup attempt (default controllers.DefaultBackupTimeout).
	BackupTimeout time.Duration
	// Operator is where the operator runs: a cluster's NetworkPolicy admits its pods to the
	// members.
	Operator values.Operator
	// Egress is the outbound policy of the connections to hosts tenants write: S3 endpoints
	// (in the operator and its restore pods), OCI chart registries, chart schema URLs
	// (egress.Default when nil: https only, no loopback, link-local or metadata address).
	Egress *egress.Policy
	// PprofAddr serves net/http/pprof on this address; "" or "0" (the default) disables it.
	PprofAddr string
	// QPS and Burst limit the operator's requests to the API server (client-go's token
	// bucket); 0 keeps the rest.Config's own (controller-runtime's default is 20 and 30).
	QPS   float32
	Burst int
	// SkipNameValidation lets tests build more than one manager in a process (controller
	// names are otherwise unique per process, for their metrics).
	SkipNameValidation bool
	// ChartBudget bounds what a chart of spec.chart.source may cost: its archive's size, and
	// the memory and time of its render, which runs in a child process (charts.Sandbox).
	// Zero limits take charts.Budget's defaults; the child is the operator's own executable
	// unless Command says otherwise (a test binary that calls charts.ServeIfSandbox).
	ChartBudget charts.Budget
	// StuckPassAfter is how long a pass may run before /healthz fails, so that the kubelet
	// restarts an operator whose workers are stuck (an EtcdBackup's pass, which streams a
	// snapshot, BackupTimeout longer). DefaultStuckPassAfter when 0; negative: never.
	StuckPassAfter time.Duration
}

// Scheme returns a scheme with the built-in kinds and etcd-pilot's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// New builds a manager with the EtcdCluster controller registered. The cache holds only the
// objects etcd-pilot manages (by label), so memory does not grow with the cluster's other
// StatefulSets and Services.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme := Scheme()
	if o.QPS > 0 || o.Burst > 0 {
		cfg = rest.CopyConfig(cfg)
		if o.QPS > 0 {
			cfg.QPS = o.QPS
		}
		if o.Burst > 0 {
			cfg.Burst = o.Burst
		}
	}
	managed := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue})
	member, _ := labels.Parse(v1alpha1.LabelCluster)
	byObject := map[client.Object]cache.ByObject{
		&appsv1.StatefulSet{}:           {Label: managed},
		&corev1.Service{}:               {Label: managed},
		&corev1.ServiceAccount{}:        {Label: managed},
		&policyv1.PodDisruptionBudget{}: {Label: managed},
		&networkingv1.NetworkPolicy{}:   {Label: managed},
		&corev1.ConfigMap{}:             {Label: managed},
		// Member pods keep only the fields the controllers read (stripPod).
		&corev1.Pod{}:                   {Label: managed, Transform: stripPod},
		&corev1.PersistentVolumeClaim{}: {Label: member},
		// Only the Secrets the operator writes (its CA and certificates) are cached; the
		// credentials of a backup destination and the certificates a user provides are read
		// one by one, by name, from the API server.
		&corev1.Secret{}: {Label: managed},
	}
	// managedFields are a large part of every object (server-side apply records each field's
	// manager) and nothing the operator decides reads them: the cache drops them, which at a
	// thousand clusters is tens of MiB.
	cacheOpts := cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
	if o.WatchNamespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.WatchNamespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOptions(o),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "etcd-pilot.etcdpilot.io",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A new leader must not act before the old one has stopped.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOpts,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.SkipNameValidation)},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create manager: %w", err)
	}
	var renderer *charts.Renderer
	if o.ChartDir != "" {
		renderer, err = charts.FromDir(o.ChartDir)
	} else {
		renderer, err = charts.Embedded()
	}
	if err != nil {
		return nil, err
	}
	dial := o.DialEtcd
	if dial == nil {
		// Members are reached at their pods' IPs, known before their names resolve.
		dial = etcd.DialVia(controllers.PodAddresses(mgr.GetClient()))
	}
	// One etcd client per cluster kept across passes, not a dial per pass.
	clients := etcd.NewClientCache(dial, etcd.CacheOptions{})
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create a discovery client: %w", err)
	}
	r := &controllers.EtcdClusterReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Scheme:       scheme,
		Renderer:     renderer,
		Discovery:    disco,
		ChartSandbox: charts.NewSandbox(o.ChartBudget),
		Recorder:     mgr.GetEventRecorder(controllers.FieldOwner),
		DialEtcd:     clients.Dial,
		ForgetEtcd:   clients.Forget,
		EtcdTimeout:  o.EtcdTimeout,
		AfterStep:    o.AfterStep,
		AgentImage:   o.AgentImage,
		Operator:     o.Operator,
		Egress:       o.Egress,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("failed to set up the EtcdCluster controller: %w", err)
	}
	br := &controllers.EtcdBackupReconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Scheme:      scheme,
		Renderer:    renderer,
		Recorder:    mgr.GetEventRecorder(controllers.FieldOwner),
		DialEtcd:    dial,
		EtcdTimeout: o.EtcdTimeout,
		Timeout:     o.BackupTimeout,
		AgentImage:  o.AgentImage,
		Operator:    o.Operator,
		Egress:      o.Egress,
	}
	if err := br.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("failed to set up the EtcdBackup controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("failed to add health check: %w", err)
	}
	if o.StuckPassAfter >= 0 {
		after := o.StuckPassAfter
		if after == 0 {
			after = DefaultStuckPassAfter
		}
		backup := o.BackupTimeout
		if backup <= 0 {
			backup = controllers.DefaultBackupTimeout
		}
		bounds := map[string]time.Duration{controllers.ControllerName: after, controllers.BackupControllerName: backup + after}
		if err := mgr.AddHealthzCheck("passes", stuckPasses(ctrlmetrics.Registry, bounds)); err != nil {
			return nil, fmt.Errorf("failed to add the stuck pass check: %w", err)
		}
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("failed to add ready check: %w", err)
	}
	return mgr, nil
}

// metricsOptions serves metrics on o.MetricsAddr, with authentication and authorization when
// o.MetricsSecure (a self-signed certificate unless one is mounted at the default folder).
func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		m.SecureServing, m.FilterProvider = true, filters.WithAuthenticationAndAuthorization
	}
	return m
}

// Package controllers holds etcd-pilot's reconcilers: decisions and status. Rendering goes
// through the charts package, applying through internal/apply and etcd calls through
// internal/etcd; this package imports neither Helm nor clientv3.
package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	unstructuredv1 "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/metrics"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/tlsswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// FieldOwner is the server-side apply field manager of everything etcd-pilot applies.
const FieldOwner = "etcd-pilot"

// ControllerName names the EtcdCluster controller in logs, metrics and events.
const ControllerName = "etcdcluster"

// Requeue intervals: a settled cluster is looked at again for its health; a changing one
// sooner, since not every change of etcd's state shows up as a Kubernetes event.
const (
	RequeueSettled     = 60 * time.Second
	RequeueProgressing = 5 * time.Second
)

type unstructured = unstructuredv1.Unstructured

// OwnedKinds are the kinds the chart renders. The controller watches them, prunes them and
// deletes them with the cluster.
var OwnedKinds = []schema.GroupVersionKind{
	appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"),
}

// EtcdClusterReconciler reconciles EtcdCluster objects.
type EtcdClusterReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server, past the cache: for the few reads a decision must
	// not take from a cache that may lag (a claim the cache does not show). Client when nil.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Renderer  *charts.Renderer
	Recorder  events.EventRecorder
	// DialEtcd opens etcd clients; in production an etcd.ClientCache's Dial over etcd.Dial.
	DialEtcd etcd.Dialer
	// ForgetEtcd, when set, closes the etcd clients DialEtcd keeps for a cluster (by UID);
	// called when the cluster is deleted.
	ForgetEtcd func(uid string)
	// OpenS3 opens S3 backup destinations (retention deletes there); objstore.NewS3 when nil.
	OpenS3 execute.StoreOpener
	// Egress is the outbound policy of the connections to hosts a tenant writes: S3
	// endpoints (here and in restore pods), OCI registries, chart schema URLs
	// (egress.Default when nil).
	Egress *egress.Policy
	// AgentImage is the operator's own image, run by the restore pods.
	AgentImage string
	// Operator is where the operator runs: a cluster's NetworkPolicy admits its pods.
	Operator values.Operator
	// EtcdTimeout bounds each etcd call of an observation.
	EtcdTimeout time.Duration
	// Discovery reads the cluster's version and API versions, which charts from
	// spec.chart.source see as .Capabilities; Helm's defaults when nil.
	Discovery discovery.DiscoveryInterface
	// ChartSandbox renders the charts of spec.chart.source within a memory and time budget,
	// in child processes; nil renders them in the operator's process.
	ChartSandbox *charts.Sandbox
	sources      render.Sources
	// AfterStep, when set, is called after every step the executor carried out, with the
	// step's kind. Tests of crash safety use it to stop the operator between two steps.
	AfterStep func(kind string)
	// MaxConcurrentReconciles is the number of clusters handled at once (default 4), so one
	// cluster whose etcd is slow to answer does not hold up the others.
	MaxConcurrentReconciles int

	once    sync.Once
	applier *apply.Applier
	// exec is the executor: every write of a step goes through it.
	exec *execute.Executor

	// compacted remembers the revision each cluster was last compacted to (maintenance).
	compacted observe.Compactions
	// quorumLoss remembers since when each cluster has been without quorum (restore).
	quorumLoss observe.LostQuorum

	// missing remembers since when member pods have been missing (see observe.MissingPods).
	missing observe.MissingPods

	// waker starts a pass when etcd shows what a waiting pass looked for (nil without a
	// manager: then only the requeue does).
	waker *etcdWaker
}

// cached is the pass's reader over the manager's cache (observe.Pass: the StatefulSet and
// the member pods read once per pass), or Client outside a pass.
func (r *EtcdClusterReconciler) cached(ctx context.Context) client.Client {
	return observe.PassOf(ctx, r.Client)
}

// apiReader is APIReader, or Client when none is set.
func (r *EtcdClusterReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// init fills the defaults; every entry point calls it, so a reconciler built by hand (a
// benchmark) works like one set up with a manager.
func (r *EtcdClusterReconciler) init() {
	r.once.Do(func() {
		if r.EtcdTimeout == 0 {
			r.EtcdTimeout = 3 * time.Second
		}
		if r.MaxConcurrentReconciles == 0 {
			r.MaxConcurrentReconciles = 4
		}
		r.sources.Embedded, r.sources.Reader, r.sources.Discovery, r.sources.Recorder = r.Renderer, r.apiReader(), r.Discovery, r.Recorder
		r.sources.Egress = r.Egress
		r.sources.Sandbox = r.ChartSandbox
		r.exec = &execute.Executor{
			Client: r.Client, APIReader: r.apiReader(), Scheme: r.Scheme, Recorder: r.Recorder, Dial: r.DialEtcd,
			EtcdTimeout: r.EtcdTimeout, AgentImage: r.AgentImage, Operator: r.Operator, OpenS3: r.OpenS3, AfterStep: r.AfterStep,
			Egress: r.Egress,
		}
		r.applier = &apply.Applier{Client: r.Client, Scheme: r.Scheme, FieldOwner: FieldOwner, Typed: builtinKinds}
	})
}

// The embedded chart's optional PodMonitor (monitoring.podMonitor) is applied as an extra
// kind (not watched: the Prometheus Operator's CRD may be missing).
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;create;patch;delete

// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=etcdpilot.io,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods;persistentvolumeclaims,verbs=get;list;watch;create;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// SetupWithManager registers the controller. Status-only changes of an EtcdCluster (the
// controller's own writes) do not trigger a pass.
func (r *EtcdClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.init()
	r.waker = newEtcdWaker(func(ctx context.Context, endpoints []string, cfg *tls.Config) (etcd.Client, error) {
		return r.DialEtcd(ctx, endpoints, cfg)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		For(&v1alpha1.EtcdCluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		// The Secrets cert-manager writes for the Certificates of source CertManager.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(clusterOfCertManagerSecret)).
		Watches(&v1alpha1.EtcdBackup{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfBackup)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(clusterOfLabel)).
		// What etcd shows while a pass waits on it (see etcdWaker).
		WatchesRawSource(source.Channel(r.waker.events, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile is one pass over an EtcdCluster: observe, decide, act, report.
func (r *EtcdClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.init()
	c := &v1alpha1.EtcdCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A DialEtcd that caches clients (etcd.ClientCache) keeps them per cluster.
	ctx = etcd.WithOwner(ctx, string(c.UID))
	if !c.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, c)
	}
	if !controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerName) {
		patch := client.MergeFrom(c.DeepCopy())
		controllerutil.AddFinalizer(c, v1alpha1.FinalizerName)
		// First seen: the cluster is created under secure defaults. A cluster that has the
		// finalizer without the marker was created before them and keeps what it has; so does
		// one that lost its finalizer (a `kubectl replace`) after it formed, which its status
		// (a subresource a replace keeps) shows: switching it to TLS would cut off its clients.
		if c.Status.ClusterID == "" && c.Status.ObservedGeneration == 0 {
			values.MarkSecureDefaults(c)
		}
		if err := r.Client.Patch(ctx, c, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to add finalizer to EtcdCluster %s: %w", req, err)
		}
		// The pass goes on: a finalizer change passes none of the event filters, and nothing is
		// created before the finalizer is stored.
	}
	// From here on the pass acts on the effective spec (the secure defaults filled in). Its
	// spec is never written back: the status goes through the status subresource, and the
	// executor's metadata patches carry only the metadata they change (execute.setRecord).
	c = values.Effective(c, r.Operator)

	before := c.DeepCopy()
	// One pass, one read of the StatefulSet and of the member pods (see observe.Pass).
	ctx = observe.WithPass(ctx, observe.NewPass(r.Client))
	result, err := r.reconcileNormal(ctx, c)
	metrics.Record(c)
	if perr := r.patchStatus(ctx, before, c); perr != nil && err == nil {
		return ctrl.Result{}, perr
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// patchStatus writes the status only when it changed, and records an event for every
// condition whose status changed.
func (r *EtcdClusterReconciler) patchStatus(ctx context.Context, before, after *v1alpha1.EtcdCluster) error {
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("failed to patch status of EtcdCluster %s/%s: %w", after.Namespace, after.Name, err)
	}
	for _, t := range status.Transitions(before.Status.Conditions, after.Status.Conditions) {
		// The condition's type is the action: the recorder merges events with the same type,
		// reason and action into one series with the first one's note (see
		// execute.MemberPod), and Stalled shares Degraded's reason.
		r.Recorder.Eventf(after, nil, t.EventType, t.Cond.Reason, t.Cond.Type, "%s is %s: %s", t.Cond.Type, t.Cond.Status, t.Cond.Message)
	}
	if n := after.Status.LeaderChanges - before.Status.LeaderChanges; n > 0 {
		metrics.CountLeaderChanges(after, n)
		r.Recorder.Eventf(after, execute.MemberPod(after.Namespace, after.Status.Leader), corev1.EventTypeNormal, "LeaderChanged", "LeaderChange", "%s (%s) leads now; %s (%s) led before (%d leader changes observed)",
			after.Status.Leader, after.Status.LeaderID, before.Status.Leader, before.Status.LeaderID, after.Status.LeaderChanges)
	}
	return nil
}

// reconcileNormal renders, applies and prunes (unless paused), then observes and fills the
// status. An invalid spec is reported in conditions and is not retried until it changes.
func (r *EtcdClusterReconciler) reconcileNormal(ctx context.Context, c *v1alpha1.EtcdCluster) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	// What earlier passes recorded, loaded once: the pass reads it from here, not from status.
	mem := memory.Of(c)
	// Whether the members read the revocation list is what exists, not what status says: a
	// lost status must not drop the list from the members (revoked certificates would be
	// taken again).
	var err error
	if mem.ClientRevocationList, err = observe.CRLExists(ctx, r.cached(ctx), c); err != nil {
		return ctrl.Result{}, err
	}
	obs := observe.Observation{Cluster: c.Name, Memory: mem, Generation: c.Generation, Paused: c.Spec.Paused, WasAvailable: status.WasAvailable(c), Now: time.Now()}
	_, obs.TargetVersion = versionTargets(c, mem)
	obs.SnapshotCount = snapshotCount(c)
	obs.SpecReplicas = render.SpecReplicas(c)
	obs.Ephemeral = c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral

	renderer, specErr := r.sources.For(ctx, c)
	var desired []*unstructured
	if specErr == nil {
		desired, specErr = render.Desired(renderer, c, r.Operator, mem)
	} else if !render.IsChartSourceError(specErr) {
		return ctrl.Result{}, specErr
	}
	obs.SpecErr = specErr

	topo := render.TopologyOf(c, desired)
	if specErr == nil && !c.Spec.Paused {
		// Certificates first: the members mount them, and the operator dials with its own.
		cfg, err := r.reconcileTLS(ctx, c, mem, topo)
		switch {
		case render.IsTLSError(err):
			specErr, obs.SpecErr = err, err
			if render.ClientTLSEnabled(c) {
				// Status is still read from etcd, with the client certificate there is.
				cfg, _ = observe.LoadClientTLS(ctx, r.Client, r.apiReader(), c)
			}
		case err != nil:
			return ctrl.Result{}, err
		}
		topo.TLS = cfg
		obs.CaRotation = c.Status.CARotation
	} else if render.ClientTLSEnabled(c) {
		// Paused, or a spec that cannot be rendered: no certificate is issued, but status is
		// still read from etcd with the certificate there is.
		topo.TLS, _ = observe.LoadClientTLS(ctx, r.Client, r.apiReader(), c)
	}
	// The client port's phase: the target, or the step towards it every member can take.
	sw, err := observe.ReadClientSwitch(ctx, r.cached(ctx), r.DialEtcd, r.EtcdTimeout, c, topo, topo.TLS)
	if err != nil {
		return ctrl.Result{}, err
	}
	topo.ClientScheme = sw.Decision.Dial
	topo.TLS = observe.DialTLS(ctx, r.Client, c, topo.ClientScheme, topo.TLS)
	// The peer side's phase: the target, or the listeners and advertised URL of the step
	// towards it that keeps every member reachable at its URL in etcd's member list.
	ps, err := observe.ReadPeerSwitch(ctx, r.cached(ctx), r.DialEtcd, r.EtcdTimeout, c, topo)
	if err != nil {
		return ctrl.Result{}, err
	}
	phase := values.Phase{}
	if sw.Decision.Render != values.ClientTarget(c) {
		phase = sw.Phase()
	}
	phase.Peer = ps.Phase()
	if specErr == nil && (phase.Client != "" || phase.Peer != nil) {
		desired, specErr = render.DesiredAt(renderer, c, r.Operator, mem, phase)
		obs.SpecErr = specErr
		if specErr == nil {
			// Members started on this render advertise the phase's peer URL.
			at := render.TopologyOf(c, desired)
			topo.PeerURLTemplate, topo.PeerPort, topo.PeerTransitionPort = at.PeerURLTemplate, at.PeerPort, at.PeerTransitionPort
		}
	}
	// stsTerminating: the live StatefulSet is being deleted (re-created to grow its claim
	// template): it is applied again once it is gone.
	stsTerminating := false
	if specErr == nil {
		// The size the render asks, before it is pinned to the live claim template.
		obs.RenderedStorageSize = render.ClaimTemplateSize(desired, topo.StatefulSet)
		if stsTerminating, err = r.pinToLive(ctx, c, topo, desired); err != nil {
			return ctrl.Result{}, err
		}
	}
	if ps.Decision.Switching {
		// A member that joins during the switch is added at the URL every member pod can
		// reach, which is not always the one the template advertises (see peerswitch.Join).
		topo.PeerURLTemplate = ps.JoinURLTemplate(topo)
	}
	c.Status.TLSTransition = nil
	if st := tlsswitch.Status(sw.Obs, sw.Decision); st != nil {
		c.Status.TLSTransition = &v1alpha1.TLSTransitionStatus{Client: st}
		obs.ClientSwitch, obs.ClientSwitchHeld = st.Message, sw.Decision.HeldForAuth
	}
	var peerRuns *observe.PeerSwitch // the peer switch, when one runs
	if st := peerswitch.Status(ps.Obs, ps.Decision); st != nil {
		if c.Status.TLSTransition == nil {
			c.Status.TLSTransition = &v1alpha1.TLSTransitionStatus{}
		}
		c.Status.TLSTransition.Peer = st
		obs.PeerSwitch, peerRuns = &ps.Decision, &ps
	}
	var applyErr error
	if specErr == nil && !c.Spec.Paused {
		applyErr = r.exec.EnsureFoundingConfig(ctx, c, topo)
		hold := holdStatefulSet(c, mem) || stsTerminating
		if applyErr == nil {
			applyErr = r.applyAndPrune(ctx, c, desired, hold)
		}
		obs.ApplyErr = applyErr
		if applyErr == nil && !hold {
			obs.StsApplied = appliedHash(desired, "StatefulSet", topo.StatefulSet)
		}
	}

	if err := r.observe(ctx, c, topo, &obs); err != nil {
		return ctrl.Result{}, err
	}
	backupNext, backupErr := r.reconcileBackups(ctx, c, &obs)
	var memberErr error
	restoring := false
	if specErr == nil && applyErr == nil && !c.Spec.Paused && backupErr == nil && (obs.AuthRefused == nil || restore.Active(mem.Restore)) {
		// A restore (spec.bootstrap, or disaster recovery) goes first; membership, rollout and
		// maintenance wait while one is wanted or under way. etcd refusing the operator as a
		// user answered it: that is no lost quorum, and nothing to start a restore over (one
		// under way goes on).
		rp, err := r.proposeRestore(ctx, c, topo, &obs)
		// The arbiter's first row: a restore's step (a wait too) is final; the planners below
		// are asked only when it proposes none.
		if _, _, asked := plan.Above(plan.Proposals{Restore: rp.step}, plan.PlannerMembership); !asked || err != nil {
			a := rp.step
			if err == nil && a.Kind == rp.action.Kind {
				err = r.exec.Restore(ctx, c, topo, rp.observation, rp.action, rp.sources, desired)
			}
			obs.Membership, memberErr, restoring = &a, err, true
		}
	}
	if specErr == nil && applyErr == nil && !c.Spec.Paused && obs.StatefulSet != nil && backupErr == nil && !restoring {
		a, err := r.reconcileMembership(ctx, c, topo, &obs, peerRuns)
		obs.Membership, memberErr = &a, err
		switch {
		case err != nil && etcd.AuthRefused(err):
			// etcd refuses the operator the step as a user: no retry changes that; say why
			// and how to fix it, and look again later.
			obs.AuthRefused, memberErr = err, nil
			obs.Membership = &plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonAuthLockedOut, Message: status.AuthLockoutMessage(obs)}
		case err == nil && (a.Kind == plan.EnableAuth || a.Kind == plan.DisableAuth):
			// What etcd says after the step, for admission (status.authEnabled).
			obs.Auth = &etcd.AuthState{Enabled: a.Kind == plan.EnableAuth}
		}
	}
	status.Set(c, obs, topo)
	metrics.RecordObserved(c, obs, backupErr)

	switch {
	case applyErr != nil && !status.ApplyStalls(applyErr):
		return ctrl.Result{}, applyErr
	case memberErr != nil && etcdRefusesForNow(memberErr):
		// Not a failure to back off from: etcd's leader accepts a membership change only once
		// it has been connected to its voters for a few seconds (etcd's health interval, 5 s),
		// so a change right after an election, such as adding the learner that replaces a
		// removed leader, is refused until then. Growing error back-off made that last up to
		// 10 s longer than etcd's own wait, while the new member's pod went on crash looping.
		logger.Info("etcd refuses the membership change until its leader has been in touch with every voter for a while; looking again in a second", "error", memberErr.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case memberErr != nil:
		return ctrl.Result{}, memberErr
	case backupErr != nil:
		return ctrl.Result{}, backupErr
	}
	// The pass finished on this generation: it acted on the spec, waits, or cannot act on it
	// and says so in Stalled. Only an error retried above leaves observedGeneration behind
	// (kstatus reads a generation not observed as InProgress, whatever Stalled says).
	c.Status.ObservedGeneration = c.Generation
	switch {
	case applyErr != nil:
		// Refused as invalid or forbidden: the same object would be refused again. A new spec
		// starts a pass; a policy, quota or permission fixed meanwhile is seen on the next look.
		logger.Info("the API server refuses a rendered object; looking again in a while", "error", applyErr.Error())
		return ctrl.Result{RequeueAfter: RequeueSettled}, nil
	case render.IsTLSError(specErr):
		// The user's Secrets are not watched: look again after a while.
		logger.Info("TLS is not ready; looking again", "error", specErr.Error())
		return ctrl.Result{RequeueAfter: userSecretRecheck}, nil
	case render.IsChartSourceError(specErr):
		// The chart's ConfigMap or registry is not watched: look again after a while.
		logger.Info("the chart of spec.chart.source cannot be read; looking again", "error", specErr.Error())
		return ctrl.Result{RequeueAfter: userSecretRecheck}, nil
	case specErr != nil:
		logger.Info("spec cannot be rendered; waiting for it to change", "error", specErr.Error())
		return ctrl.Result{}, nil
	}
	if a := obs.Membership; a != nil && a.Kind != plan.None && a.Kind != plan.Wait {
		return ctrl.Result{RequeueAfter: requeueMembership}, nil
	}
	next := RequeueSettled
	if status.IsTrue(c.Status.Conditions, v1alpha1.ConditionProgressing) {
		next = RequeueProgressing
	}
	if a := obs.Membership; a != nil && a.Kind == plan.Wait {
		if v1alpha1.ReasonEffects[a.Reason] == v1alpha1.EffectWaits || !status.IsTrue(c.Status.Conditions, v1alpha1.ConditionAvailable) {
			// A learner starting or catching up, members answering for the first time after
			// the cluster formed, or a quorum coming back: all show up in etcd, not as a
			// Kubernetes event.
			next = time.Second
		}
		if noMemberSchedulable(obs) {
			// The scheduler finds no node for any member pod: no etcd runs to answer, and a
			// pod scheduled is a Pod event that starts a pass. A thousand such clusters
			// polled every second would keep every worker busy.
			next = RequeueSettled
		}
		// A wait that ends by itself (a lost member's replaceAfter running out) is looked at
		// when it ends, not a requeue interval later.
		if a.RequeueAfter > 0 && a.RequeueAfter < next {
			next = a.RequeueAfter
		}
	}
	// A certificate due for renewal is renewed on time, not a requeue interval later.
	for _, cs := range c.Status.Certificates {
		if cs.RenewAt != nil {
			if d := time.Until(cs.RenewAt.Time) + time.Second; d < next {
				next = max(d, time.Second)
			}
		}
	}
	if backupNext > 0 && backupNext < next {
		next = backupNext + 100*time.Millisecond // past the schedule time, not just before it
	}
	// A planner that asks for a look this soon waits on etcd: watch it until then.
	r.waker.set(c, wakeWatchOf(obs, topo), next)
	return ctrl.Result{RequeueAfter: next}, nil
}

// appliedHash returns the hash annotation Apply gave the rendered object of kind and name
// ("" when there is none).
func appliedHash(desired []*unstructured, kind, name string) string {
	for _, o := range desired {
		if o.GetKind() == kind && o.GetName() == name {
			return o.GetAnnotations()[apply.HashAnnotation]
		}
	}
	return ""
}

// applyAndPrune applies what the chart rendered and prunes what it no longer renders. With
// holdSts the StatefulSet is not applied (nor pruned): a bootstrap restore has not finished.
func (r *EtcdClusterReconciler) applyAndPrune(ctx context.Context, c *v1alpha1.EtcdCluster, desired []*unstructured, holdSts bool) error {
	apply := desired
	if holdSts {
		apply = nil
		for _, o := range desired {
			if o.GetKind() != "StatefulSet" {
				apply = append(apply, o)
			}
		}
	}
	// A kind the chart renders for the first time is recorded before anything of it is
	// applied: should the pass end before its status is written, a later pass still prunes
	// objects of that kind once the chart stops rendering them.
	current := extraKinds(desired)
	if grown := unionKinds(c.Status.ExtraKinds, current); len(grown) > len(c.Status.ExtraKinds) {
		rec := c.DeepCopy()
		before := rec.DeepCopy()
		rec.Status.ExtraKinds = grown
		if err := r.Client.Status().Patch(ctx, rec, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("failed to record status.extraKinds of EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		c.Status.ExtraKinds = grown
	}
	res, err := r.applier.Apply(ctx, apply)
	if len(res.Applied) > 0 {
		r.Recorder.Eventf(c, nil, "Normal", "Applied", "Apply", "Applied %v", res.Applied)
	}
	if err != nil {
		return err
	}
	pruned, err := r.applier.Prune(ctx, r.inventory(c, desired))
	if len(pruned) > 0 {
		r.Recorder.Eventf(c, nil, "Normal", "Pruned", "Prune", "Deleted %v: the chart no longer renders them", pruned)
	}
	if err == nil {
		c.Status.ExtraKinds = current
	}
	return err
}

// builtinKinds are OwnedKinds by group and kind.
var builtinKinds = func() map[schema.GroupKind]bool {
	m := map[schema.GroupKind]bool{}
	for _, k := range OwnedKinds {
		m[k.GroupKind()] = true
	}
	return m
}()

// extraKinds are the kinds of objs beyond OwnedKinds, as apiVersion/Kind, sorted.
func extraKinds(objs []*unstructured) []string {
	var out []string
	for _, o := range objs {
		if !builtinKinds[o.GroupVersionKind().GroupKind()] {
			out = unionKinds(out, []string{o.GetAPIVersion() + "/" + o.GetKind()})
		}
	}
	return out
}

func unionKinds(a, b []string) []string {
	set := map[string]bool{}
	for _, k := range append(append([]string{}, a...), b...) {
		set[k] = true
	}
	if len(set) == 0 {
		return nil
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pinToLive keeps what cannot change on the live StatefulSet as it is in desired (its volume
// claim templates' labels, annotations and size, see PinClaimTemplates), and sets desired's
// replicas so that no apply ever creates the StatefulSet with fewer than keep every member
// pod. The chart leaves .spec.replicas to the operator: a StatefulSet applied without them
// while absent gets the default of one, and the StatefulSet controller deletes every other
// member's pod at once. It is absent so after the storage planner deleted it (orphaning its
// pods) to grow its claim template, or after a person did (kubectl delete --cascade=orphan).
// The manager's cache can still show a StatefulSet the API server no longer has, so the live
// one, and the member pods when it is absent, are read from the API server. When it exists,
// desired carries its replicas (the membership steps change them, never the apply) and its
// claim templates; when it does not, one above the highest ordinal of the member pods (none:
// the first formation, which starts from one) and the rendered templates. It returns true
// when the live StatefulSet is being deleted: it is applied again once it is gone.
func (r *EtcdClusterReconciler) pinToLive(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, desired []*unstructured) (bool, error) {
	var sts *unstructured
	for _, o := range desired {
		if o.GetKind() == "StatefulSet" && o.GetName() == t.StatefulSet {
			sts = o
		}
	}
	if sts == nil {
		return false, nil
	}
	live := &appsv1.StatefulSet{}
	replicas := int32(0)
	err := r.apiReader().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: t.StatefulSet}, live)
	switch {
	case err == nil && live.DeletionTimestamp != nil:
		return true, nil
	case err == nil:
		if err := render.PinClaimTemplates(desired, live); err != nil {
			return false, err
		}
		if live.Spec.Replicas == nil {
			return false, nil
		}
		replicas = *live.Spec.Replicas
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("failed to get StatefulSet %s/%s: %w", c.Namespace, t.StatefulSet, err)
	default:
		pods := &corev1.PodList{}
		if err := r.apiReader().List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
			return false, fmt.Errorf("failed to list the member pods of EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		for _, p := range pods.Items {
			if k, ok := plan.Ordinal(t.StatefulSet, p.Name); ok && k+1 > replicas {
				replicas = k + 1
			}
		}
		if replicas == 0 {
			return false, nil
		}
	}
	if err := unstructuredv1.SetNestedField(sts.Object, int64(replicas), "spec", "replicas"); err != nil {
		return false, fmt.Errorf("failed to set the replicas of StatefulSet %s/%s: %w", c.Namespace, t.StatefulSet, err)
	}
	return false, nil
}

// reconcileDelete deletes what the cluster owns, and its volume claims only when
// spec.storage.retention.whenDeleted is Delete (by default data is never deleted implicitly),
// then releases the finalizer.
func (r *EtcdClusterReconciler) reconcileDelete(ctx context.Context, c *v1alpha1.EtcdCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerName) {
		return ctrl.Result{}, nil
	}
	// The built-in kinds only: objects of status.extraKinds carry the cluster as their owner,
	// so the garbage collector deletes them, even where the operator's role was never
	// granted the kind.
	inv := r.inventory(c, nil)
	inv.Kinds = OwnedKinds
	remaining, err := r.applier.Delete(ctx, inv)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if c.Spec.Storage.Retention.WhenDeleted == v1alpha1.RetentionDelete {
		err := r.Client.DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(c.Namespace),
			client.MatchingLabels{v1alpha1.LabelCluster: c.Name})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to delete the volume claims of EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, v1alpha1.FinalizerName)
	if err := r.Client.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to remove finalizer from EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	metrics.Forget(c)
	if r.ForgetEtcd != nil {
		r.ForgetEtcd(string(c.UID))
	}
	return ctrl.Result{}, nil
}

// inventoryKinds are the kinds a prune or delete looks at: the built-in ones, those recorded
// in status.extraKinds, and those rendered now.
func inventoryKinds(c *v1alpha1.EtcdCluster, rendered []*unstructured) []schema.GroupVersionKind {
	kinds := append([]schema.GroupVersionKind{}, OwnedKinds...)
	for _, k := range unionKinds(c.Status.ExtraKinds, extraKinds(rendered)) {
		i := strings.LastIndex(k, "/")
		if i <= 0 {
			continue
		}
		gv, err := schema.ParseGroupVersion(k[:i])
		if err != nil {
			continue
		}
		kinds = append(kinds, gv.WithKind(k[i+1:]))
	}
	return kinds
}

func (r *EtcdClusterReconciler) inventory(c *v1alpha1.EtcdCluster, keep []*unstructured) apply.PruneRequest {
	return apply.PruneRequest{
		Namespace: c.Namespace,
		Selector:  render.InventorySelector(c.Name),
		OwnerUID:  c.UID,
		Kinds:     inventoryKinds(c, keep),
		Keep:      keep,
	}
}

// defaultSnapshotCount is etcd 3.6's and 3.7's default --snapshot-count.
const defaultSnapshotCount = 10000

// snapshotCount is the --snapshot-count the members run with.
func snapshotCount(c *v1alpha1.EtcdCluster) uint64 {
	if n := c.Spec.Etcd.SnapshotCount; n != nil && *n > 0 {
		return uint64(*n)
	}
	return defaultSnapshotCount
}

// versionTargets returns the version rendered now (the next step towards the target, see
// internal/versions) and the target, spec.version or its default.
func versionTargets(c *v1alpha1.EtcdCluster, m memory.Memory) (step, target string) {
	target = c.Spec.Version
	if target == "" {
		target = v1alpha1.DefaultVersion
	}
	step, _ = versions.Step(target, m.Running)
	return step, target
}

// clusterOfLabel maps an object carrying the inventory label to its EtcdCluster.
func clusterOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[v1alpha1.LabelCluster]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// clustersOfBackup maps an EtcdBackup to its cluster, so a finished backup shows in the
// cluster's status (and a waiting upgrade goes on) at once, and to the clusters in its
// namespace whose spec.bootstrap restores it, so their founders stop waiting for it at once.
func (r *EtcdClusterReconciler) clustersOfBackup(ctx context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*v1alpha1.EtcdBackup)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	if b.Spec.ClusterName != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.ClusterName}})
	}
	list := &v1alpha1.EtcdClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
		return out
	}
	for _, c := range list.Items {
		if bs := c.Spec.Bootstrap; bs != nil && bs.FromBackup != nil && bs.FromBackup.Name == b.Name && c.Status.ClusterID == "" && c.Name != b.Spec.ClusterName {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
		}
	}
	return out
}

// noMemberSchedulable reports whether every member pod the StatefulSet should have exists and
// the scheduler reports each as unschedulable (PodScheduled False), none bound to a node.
func noMemberSchedulable(obs observe.Observation) bool {
	if obs.Pods == nil || obs.StatefulSet == nil || len(obs.Pods.Items) == 0 {
		return false
	}
	if obs.StatefulSet.Spec.Replicas != nil && int32(len(obs.Pods.Items)) < *obs.StatefulSet.Spec.Replicas {
		return false
	}
	for _, p := range obs.Pods.Items {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			return false
		}
		unschedulable := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				unschedulable = true
			}
		}
		if !unschedulable {
			return false
		}
	}
	return true
}

// etcdRefusesForNow tells etcd's answer to a membership change it will accept a little later
// ("etcdserver: unhealthy cluster": its leader has not been connected to enough of its voters
// for long enough) from a failure.
func etcdRefusesForNow(err error) bool {
	return errors.Is(err, rpctypes.ErrUnhealthy) || strings.Contains(err.Error(), rpctypes.ErrorDesc(rpctypes.ErrUnhealthy))
}

// observe reads the StatefulSet from the cache and asks etcd, every pass, at the client URL of
// every member pod whose etcd container runs and has started (passed its startup probe),
// ready or not: a pod's readiness lags behind etcd, and a total outage must show in the
// status at once. A container that does not run, or whose listeners are not up yet, cannot
// answer, and asking it would only hold the pass for the call's timeout. When no
// member can read the member list (quorum lost, or still forming), it counts the members
// that answer a status call.
func (r *EtcdClusterReconciler) observe(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation) error {
	return observe.Members(ctx, r.cached(ctx), r.DialEtcd, r.EtcdTimeout, c, t, o)
}

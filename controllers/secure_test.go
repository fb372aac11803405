package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstr "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/apply"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// createRaw creates EtcdCluster etcd as a user writes it, without the test fixture's
// spec.insecure.
func createRaw(t *testing.T, ns string, mutate func(*v1alpha1.EtcdCluster)) {
	t.Helper()
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns}}
	if mutate != nil {
		mutate(c)
	}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatalf("failed to create EtcdCluster: %v", err)
	}
}

// TestNewClusterIsSecureByDefault: a cluster created with neither spec.tls nor
// spec.networkPolicy gets the marker with its finalizer, certificates the operator issues,
// members that speak TLS on both sides and ask clients for certificates, and a
// NetworkPolicy; its stored spec stays as the user wrote it.
func TestNewClusterIsSecureByDefault(t *testing.T) {
	ns := env.Namespace(t)
	createRaw(t, ns, nil)
	var sts *appsv1.StatefulSet
	eventually(t, timeout, "a StatefulSet with TLS", func() error {
		sts = &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", sts); err != nil {
			return err
		}
		if etcdArg(sts, "--client-cert-auth") != "true" {
			return fmt.Errorf("--client-cert-auth=%q", etcdArg(sts, "--client-cert-auth"))
		}
		return nil
	})
	for flag, want := range map[string]string{"--peer-client-cert-auth": "true", "--trusted-ca-file": "", "--peer-trusted-ca-file": "",
		// Only the members' certificates speak raft (internal/observe's peer pin test).
		"--peer-cert-allowed-hostname": "etcd-0.etcd." + ns + ".svc.cluster.local"} {
		if got := etcdArg(sts, flag); got == "" || (want != "" && got != want) {
			t.Errorf("%s=%q, want %q (set)", flag, got, want)
		}
	}
	for _, flag := range []string{"--listen-client-urls", "--listen-peer-urls", "--advertise-client-urls", "--initial-advertise-peer-urls"} {
		if got := etcdArg(sts, flag); !strings.HasPrefix(got, "https://") {
			t.Errorf("%s=%q, want https", flag, got)
		}
	}
	for _, name := range []string{"etcd-ca", "etcd-peer-ca", "etcd-peer-tls", "etcd-server-tls", "etcd-operator-client-tls"} {
		eventually(t, timeout, "Secret "+name, func() error { return getObject(ns, name, &corev1.Secret{}) })
	}
	eventually(t, timeout, "NetworkPolicy", func() error { return getObject(ns, "etcd", &networkingv1.NetworkPolicy{}) })

	c := waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "False/"+v1alpha1.ReasonTLS)
	if c.Annotations[v1alpha1.AnnotationDefaults] != v1alpha1.DefaultsSecure {
		t.Errorf("annotations %v, want the secure defaults' marker", c.Annotations)
	}
	if c.Status.Security != v1alpha1.SecurityTLS {
		t.Errorf("status.security %q, want TLS", c.Status.Security)
	}
	// The defaults are the operator's reading, never written into the user's spec.
	if c.Spec.TLS != nil || c.Spec.NetworkPolicy != nil {
		t.Errorf("the stored spec changed: tls %+v, networkPolicy %+v", c.Spec.TLS, c.Spec.NetworkPolicy)
	}
}

// TestClusterFromBeforeSecureDefaultsKeepsPlain: a cluster that already carries the finalizer
// (created by an operator before secure defaults) and no marker is rendered as before: plain
// HTTP, no NetworkPolicy, no certificates, and no marker added. Choosing plain explicitly
// (spec.insecure) afterwards changes neither the StatefulSet's template nor its applied hash:
// no member restarts.
func TestClusterFromBeforeSecureDefaultsKeepsPlain(t *testing.T) {
	ns := env.Namespace(t)
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) { c.Finalizers = []string{v1alpha1.FinalizerName} })
	c := waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "True/"+v1alpha1.ReasonCreatedBeforeSecureDefaults)
	if _, ok := c.Annotations[v1alpha1.AnnotationDefaults]; ok {
		t.Errorf("a cluster from before secure defaults got the marker: %v", c.Annotations)
	}
	if c.Status.Security != v1alpha1.SecurityPlain {
		t.Errorf("status.security %q, want Plain", c.Status.Security)
	}
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionInsecureTransport).Message; !contains(msg, "spec.tls") {
		t.Errorf("the condition does not say how to turn TLS on: %q", msg)
	}
	before := waitStatefulSet(t, ns)
	if got := etcdArg(before, "--listen-client-urls"); !strings.HasPrefix(got, "http://") || etcdArg(before, "--client-cert-auth") != "" {
		t.Fatalf("listen-client-urls %q, client-cert-auth %q: want plain, as before", got, etcdArg(before, "--client-cert-auth"))
	}
	for _, name := range []string{"etcd-ca", "etcd-peer-ca", "etcd-peer-tls", "etcd-server-tls"} {
		if err := getObject(ns, name, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s: %v, want none", name, err)
		}
	}
	if err := getObject(ns, "etcd", &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy: %v, want none", err)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Insecure = true })
	waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "True/"+v1alpha1.ReasonInsecureByChoice)
	eventually(t, timeout, "the pass over generation 2", func() error {
		if c := getCluster(t, ns); c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("observedGeneration %d of %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})
	after := waitStatefulSet(t, ns)
	if after.Annotations[apply.HashAnnotation] != before.Annotations[apply.HashAnnotation] || !reflect.DeepEqual(after.Spec.Template, before.Spec.Template) {
		t.Fatalf("the StatefulSet changed (hash %s, then %s): its members would restart",
			before.Annotations[apply.HashAnnotation], after.Annotations[apply.HashAnnotation])
	}
}

// TestInsecureIsAVisibleChoice: spec.insecure shows in status.security, which kubectl get
// prints, and in the InsecureTransport condition, which says how to turn TLS on; the cluster
// and renders plain HTTP with no NetworkPolicy.
func TestInsecureIsAVisibleChoice(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, nil) // spec.insecure
	c := waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "True/"+v1alpha1.ReasonInsecureByChoice)
	if c.Status.Security != v1alpha1.SecurityPlain {
		t.Errorf("status.security %q, want Plain", c.Status.Security)
	}
	if msg := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionInsecureTransport).Message; !contains(msg, "spec.insecure") || !contains(msg, "spec.tls") {
		t.Errorf("the condition does not name the choice and the way out: %q", msg)
	}
	sts := waitStatefulSet(t, ns)
	if got := etcdArg(sts, "--listen-peer-urls"); !strings.HasPrefix(got, "http://") {
		t.Errorf("listen-peer-urls %q, want plain", got)
	}
	if err := getObject(ns, "etcd", &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy: %v, want none", err)
	}

	// The column kubectl get prints, as the API server serves the CRD.
	crd := &unstr.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := env.Client.Get(context.Background(), types.NamespacedName{Name: "etcdclusters.etcdpilot.io"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstr.NestedSlice(crd.Object, "spec", "versions")
	found := false
	for _, v := range versions {
		cols, _, _ := unstr.NestedSlice(v.(map[string]any), "additionalPrinterColumns")
		for _, col := range cols {
			m := col.(map[string]any)
			if m["name"] == "Security" && m["jsonPath"] == ".status.security" && m["priority"] == nil {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the CRD has no Security column of .status.security that kubectl get prints by default")
	}
}

// TestTheEffectiveSpecIsNeverWrittenBack: the executor's record on the EtcdCluster (here the
// membership intent) writes its annotation and nothing of the effective spec the pass acts
// on, and leaves the pass's copy effective (the API server answers with the stored spec).
func TestTheEffectiveSpecIsNeverWrittenBack(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Annotations = map[string]string{v1alpha1.AnnotationDefaults: v1alpha1.DefaultsSecure}
		c.Spec.Paused = true // the executor below is the only writer
	})
	// The manager's pass is over once it wrote the status; a paused cluster then sees no writes.
	waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "False/"+v1alpha1.ReasonTLS)
	c := values.Effective(getCluster(t, ns), values.DefaultOperator())
	x := &execute.Executor{Client: env.Client, Scheme: env.Client.Scheme(), Recorder: events.NewFakeRecorder(10)}
	if err := x.SetIntent(ctx, c, &plan.Intent{Op: plan.IntentAdd, Member: "etcd-3"}); err != nil {
		t.Fatal(err)
	}
	if c.Spec.TLS == nil || c.Spec.NetworkPolicy == nil {
		t.Errorf("the pass's copy lost its effective spec: tls %+v, networkPolicy %+v", c.Spec.TLS, c.Spec.NetworkPolicy)
	}
	stored := getCluster(t, ns)
	if stored.Spec.TLS != nil || stored.Spec.NetworkPolicy != nil {
		t.Errorf("the effective spec was written: tls %+v, networkPolicy %+v", stored.Spec.TLS, stored.Spec.NetworkPolicy)
	}
	if stored.Annotations[observe.IntentAnnotation] == "" || stored.ResourceVersion != c.ResourceVersion {
		t.Errorf("the intent was not recorded (%v), or the pass's copy has not its metadata (%s, stored %s)", stored.Annotations, c.ResourceVersion, stored.ResourceVersion)
	}
}

// TestAReplacedClusterKeepsWhatItHas: a `kubectl replace` (or a GitOps replace) drops the
// finalizer of a running cluster; its status, a subresource a replace keeps, shows the
// operator handled it before. It gets its finalizer back, no secure-defaults marker, and
// stays as it was: switching a running plain cluster to TLS would cut off its clients.
func TestAReplacedClusterKeepsWhatItHas(t *testing.T) {
	ns := env.Namespace(t)
	createRaw(t, ns, func(c *v1alpha1.EtcdCluster) { c.Finalizers = []string{v1alpha1.FinalizerName} })
	waitCondition(t, ns, v1alpha1.ConditionInsecureTransport, "True/"+v1alpha1.ReasonCreatedBeforeSecureDefaults)
	before := waitStatefulSet(t, ns)
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Finalizers = nil })
	eventually(t, timeout, "the finalizer back", func() error {
		if c := getCluster(t, ns); !controllerutil.ContainsFinalizer(c, v1alpha1.FinalizerName) {
			return fmt.Errorf("finalizers %v", c.Finalizers)
		}
		return nil
	})
	c := getCluster(t, ns)
	if _, ok := c.Annotations[v1alpha1.AnnotationDefaults]; ok {
		t.Fatalf("a cluster the operator handled before got the secure-defaults marker when its finalizer came back: %v", c.Annotations)
	}
	after := waitStatefulSet(t, ns)
	if after.Annotations[apply.HashAnnotation] != before.Annotations[apply.HashAnnotation] {
		t.Fatalf("the StatefulSet changed (hash %s, then %s)", before.Annotations[apply.HashAnnotation], after.Annotations[apply.HashAnnotation])
	}
}

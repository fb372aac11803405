package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// helmCLI is the Helm CLI: $HELM (make test sets it), else the build of hack/build-helm.sh.
func helmCLI() string {
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	return filepath.Join(root, "bin", "helm", "v3.22.0", "helm")
}

// TestOperatorFromItsChartNamespaced installs the operator from its own chart with the real
// Helm CLI, in namespaced mode, into a fresh namespace (restricted Pod Security enforced),
// with the suite's operator stopped so that only the chart's acts. The CRDs are the suite's
// (--skip-crds: config/default installed them). The chart's operator elects a leader in its
// namespace, forms a 3-member cluster there that etcd itself reports healthy and that serves
// a write, leaves an EtcdCluster in another namespace alone, and removes its cluster's
// finalizer on deletion; helm uninstall removes it.
func TestOperatorFromItsChartNamespaced(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	other := namespace(t)

	// The suite's operator watches every namespace: stop it for this test, so the cluster
	// below is the chart's operator's work alone.
	if out, err := local(t, "operator", "stop"); err != nil {
		t.Fatalf("operator stop: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := local(t, "operator", "start"); err != nil {
			t.Errorf("operator start: %v %s", err, out)
			return
		}
		eventually(t, 2*time.Minute, "the suite's operator Ready again", func() error { return operatorReady(t) })
	})

	const release = "pilot"
	helm := helmCLI()
	install := []string{"exec", "--", helm, "install", release, filepath.Join(root, "charts", "etcd-pilot"),
		"-n", ns, "--skip-crds", "--wait=false", "--set", "namespaced=true"}
	if out, err := local(t, install...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = local(t, "exec", "--", helm, "uninstall", release, "-n", ns, "--ignore-not-found") })

	// Its pods pass the restricted Pod Security admission and become Ready.
	chartPods := func() []corev1.Pod {
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "etcd-pilot", "app.kubernetes.io/instance": release}); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	eventually(t, 2*time.Minute, "the chart's Deployment available", func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: release}, d); err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("%d available, %d replicas; conditions %v", d.Status.AvailableReplicas, d.Status.Replicas, d.Status.Conditions)
		}
		return nil
	})

	// A leader holds the lease in the release's namespace: only the chart's operator elects
	// there (the suite's leases are in its own namespace). The holder's identity names the
	// host, which process nodes share, so it cannot name the pod.
	eventually(t, time.Minute, "a leader lease held in "+ns, func() error {
		lease := &coordinationv1.Lease{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd-pilot.etcdpilot.io"}, lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" || lease.Spec.RenewTime == nil {
			return fmt.Errorf("the lease is not held: %+v", lease.Spec)
		}
		return nil
	})

	// An EtcdCluster outside its namespace, created first: it must stay untouched.
	outside := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: other},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(1))}}
	if err := k8s.Create(ctx, outside); err != nil {
		t.Fatal(err)
	}

	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Insecure: true, Replicas: ptr.To(int32(3))}}
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Evidence from etcd: three healthy voters, one cluster ID, and a write that reads back.
	v := waitVoters(t, ns, 3, availableTimeout)
	cli := etcdClient(t, ns, 3)
	defer cli.Close()
	eventually(t, time.Minute, "a write through the members reads back", func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := cli.Put(wctx, "installed-by", "helm"); err != nil {
			return err
		}
		resp, err := cli.Get(wctx, "installed-by")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "helm" {
			return fmt.Errorf("read %v", resp.Kvs)
		}
		return nil
	})
	t.Logf("etcd reports members %v, leader %s", v.ids, v.leader)

	// By now the chart's operator has had the outside cluster in view as long as this one:
	// it has no finalizer, no status and no StatefulSet.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(outside), outside); err != nil {
		t.Fatal(err)
	}
	if len(outside.Finalizers) > 0 || outside.Status.ObservedGeneration != 0 || len(outside.Status.Conditions) > 0 {
		t.Errorf("the namespaced operator touched an EtcdCluster in %s: finalizers %v, status %+v", other, outside.Finalizers, outside.Status)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: other, Name: "etcd"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet exists for the EtcdCluster in %s (err %v)", other, err)
	}
	if err := k8s.Delete(ctx, outside); err != nil {
		t.Fatal(err)
	}

	// The chart's operator handles the deletion: the finalizer goes, the cluster with it.
	if err := k8s.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the EtcdCluster deleted", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(c), &v1alpha1.EtcdCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})

	if out, err := local(t, "exec", "--", helm, "uninstall", release, "-n", ns); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	eventually(t, 2*time.Minute, "the chart's pods gone", func() error {
		if pods := chartPods(); len(pods) > 0 {
			names := make([]string, 0, len(pods))
			for _, p := range pods {
				names = append(names, p.Name)
			}
			return errors.New("left: " + strings.Join(names, ", "))
		}
		return nil
	})
	// Its cluster-scoped objects go too (their names carry the namespace).
	crbs := &rbacv1.ClusterRoleBindingList{}
	if err := k8s.List(ctx, crbs); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(crbs.Items, func(o rbacv1.ClusterRoleBinding) bool {
		return strings.HasPrefix(o.Name, release+"-"+ns+"-")
	}); i >= 0 {
		t.Errorf("ClusterRoleBinding %s is left after helm uninstall", crbs.Items[i].Name)
	}
}

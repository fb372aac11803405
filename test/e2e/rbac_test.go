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

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
)

// applyClusterRole creates (or replaces) the ClusterRole in config/rbac/file.
func applyClusterRole(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	_ = k8s.Delete(context.Background(), role.DeepCopy())
	if err := k8s.Create(context.Background(), role); err != nil {
		t.Fatal(err)
	}
}

// as is a client that acts as user name (impersonation by the admin).
func as(t *testing.T, name string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The editor and viewer ClusterRoles of config/rbac are aggregated into the built-in edit and
// view roles by the real kube-controller-manager: a user bound to view in a namespace lists
// EtcdClusters and EtcdBackups there and cannot create them; a user bound to edit creates them.
func TestEditAndViewRolesCoverEtcdClusters(t *testing.T) {
	applyClusterRole(t, "editor_role.yaml")
	applyClusterRole(t, "viewer_role.yaml")
	ns := namespace(t)
	for user, role := range map[string]string{"viewer-user": "view", "editor-user": "edit"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
		if err := k8s.Create(context.Background(), rb); err != nil {
			t.Fatal(err)
		}
	}
	viewer, editor := as(t, "viewer-user"), as(t, "editor-user")
	newCluster := func(name string) *v1alpha1.EtcdCluster {
		// Paused: the operator renders nothing for it; only the API's authorization matters.
		return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.EtcdClusterSpec{Replicas: ptr.To(int32(1)), Paused: true}}
	}
	// Aggregation is asynchronous: wait until edit carries the new rules.
	eventually(t, time.Minute, "edit may create EtcdClusters", func() error {
		err := editor.Create(context.Background(), newCluster("by-editor"))
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	eventually(t, time.Minute, "view may list EtcdClusters and EtcdBackups", func() error {
		if err := viewer.List(context.Background(), &v1alpha1.EtcdClusterList{}, client.InNamespace(ns)); err != nil {
			return err
		}
		return viewer.List(context.Background(), &v1alpha1.EtcdBackupList{}, client.InNamespace(ns))
	})
	got := &v1alpha1.EtcdCluster{}
	if err := viewer.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "by-editor"}, got); err != nil {
		t.Fatalf("view cannot get an EtcdCluster: %v", err)
	}
	if err := viewer.Create(context.Background(), newCluster("by-viewer")); !apierrors.IsForbidden(err) {
		t.Fatalf("view created an EtcdCluster (err %v), want Forbidden", err)
	}
	if err := viewer.Delete(context.Background(), got); !apierrors.IsForbidden(err) {
		t.Fatalf("view deleted an EtcdCluster (err %v), want Forbidden", err)
	}
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-editor"}, Spec: v1alpha1.EtcdBackupSpec{ClusterName: "by-editor"}}
	if err := editor.Create(context.Background(), b); err != nil {
		t.Fatalf("edit cannot create an EtcdBackup: %v", err)
	}
	if err := editor.Delete(context.Background(), b); err != nil {
		t.Fatalf("edit cannot delete an EtcdBackup: %v", err)
	}
	// Another namespace: no binding there, nothing allowed.
	if err := editor.List(context.Background(), &v1alpha1.EtcdClusterList{}, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Fatal(fmt.Errorf("edit in one namespace lists EtcdClusters of another (err %v)", err))
	}
	if err := editor.Delete(context.Background(), got); err != nil {
		t.Fatalf("edit cannot delete an EtcdCluster: %v", err)
	}
}

// The operator runs as a pod of config/default's Deployment, under that ServiceAccount and
// ClusterRole: with a permission taken out of the role it refuses to start and names it,
// and with the role restored it runs again.
func TestOperatorWithoutAPermissionOfItsRoleExitsNamingIt(t *testing.T) {
	ctx := context.Background()
	const roleName = "etcd-pilot-manager"
	if out, err := local(t, "operator", "stop"); err != nil {
		t.Fatalf("operator stop: %v %s", err, out)
	}
	t.Cleanup(func() {
		applyClusterRole(t, "role.yaml")
		restartOperator(t, "")
		eventually(t, 2*time.Minute, "an operator pod Ready again", func() error { return operatorReady(t) })
	})
	role := &rbacv1.ClusterRole{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: roleName}, role); err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		r.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(res string) bool { return res == "statefulsets" })
		if len(r.Resources) > 0 || len(r.NonResourceURLs) > 0 {
			rules = append(rules, r)
		}
	}
	if len(rules) == len(role.Rules) {
		t.Fatalf("the role %s grants nothing on statefulsets", roleName)
	}
	role.Rules = rules
	if err := k8s.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	if out, err := local(t, "operator", "start"); err != nil {
		t.Fatalf("operator start: %v %s", err, out)
	}
	eventually(t, 2*time.Minute, "the operator exited naming the missing permission", func() error {
		if operatorCrashes(t) == 0 {
			return errors.New("no operator container has exited yet")
		}
		logs := operatorLogs()
		if !strings.Contains(logs, "lacks") || !strings.Contains(logs, "list statefulsets.apps in every namespace") {
			return errors.New("no log line names the missing permission")
		}
		return nil
	})
	if err := operatorReady(t); err == nil {
		t.Fatal("an operator pod is Ready without the permissions it needs")
	}
}

// operatorReady is nil when a pod of the operator is Ready.
func operatorReady(t *testing.T) error {
	for _, p := range operatorPods(t) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				return nil
			}
		}
	}
	return errors.New("no operator pod is Ready")
}

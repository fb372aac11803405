package manager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/testenv"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// readGenerated reads one object of config/namespaced.
func readGenerated(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "namespaced", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

// TestNamespacedModeRunsUnderItsRole runs the manager as a service account bound only to
// config/namespaced's Role in one namespace (and its small ClusterRole for nodes and reviews),
// against a real kube-apiserver's RBAC: it manages an EtcdCluster there (objects applied, TLS
// Secrets issued, status written) and leaves one in another namespace alone. With a rule
// taken out of the Role, the start-up check names what is missing.
func TestNamespacedModeRunsUnderItsRole(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := client.New(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)

	var role rbacv1.Role
	var clusterRole rbacv1.ClusterRole
	readGenerated(t, "role.yaml", &role)
	readGenerated(t, "cluster_role.yaml", &clusterRole)
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res == "nodes" {
				t.Fatal("the namespaced Role names nodes")
			}
		}
	}
	for _, r := range clusterRole.Rules {
		for _, res := range r.Resources {
			if res == "secrets" || res == "configmaps" || res == "leases" || res == "pods" {
				t.Fatalf("the namespaced mode's ClusterRole grants %s cluster-wide", res)
			}
		}
	}
	sa := "etcd-pilot"
	user := "system:serviceaccount:" + ns + ":" + sa
	role.Namespace = ns
	clusterRole.Name = ns + "-cluster-scoped"
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}},
		&role, &clusterRole,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cluster-scoped"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}},
	}
	for _, o := range objs {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = admin.Delete(ctx, &clusterRole)
		_ = admin.Delete(ctx, objs[4])
	})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}

	// Everything the role should grant is granted, in the watched namespace only.
	if err := manager.CheckPermissions(ctx, cfg, ns); err != nil {
		t.Fatalf("the namespaced role does not grant what the operator needs: %v", err)
	}
	if err := manager.CheckPermissions(ctx, cfg, ""); err == nil || !strings.Contains(err.Error(), "secrets in every namespace") {
		t.Fatalf("the namespaced role reaches Secrets in every namespace: %v", err)
	}

	mgr, err := manager.New(cfg, manager.Options{MetricsAddr: "0", ProbeAddr: "0", WatchNamespace: ns,
		LeaderElect: true, LeaderElectionNamespace: ns, SkipNameValidation: true, DialEtcd: etcd.FakeDialer(&etcd.Fake{}), EtcdTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, n := range []string{ns, other} {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "etcd"},
			Spec: v1alpha1.EtcdClusterSpec{TLS: &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}}}}
		if err := admin.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "the watched namespace's cluster applied, its certificates issued and its status written", func() error {
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd"}, &appsv1.StatefulSet{}); err != nil {
			return err
		}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd-server-tls"}, &corev1.Secret{}); err != nil {
			return err
		}
		c := &v1alpha1.EtcdCluster{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "etcd"}, c); err != nil {
			return err
		}
		if len(c.Status.Conditions) == 0 || len(c.Status.Certificates) == 0 {
			return errorf("no status yet")
		}
		return nil
	})
	c := &v1alpha1.EtcdCluster{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: other, Name: "etcd"}, c); err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Conditions) != 0 || len(c.Finalizers) != 0 {
		t.Fatalf("the cluster outside the watched namespace was touched: %+v", c.Status.Conditions)
	}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: other, Name: "etcd"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a StatefulSet outside the watched namespace: %v", err)
	}

	// Take Secrets out of the Role: the start-up check says so.
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if len(r.Resources) == 1 && r.Resources[0] == "secrets" {
			continue
		}
		kept = append(kept, r)
	}
	cur := &rbacv1.Role{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: role.Name}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Rules = kept
	if err := admin.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the start-up check to name the missing permission", func() error {
		err := manager.CheckPermissions(ctx, cfg, ns)
		if err == nil || !strings.Contains(err.Error(), "create secrets in namespace "+ns) {
			return errorf(fmt.Sprintf("got %v", err))
		}
		return nil
	})
}

type errorf string

func (e errorf) Error() string { return string(e) }

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// TestAuthRefusesAnonymousAndTheOperatorStillUpgrades turns etcd's authentication on in a TLS
// cluster: the operator creates root (password in a Secret) and its own user, then turns it
// on. A user set up by root as the README says writes through an upgrade from 3.6 to 3.7,
// while a certificate without a user, and a user outside its role, are refused.
func TestAuthRefusesAnonymousAndTheOperatorStillUpgrades(t *testing.T) {
	ns := namespace(t)
	createVersioned(t, ns, "3.6.16", func(s *v1alpha1.EtcdClusterSpec) {
		s.TLS = &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs}
		s.Auth = &v1alpha1.AuthSpec{Enabled: true}
	})
	caSec := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	ca := certs.KeyPair{Cert: caSec.Data["tls.crt"], Key: caSec.Data["tls.key"]}
	admin := issueUserCert(t, ca, caSec.Data["ca.crt"], "e2e-admin")
	user := issueUserCert(t, ca, caSec.Data["ca.crt"], "e2e-user")
	nobody := issueUserCert(t, ca, caSec.Data["ca.crt"], "nobody")
	// The writer and endpoint() use e2e-user's certificate and https from here on.
	clientTLS.Store(ns, user.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })

	// Evidence from etcd: authentication is on; root logs in with the generated password.
	cli := rootClient(t, ns, admin)
	eventually(t, time.Minute, "etcd reports authentication on", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := cli.AuthStatus(ctx)
		if err != nil {
			return err
		}
		if !st.Enabled {
			return errString("authentication is off")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A user and a role, as the README shows: e2e-user may read and write keys under "w".
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "writer"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "writer", "w", clientv3.GetPrefixRangeEnd("w"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := cli.UserAddWithOptions(ctx, "e2e-user", "", &clientv3.UserAddOptions{NoPassword: true})
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "e2e-user", "writer"); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("setting up a user as root: %v", err)
		}
	}

	ep := endpoint(ns, 0)
	if out, err := etcdctl(t, "--endpoints", ep, "--cacert", nobody.ca, "--cert", nobody.c, "--key", nobody.k, "put", "w-anonymous", "x"); err == nil {
		t.Fatalf("a certificate without an etcd user could write: %s", out)
	} else {
		t.Logf("certificate without a user: refused (%s)", lastLine(out))
	}
	if out, err := etcdctl(t, "--endpoints", ep, "--cacert", user.ca, "--cert", user.c, "--key", user.k, "put", "x-outside", "x"); err == nil {
		t.Fatalf("e2e-user wrote outside its role's prefix: %s", out)
	} else {
		t.Logf("outside the role: refused (%s)", lastLine(out))
	}

	// The operator, authenticated by its certificate, still rolls the members to 3.7 (one
	// restart and one hand-over each) while e2e-user writes.
	run := upgrade(t, ns, "3.7.3")
	if run.termChanges > 1 {
		t.Errorf("%d leader changes during the upgrade, want at most the one hand-over", run.termChanges)
	}
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	st, err := cli.AuthStatus(actx)
	if err != nil || !st.Enabled {
		t.Fatalf("authentication after the upgrade: %+v %v", st, err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestClusterFromBeforeSecureDefaultsGetsItsOwnOperatorUser (issue 26): the operator of a
// cluster created before secure defaults authenticated as etcd-pilot, the user every such
// cluster's operator certificate names, so with one CA behind two clusters (a shared
// ClusterIssuer) one cluster's operator certificate was root on the other's etcd. With
// authentication on, the operator moves itself to the cluster's own user (the user first,
// then its certificate, then etcd-pilot removed) without losing root at any pass; afterwards
// etcd knows no etcd-pilot and refuses a certificate with that name, and the operator still
// acts (it scales the cluster).
func TestClusterFromBeforeSecureDefaultsGetsItsOwnOperatorUser(t *testing.T) {
	ns := namespace(t)
	// The finalizer already on the object: an operator before secure defaults created it.
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: ns, Finalizers: []string{v1alpha1.FinalizerName}},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: ptrInt32(3),
			TLS:  &v1alpha1.TLSSpec{Peer: &v1alpha1.PeerTLS{}, Client: &v1alpha1.ClientTLS{}, ExtraSANs: localSANs},
			Auth: &v1alpha1.AuthSpec{Enabled: true}}}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	own := render.PerClusterOperatorCommonName(c)
	waitCondition(t, ns, v1alpha1.ConditionAvailable, metav1.ConditionTrue, availableTimeout)
	lockedOut := ""
	eventually(t, 3*time.Minute, "the operator on its own user "+own, func() error {
		cur := getCluster(t, ns)
		if d := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Reason == v1alpha1.ReasonAuthLockedOut {
			lockedOut = d.Message
		}
		s := &corev1.Secret{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.OperatorTLSSecretName("etcd")}, s); err != nil {
			return err
		}
		leaf, err := certs.Parse(s.Data["tls.crt"])
		if err != nil {
			return err
		}
		if leaf.Subject.CommonName != own {
			return fmt.Errorf("the operator's certificate names %s", leaf.Subject.CommonName)
		}
		if a := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionAvailable); a == nil || a.Status != metav1.ConditionTrue {
			return fmt.Errorf("Available is %+v", a)
		}
		return nil
	})
	if lockedOut != "" {
		t.Fatalf("the operator was locked out on the way: %s", lockedOut)
	}
	// It started as etcd-pilot: the certificate was issued again for the move (events are
	// posted asynchronously).
	eventually(t, 30*time.Second, "an event of the operator's certificate issued again for "+v1alpha1.ReasonRenamingOperatorUser, func() error {
		evs := &corev1.EventList{}
		if err := k8s.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, v1alpha1.OperatorTLSSecretName("etcd")) && strings.Contains(e.Message, v1alpha1.ReasonRenamingOperatorUser) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(evs.Items))
	})
	noSecretInEvents(t, ns)

	// Evidence from etcd, as root.
	caSec := getSecret(t, ns, v1alpha1.CASecretName("etcd"))
	ca := certs.KeyPair{Cert: caSec.Data["tls.crt"], Key: caSec.Data["tls.key"]}
	admin := issueUserCert(t, ca, caSec.Data["ca.crt"], "e2e-admin")
	// endpoint() and endpoints() speak https from here on.
	clientTLS.Store(ns, admin.tls)
	t.Cleanup(func() { clientTLS.Delete(ns) })
	cli := rootClient(t, ns, admin)
	eventually(t, time.Minute, "etcd-pilot removed from etcd's users", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		users, err := cli.UserList(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(users.Users, render.LegacyOperatorCommonName) || !slices.Contains(users.Users, own) {
			return fmt.Errorf("etcd's users %v", users.Users)
		}
		u, err := cli.UserGet(ctx, own)
		if err != nil {
			return err
		}
		if !slices.Contains(u.Roles, "root") {
			return fmt.Errorf("%s has roles %v", own, u.Roles)
		}
		return nil
	})
	// Another cluster's operator certificate from the same CA, as before: no user here. The
	// same request with a certificate of the cluster's own user is the control.
	other := issueUserCert(t, ca, caSec.Data["ca.crt"], render.LegacyOperatorCommonName)
	// A member that has not applied the removal yet answers "revision of auth store is old":
	// asked again until it refuses for the reason that matters.
	eventually(t, 30*time.Second, "a certificate named "+render.LegacyOperatorCommonName+" refused", func() error {
		out, err := etcdctl(t, "--endpoints", endpoint(ns, 0), "--cacert", other.ca, "--cert", other.c, "--key", other.k, "put", "taken", "x")
		if err == nil {
			t.Fatalf("a certificate named %s could still write: %s", render.LegacyOperatorCommonName, out)
		}
		if !strings.Contains(out, "permission denied") {
			return fmt.Errorf("%s", lastLine(out))
		}
		t.Logf("a certificate named %s: refused (%s)", render.LegacyOperatorCommonName, lastLine(out))
		return nil
	})
	mine := issueUserCert(t, ca, caSec.Data["ca.crt"], own)
	if out, err := etcdctl(t, "--endpoints", endpoint(ns, 0), "--cacert", mine.ca, "--cert", mine.c, "--key", mine.k, "put", "taken", "x"); err != nil {
		t.Fatalf("a certificate named %s (the control) could not write: %s", own, out)
	}
	// The operator still acts as its new user: it scales the cluster out.
	scaleTo(t, ns, 4)
	eventually(t, time.Minute, "4 voters in etcd's member list", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		m, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		voters := 0
		for _, x := range m.Members {
			if !x.IsLearner {
				voters++
			}
		}
		if voters != 4 {
			return fmt.Errorf("%d voters", voters)
		}
		return nil
	})
}

// rootClient is an etcd client of cluster "etcd" in ns logged in as root (the password from
// its Secret), over TLS with the certificate tlsOf; closed when the test ends.
func rootClient(t *testing.T, ns string, tlsOf userCert) *clientv3.Client {
	t.Helper()
	root := getSecret(t, ns, v1alpha1.RootAuthSecretName("etcd"))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(endpoints(ns, 3), ","),
		TLS:       tlsOf.tls, Username: string(root.Data["username"]), Password: string(root.Data["password"]),
		DialTimeout: 5 * time.Second, DialOptions: []grpc.DialOption{grpc.WithContextDialer(dialName)}, Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

package execute

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// authExec carries out an authentication step.
func (x *Executor) authExec(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, a plan.Step) error {
	cl, err := x.Dial(ctx, observe.ClientURLs(e), t.TLS)
	if err != nil {
		return err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, 2*x.EtcdTimeout)
	defer cancel()
	switch a.Kind {
	case plan.EnsureRootUser:
		password := ""
		if a.User == authplan.RootUser {
			if password, err = x.RootPassword(ctx, c); err != nil {
				return err
			}
		}
		return cl.EnsureRootUser(actx, a.User, password)
	case plan.RemoveUser:
		return cl.RemoveUser(actx, a.User)
	case plan.EnableAuth, plan.DisableAuth:
		return cl.SetAuth(actx, a.Kind == plan.EnableAuth)
	}
	return fmt.Errorf("unknown authentication step %s", a.Kind)
}

// adoptOperatorUser issues the operator's client certificate (Operator source) again, with
// the cluster's own common name: from then on the certificate's name is kept
// (render.KeepOperatorCommonName), so the certificate itself records the move. It reads the
// CA and the certificate's Secret past the cache and writes only if that Secret is unchanged
// since.
func (x *Executor) adoptOperatorUser(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, user string) error {
	name := v1alpha1.OperatorTLSSecretName(c.Name)
	var leaf *certificates.Leaf
	for _, w := range render.OperatorCertificates(c, t, render.SeparatePeerCA) {
		for i := range w.Leaves {
			if w.Leaves[i].Secret == name {
				leaf = &w.Leaves[i]
			}
		}
	}
	if leaf == nil {
		return fmt.Errorf("the operator does not issue its own client certificate for %s/%s (the client side's source is not Operator)", c.Namespace, c.Name)
	}
	leaf.Request.CommonName = user
	observed := map[string]certificates.Material{}
	for _, n := range []string{v1alpha1.CASecretName(c.Name), name} {
		m, ok, err := observe.ReadTLSSecret(ctx, x.APIReader, c.Namespace, n)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("Secret %s/%s is missing", c.Namespace, n)
		}
		observed[n] = m
	}
	if cur, err := certs.Parse(observed[name].Cert); err == nil && cur.Subject.CommonName == user {
		// Done already (the pass read an older certificate from the cache).
		return nil
	}
	// The name first on the CA Secret, so that a lost certificate Secret keeps it (see
	// render.KeepOperatorCommonName); the certificate it records goes on to be kept by its
	// own name.
	caName := v1alpha1.CASecretName(c.Name)
	if ca := observed[caName]; ca.OperatorUser != user {
		ca.OperatorUser = user
		if err := x.writeTLSSecret(ctx, c, caName, "", ca); err != nil {
			return err
		}
		ca.ResourceVersion = ""
		observed[caName] = ca
	}
	want := certificates.Want{CASecret: caName}
	return x.issue(ctx, c, want, certificates.Step{Kind: certificates.IssueLeaf, Secret: name, Leaf: *leaf, Reason: v1alpha1.ReasonRenamingOperatorUser}, observed, time.Now())
}

// RootPassword returns the root user's password from its Secret, creating the Secret with a
// random password first when it does not exist. The password never leaves the Secret and the
// call that creates the user.
func (x *Executor) RootPassword(ctx context.Context, c *v1alpha1.EtcdCluster) (string, error) {
	p, found, err := observe.RootPassword(ctx, x.APIReader, c)
	if err != nil || found {
		return p, err
	}
	name := v1alpha1.RootAuthSecretName(c.Name)
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to draw a password: %w", err)
	}
	password := base64.RawURLEncoding.EncodeToString(b)
	s := &corev1.Secret{
		// Owned by the cluster: it goes with it, and is kept as long as the cluster is.
		ObjectMeta: render.OwnedSecretMeta(c, name),
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"username": []byte(authplan.RootUser), "password": []byte(password)},
	}
	if err := x.Client.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created by another pass since: read it next time.
			return "", fmt.Errorf("the Secret %s/%s was created concurrently; trying again", c.Namespace, name)
		}
		return "", fmt.Errorf("failed to create Secret %s/%s: %w", c.Namespace, name, err)
	}
	x.Recorder.Eventf(c, nil, corev1.EventTypeNormal, v1alpha1.ReasonEnablingAuth, "CreateSecret", "Generated the password of etcd's root user into Secret %s", name)
	return password, nil
}

package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// authStep asks the authentication planner when membership, the rollout and maintenance have
// nothing to do (a is None) and spec.auth is set. It reads etcd's authentication state with
// one call; the root user's Secret is created before the root user.
func (r *EtcdClusterReconciler) authStep(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, a plan.Step) (plan.Step, error) {
	if c.Spec.Auth == nil || e == nil || a.Kind != plan.None {
		return a, nil
	}
	user := observe.OperatorUser(t)
	if user == "" && !c.Spec.Auth.Enabled {
		return a, nil
	}
	if user == "" {
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonEnablingAuth,
			Message: "spec.auth needs the operator's client certificate (tls.client), which it does not have yet"}, nil
	}
	cl, err := r.DialEtcd(ctx, clientURLs(e), t.TLS)
	if err != nil {
		return a, err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, r.EtcdTimeout)
	defer cancel()
	st, err := cl.Auth(actx, []string{authplan.RootUser, user})
	if err != nil {
		if etcd.AuthRefused(err) {
			// Auth is on and the operator is not a user etcd knows, or not allowed to read
			// users: the planner says how to fix it.
			st = etcd.AuthState{Enabled: true, Roles: map[string][]string{}}
		} else {
			return a, err
		}
	}
	s := authplan.Decide(authplan.Observation{Enabled: c.Spec.Auth.Enabled, OperatorUser: user, State: st})
	if s.Kind == plan.EnsureRootUser && s.User == authplan.RootUser {
		if _, err := r.rootPassword(ctx, c); err != nil {
			return a, err
		}
	}
	return s, nil
}

// clientURLs are the client URLs of the members that answered.
func clientURLs(e *etcd.Observed) []string {
	var out []string
	for _, m := range e.Cluster.Members {
		if _, ok := e.Status[m.ID]; ok && len(m.ClientURLs) > 0 {
			out = append(out, m.ClientURLs[0])
		}
	}
	return out
}

// authExec carries out an authentication step.
func (r *EtcdClusterReconciler) authExec(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, a plan.Step) error {
	cl, err := r.DialEtcd(ctx, clientURLs(e), t.TLS)
	if err != nil {
		return err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, 2*r.EtcdTimeout)
	defer cancel()
	switch a.Kind {
	case plan.EnsureRootUser:
		password := ""
		if a.User == authplan.RootUser {
			if password, err = r.rootPassword(ctx, c); err != nil {
				return err
			}
		}
		return cl.EnsureRootUser(actx, a.User, password)
	case plan.EnableAuth, plan.DisableAuth:
		return cl.SetAuth(actx, a.Kind == plan.EnableAuth)
	}
	return fmt.Errorf("unknown authentication step %s", a.Kind)
}

// rootPassword returns the root user's password from its Secret, creating the Secret with a
// random password first when it does not exist. The password never leaves the Secret and the
// call that creates the user.
func (r *EtcdClusterReconciler) rootPassword(ctx context.Context, c *v1alpha1.EtcdCluster) (string, error) {
	name := v1alpha1.RootAuthSecretName(c.Name)
	s := &corev1.Secret{}
	// Past the cache: only read while users are set up, and a Secret just created must be
	// seen at once.
	err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	if err == nil {
		if p := string(s.Data["password"]); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("Secret %s/%s has no password: put the root user's password under the key password, or delete the Secret so the operator generates one (only before authentication is on)", c.Namespace, name)
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, name, err)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("failed to draw a password: %w", err)
	}
	password := base64.RawURLEncoding.EncodeToString(b)
	s = &corev1.Secret{
		// Owned by the cluster: it goes with it, and is kept as long as the cluster is.
		ObjectMeta: render.OwnedSecretMeta(c, name),
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"username": []byte(authplan.RootUser), "password": []byte(password)},
	}
	if err := r.Client.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created by another pass since: read it next time.
			return "", fmt.Errorf("the Secret %s/%s was created concurrently; trying again", c.Namespace, name)
		}
		return "", fmt.Errorf("failed to create Secret %s/%s: %w", c.Namespace, name, err)
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, v1alpha1.ReasonEnablingAuth, "CreateSecret", "Generated the password of etcd's root user into Secret %s", name)
	return password, nil
}

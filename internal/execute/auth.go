package execute

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
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

// adoptOperatorUser records on c (AnnotationOperatorUser) that the operator's client
// certificate takes the cluster's own common name from now on: a merge patch of that one
// annotation, so nothing else of the user's object is written.
func (x *Executor) adoptOperatorUser(ctx context.Context, c *v1alpha1.EtcdCluster) error {
	live := &v1alpha1.EtcdCluster{}
	live.Namespace, live.Name = c.Namespace, c.Name
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationOperatorUser, v1alpha1.OperatorUserPerCluster)))
	if err := x.Client.Patch(ctx, live, patch); err != nil {
		return fmt.Errorf("failed to record the operator's new user on EtcdCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1alpha1.AnnotationOperatorUser] = v1alpha1.OperatorUserPerCluster
	x.Recorder.Eventf(c, nil, corev1.EventTypeNormal, v1alpha1.ReasonRenamingOperatorUser, string(plan.AdoptOperatorUser),
		"The operator's client certificate takes the cluster's own common name %s from the next pass", render.PerClusterOperatorCommonName(c))
	return nil
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

package observe

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// Auth reads what the authentication planner needs when spec.auth is set and etcd answered
// (e): spec.auth.enabled, the operator's user, and etcd's authentication state, read with one
// call (through dial, bounded by timeout). asked is false when the planner has nothing to
// answer: spec.auth unset, etcd not observed, or neither the operator's client certificate nor
// spec.auth.enabled. Without the operator's user etcd is not asked (the planner waits for the
// certificate).
//
// The pass's observation (obs, see Members) read etcd's authentication state with these users
// already when it could: then etcd is not asked again.
func Auth(ctx context.Context, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed, obs *Observation) (o authplan.Observation, asked bool, err error) {
	if c.Spec.Auth == nil || e == nil {
		return o, false, nil
	}
	user := OperatorUser(t)
	if user == "" && !c.Spec.Auth.Enabled {
		return o, false, nil
	}
	o = authplan.Observation{Enabled: c.Spec.Auth.Enabled, OperatorUser: user}
	o.LegacyUser, o.PerClusterUser = OperatorUserNames(c)
	if user == "" {
		return o, true, nil
	}
	if obs != nil && obs.Auth != nil && slices.Equal(obs.AuthUsers, authplan.Users(o)) {
		o.State = *obs.Auth
		if obs.AuthRefused != nil && o.State.Roles == nil {
			// Refused: auth is on and the operator is not a user etcd knows (see below).
			o.State.Roles = map[string][]string{}
		}
		return o, true, nil
	}
	cl, err := dial(ctx, ClientURLs(e), t.TLS)
	if err != nil {
		return o, true, err
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cl.Auth(actx, authplan.Users(o))
	if err != nil {
		if etcd.AuthRefused(err) {
			// Auth is on and the operator is not a user etcd knows, or not allowed to read
			// users: the planner says how to fix it.
			st = etcd.AuthState{Enabled: true, Roles: map[string][]string{}}
		} else {
			return o, true, err
		}
	}
	o.State = st
	return o, true, nil
}

// OperatorUserNames are the names the operator's user may have in c's etcd: the one every
// cluster created before secure defaults shares, and c's own; perCluster is "" when the
// operator does not issue its certificate itself (the client side's source is not Operator:
// cert-manager's Certificate, or the user's Secret, names it).
func OperatorUserNames(c *v1alpha1.EtcdCluster) (legacy, perCluster string) {
	if t := c.Spec.TLS; t == nil || t.Client == nil || render.SourceOf(t.Client.Source) != v1alpha1.TLSSourceOperator {
		return render.LegacyOperatorCommonName, ""
	}
	return render.LegacyOperatorCommonName, render.PerClusterOperatorCommonName(c)
}

// ClientURLs are the client URLs of the members that answered.
func ClientURLs(e *etcd.Observed) []string {
	var out []string
	for _, m := range e.Cluster.Members {
		if _, ok := e.Status[m.ID]; ok && len(m.ClientURLs) > 0 {
			out = append(out, m.ClientURLs[0])
		}
	}
	return out
}

// RootPassword reads the root user's password from its Secret through api (the API server);
// found is false when the Secret does not exist (the executor then creates it). A Secret
// without a password is an error.
func RootPassword(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster) (password string, found bool, err error) {
	name := v1alpha1.RootAuthSecretName(c.Name)
	s := &corev1.Secret{}
	// Past the cache: only read while users are set up, and a Secret just created must be
	// seen at once.
	err = api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	if err == nil {
		if p := string(s.Data["password"]); p != "" {
			return p, true, nil
		}
		return "", true, fmt.Errorf("Secret %s/%s has no password: put the root user's password under the key password, or delete the Secret so the operator generates one (only before authentication is on)", c.Namespace, name)
	}
	if !apierrors.IsNotFound(err) {
		return "", false, fmt.Errorf("failed to get Secret %s/%s: %w", c.Namespace, name, err)
	}
	return "", false, nil
}

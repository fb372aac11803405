// Package auth plans etcd's authentication (spec.auth): the root user, the operator's own
// user, and turning authentication on or off. It is pure: what etcd reported in, at most one
// step out. Every step passes the safety gate (AuthChangesWithAHealthyQuorum).
package auth

import (
	"fmt"
	"slices"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	etcd "github.com/etcd-pilot/etcd-pilot/internal/etcd/state"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// RootUser is etcd's root user: AuthEnable needs it, with the root role.
const RootUser = "root"

// Observation is what the planner needs.
type Observation struct {
	// Enabled is spec.auth.enabled.
	Enabled bool
	// OperatorUser is the user the operator authenticates as (its client certificate's
	// common name).
	OperatorUser string
	// State is etcd's authentication as read in this pass, with the roles of the users
	// Users names.
	State etcd.AuthState
	// LegacyUser is the common name every operator certificate of a cluster created before
	// secure defaults shares (render.LegacyOperatorCommonName), and PerClusterUser this
	// cluster's own (render.PerClusterOperatorCommonName). PerClusterUser is "" when the
	// operator does not issue its certificate itself (the client side's source is not
	// Operator): then it renames nothing.
	LegacyUser, PerClusterUser string
}

// Users are the etcd users whose roles the planner reads: root, the operator's, and, when it
// may rename its user, the other of the legacy and the cluster's own name.
func Users(o Observation) []string {
	users := []string{RootUser, o.OperatorUser}
	if o.PerClusterUser == "" || o.LegacyUser == o.PerClusterUser {
		return users
	}
	for _, u := range []string{o.PerClusterUser, o.LegacyUser} {
		if u != o.OperatorUser {
			users = append(users, u)
		}
	}
	return users
}

// Decide returns the next step: the root user, then the operator's, then authentication on;
// or authentication off. None when etcd matches the spec. Authentication on waits for the
// operator's client certificate (OperatorUser "").
//
// Then the operator's user moves to the cluster's own name, when it is still the one every
// cluster from before secure defaults shares (another such cluster's operator certificate
// from the same CA, a shared ClusterIssuer, would be root here): the new user with the root
// role first, while the operator is still root as the old one; then its certificate issued
// again with the new name, which it keeps from then on; then, once the operator presents it,
// the old user is removed. With authentication off no user is needed for the move.
func Decide(o Observation) plan.Step {
	if !o.Enabled {
		if o.State.Enabled {
			return plan.Step{Kind: plan.DisableAuth, Reason: v1alpha1.ReasonDisablingAuth,
				Message: "turning etcd's authentication off (spec.auth.enabled is false); users and roles are kept"}
		}
		return rename(o)
	}
	if o.OperatorUser == "" {
		// Without a user of its own the operator could not act once authentication is on.
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonEnablingAuth,
			Message: "spec.auth needs the operator's client certificate (tls.client), which it does not have yet"}
	}
	if o.State.Enabled && !slices.Contains(o.State.Roles[o.OperatorUser], "root") {
		// With authentication on, only root may add users: the operator cannot repair this.
		return plan.Step{Kind: plan.Wait, Reason: v1alpha1.ReasonAuthLockedOut,
			Message: fmt.Sprintf("etcd's authentication is on and the operator's client certificate (common name %s) is no user with the root role, so it cannot change membership, upgrade or back up the cluster. As root (password in the Secret <name>-root-auth) run: etcdctl user add %s --no-password; etcdctl user grant-role %s root", o.OperatorUser, o.OperatorUser, o.OperatorUser)}
	}
	for _, u := range []string{RootUser, o.OperatorUser} {
		if !slices.Contains(o.State.Roles[u], "root") {
			return plan.Step{Kind: plan.EnsureRootUser, User: u, Reason: v1alpha1.ReasonEnablingAuth,
				Message: fmt.Sprintf("creating etcd user %s with the root role, before authentication is turned on", u)}
		}
	}
	if !o.State.Enabled {
		return plan.Step{Kind: plan.EnableAuth, Reason: v1alpha1.ReasonEnablingAuth,
			Message: "turning etcd's authentication on: from now on requests without a known user are refused"}
	}
	return rename(o)
}

// rename is the next step of moving the operator's user to the cluster's own name (see
// Decide), None when there is none.
func rename(o Observation) plan.Step {
	if o.PerClusterUser == "" || o.LegacyUser == "" || o.PerClusterUser == o.LegacyUser || o.OperatorUser == "" {
		return plan.Step{Kind: plan.None}
	}
	switch o.OperatorUser {
	case o.LegacyUser:
		if o.State.Enabled && !slices.Contains(o.State.Roles[o.PerClusterUser], "root") {
			return plan.Step{Kind: plan.EnsureRootUser, User: o.PerClusterUser, Reason: v1alpha1.ReasonRenamingOperatorUser,
				Message: fmt.Sprintf("creating etcd user %s with the root role: the operator's client certificate takes this cluster's own name next, instead of %s, which the operator certificate of every cluster created before secure defaults names", o.PerClusterUser, o.LegacyUser)}
		}
		return plan.Step{Kind: plan.AdoptOperatorUser, User: o.PerClusterUser, Reason: v1alpha1.ReasonRenamingOperatorUser,
			Message: fmt.Sprintf("issuing the operator's client certificate with this cluster's own name %s", o.PerClusterUser)}
	case o.PerClusterUser:
		if _, ok := o.State.Roles[o.LegacyUser]; ok {
			return plan.Step{Kind: plan.RemoveUser, User: o.LegacyUser, Reason: v1alpha1.ReasonRenamingOperatorUser,
				Message: fmt.Sprintf("removing etcd user %s, the operator's former one: another cluster's operator certificate from the same CA names it", o.LegacyUser)}
		}
	}
	return plan.Step{Kind: plan.None}
}

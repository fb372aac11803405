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
	// State is etcd's authentication as read in this pass.
	State etcd.AuthState
}

// Decide returns the next step: the root user, then the operator's, then authentication on;
// or authentication off. None when etcd matches the spec. Authentication on waits for the
// operator's client certificate (OperatorUser "").
func Decide(o Observation) plan.Step {
	if !o.Enabled {
		if o.State.Enabled {
			return plan.Step{Kind: plan.DisableAuth, Reason: v1alpha1.ReasonDisablingAuth,
				Message: "turning etcd's authentication off (spec.auth.enabled is false); users and roles are kept"}
		}
		return plan.Step{Kind: plan.None}
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
	return plan.Step{Kind: plan.None}
}

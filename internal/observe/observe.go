// Package observe reads, once per pass, what the planners decide on: the StatefulSet, the member
// pods and what etcd answers. "Could not read" is a value, never "absent". It decides nothing.
package observe

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	authplan "github.com/etcd-pilot/etcd-pilot/internal/plan/auth"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/storage"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OperatorUser is the etcd user the operator authenticates as: the common name of the client
// certificate it presents ("" without one).
func OperatorUser(t render.Topology) string {
	if t.TLS == nil || len(t.TLS.Certificates) == 0 || len(t.TLS.Certificates[0].Certificate) == 0 {
		return ""
	}
	leaf, err := x509.ParseCertificate(t.TLS.Certificates[0].Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.Subject.CommonName
}

// Observation is everything one pass knows about a cluster. Conditions are a pure function of
// it.
type Observation struct {
	// Cluster is the EtcdCluster's name.
	Cluster string
	// Memory is what earlier passes recorded, loaded once at the start of this pass
	// (memory.Of); nothing in the pass reads it from the object's status again.
	Memory       memory.Memory
	Generation   int64
	SpecReplicas int32
	Paused       bool
	Ephemeral    bool
	WasAvailable bool

	SpecErr  error
	ApplyErr error

	StatefulSet *appsv1.StatefulSet // nil when absent
	// StsApplied is the hash annotation of the StatefulSet as applied in this pass ("" when
	// this pass applied none). In the pass that applies a new one, sts is read from the cache
	// and may still be the old one: its revision and the pods' then say nothing about the new.
	StsApplied string
	// Pods are the member Pods, listed once per pass (nil when the StatefulSet is absent).
	Pods *corev1.PodList
	// Claims are the member pods' data claims the membership observation read, by pod name
	// (nil when it did not run, or under emptyDir storage).
	Claims map[string]*corev1.PersistentVolumeClaim
	// Storage is the storage planner's view of them (nil when it was not built).
	Storage *storage.Observation
	// RenderedStorageSize is the size the rendered StatefulSet's data claim template asks
	// (before it is pinned to the live one); "" when none was rendered.
	RenderedStorageSize string

	Etcd    *etcd.Observed // nil when etcd was not asked or did not answer
	EtcdErr error
	// EtcdAsked is true when this pass asked etcd (the StatefulSet exists); reached counts
	// the members that answered a status call when none could read the member list.
	EtcdAsked bool
	Reached   int
	// Answers are the status replies of the members that answered the first round of this
	// pass's observation, by member ID, also when none could read the member list.
	Answers map[uint64]etcd.MemberStatus

	// Auth is etcd's authentication state read in this pass (nil when it was not read or
	// etcd did not answer); authRefused is an answer of etcd in this pass that refused the
	// operator as a user (none, unknown, not allowed), nil when none did.
	Auth        *etcd.AuthState
	AuthRefused error
	// AuthUsers are the users whose roles Auth holds (nil when Auth was read without users).
	AuthUsers []string
	// ListVoters is the number of voting members in etcd's member list read linearizably
	// (which needs a leader with a quorum) when etcd refused the operator its status calls:
	// the evidence that the cluster serves. 0 when not read.
	ListVoters int
	// ReadyMembers counts the members that answered /readyz OK in this pass (each confirmed a
	// linearizable read through a leader with a quorum) when etcd refused the operator its
	// status calls and its member list (etcd 3.6 and later refuse the member list to a client
	// with no user under authentication). 0 when not asked.
	ReadyMembers int
	// OperatorUser is who the operator is in etcd: its client certificate's common name (""
	// when it dials without one).
	OperatorUser string

	// Membership is the Membership step of this pass; nil when none was considered
	// (paused, invalid spec, nothing applied yet).
	Membership *plan.Step

	// Upgrade is the rollout's progress when upgradeKnown (the rollout was considered).
	Upgrade      *v1alpha1.UpgradeStatus
	UpgradeKnown bool

	// TargetVersion is spec.version (or its default); now is the pass's clock.
	TargetVersion string
	Now           time.Time
	// SnapshotCount is the members' --snapshot-count.
	SnapshotCount uint64

	// Backups are the cluster's EtcdBackups, oldest first; backupCond is BackupReady (nil
	// without spec.backup).
	Backups    []v1alpha1.EtcdBackup
	BackupCond *metav1.Condition

	// CaRotation is where a CA rotation stands ("" when none runs).
	CaRotation string
	// ClientSwitch is where a switch of the client port between plain and TLS stands (""
	// when none runs).
	ClientSwitch string
	// ClientSwitchHeld is true when the switch to plain holds because etcd's authentication
	// is on (or could not be read): clientSwitch says what to do.
	ClientSwitchHeld bool
	// PeerSwitch is the decision of the switch of the peer side between plain and TLS, nil
	// when none runs.
	PeerSwitch *peerswitch.Decision
}

// Members is observe for any controller that reads a cluster's members: it fills o.sts,
// o.pods and what etcd answered.
func Members(ctx context.Context, kc client.Client, dial etcd.Dialer, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, o *Observation) error {
	sts := &appsv1.StatefulSet{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: t.StatefulSet}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("failed to get StatefulSet %s/%s: %w", t.Namespace, t.StatefulSet, err)
	}
	o.StatefulSet = sts
	pods := &corev1.PodList{}
	if err := kc.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
	}
	o.Pods = pods
	var endpoints, names []string
	for i := range pods.Items {
		p := plan.Pod{}
		plan.PodState(&p, &pods.Items[i])
		if _, ok := plan.Ordinal(t.StatefulSet, pods.Items[i].Name); ok && p.Started {
			endpoints = append(endpoints, t.Endpoint(pods.Items[i].Name))
			names = append(names, pods.Items[i].Name)
		}
	}
	o.EtcdAsked = true
	if len(endpoints) == 0 {
		o.EtcdErr = errors.New("no member pod runs etcd with its listeners up")
		return nil
	}
	cl, err := dial(ctx, endpoints, t.TLS)
	if err != nil {
		o.EtcdErr = err
		return nil
	}
	defer cl.Close()
	o.OperatorUser = OperatorUser(t)
	rec := &refusals{Client: cl}
	obs, answers, err := etcd.ObserveMembers(ctx, rec, endpoints, names, timeout)
	o.Answers = answers
	o.AuthRefused = rec.first()
	if err != nil {
		o.EtcdErr, o.Reached = err, len(answers)
		if o.AuthRefused != nil {
			// etcd answers, and refuses the operator its status calls (they need a user
			// while authentication is on): that is no outage. The member list needs no
			// user, and etcd serves it only through a leader with a quorum.
			lctx, cancel := context.WithTimeout(ctx, timeout)
			list, lerr := cl.MemberList(lctx)
			cancel()
			if lerr == nil {
				for _, m := range list.Members {
					if !m.IsLearner {
						o.ListVoters++
					}
				}
			}
			if o.ListVoters == 0 {
				// The member list was refused too: ask each member whether it serves
				// linearizable reads, which needs no user.
				for _, ep := range endpoints {
					rctx, cancel := context.WithTimeout(ctx, timeout)
					if cl.Ready(rctx, ep) == nil {
						o.ReadyMembers++
					}
					cancel()
				}
			}
		}
		return nil
	}
	o.Etcd = &obs
	ReadsOfDefragmented(ctx, cl, timeout, c, t, o.Etcd)
	if !authMayMatter(c, o.Memory, o.AuthRefused) {
		return nil
	}
	// etcd's authentication, once per pass while it may be on: whether the operator is locked
	// out, and what admission reads in status.authEnabled. etcd serves AuthStatus through raft
	// (an entry in the log per call), so a cluster whose etcd said it is off, and whose spec
	// does not ask for it, is not asked again: auth turned on by hand shows as refused calls.
	// With spec.auth, the same call reads the users the authentication planner needs (see
	// Auth), so a pass asks etcd once.
	var users []string
	if u := o.OperatorUser; c.Spec.Auth != nil && u != "" {
		ao := authplan.Observation{OperatorUser: u}
		ao.LegacyUser, ao.PerClusterUser = OperatorUserNames(c)
		users = authplan.Users(ao)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	st, err := cl.Auth(actx, users)
	cancel()
	if users != nil && etcd.AuthRefused(err) {
		// Reading users needs more than the status does: whether etcd refuses the operator
		// as a user is the status call's answer alone. The users stay unknown to the
		// operator (no roles), which the authentication planner reads as refused.
		actx, cancel := context.WithTimeout(ctx, timeout)
		st, err = cl.Auth(actx, nil)
		cancel()
		if err == nil {
			st.Roles = map[string][]string{}
		}
	}
	switch {
	case err == nil:
		o.Auth = &st
	case etcd.AuthRefused(err):
		// etcd answers this only without authentication, or to root.
		o.Auth, o.AuthRefused = &etcd.AuthState{Enabled: true}, err
	}
	o.AuthUsers = users
	return nil
}

// ReadsOfDefragmented asks the member a defragmentation record names for a read of its own
// database, once it answered with an applied index past the record's: the applied index alone
// is no evidence that the defragmentation finished (entries that need no database apply while
// it runs). The answer goes into e.Reads, for plan.DefragmentationOver.
func ReadsOfDefragmented(ctx context.Context, cl etcd.Client, timeout time.Duration, c *v1alpha1.EtcdCluster, t render.Topology, e *etcd.Observed) {
	raw, ok := c.Annotations[DefragmentationAnnotation]
	if !ok {
		return
	}
	d := plan.ParseDefragmentation(raw)
	if st, ok := e.Status[d.ID]; d.Unreadable != "" || !ok || st.AppliedIndex <= d.AppliedIndex {
		return
	}
	for _, m := range e.Cluster.Members {
		if m.ID != d.ID || m.Name == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := cl.ServesReads(rctx, t.Endpoint(m.Name))
		cancel()
		e.Reads = map[uint64]error{d.ID: err}
	}
}

// authMayMatter reports whether a pass reads etcd's authentication state: spec.auth is set,
// etcd's answer is not known yet or was "on", or etcd refused the operator a call as a user.
func authMayMatter(c *v1alpha1.EtcdCluster, m memory.Memory, refused error) bool {
	return c.Spec.Auth != nil || m.AuthEnabled == nil || *m.AuthEnabled || refused != nil
}

// refusals is an etcd client that keeps the first answer of etcd refusing the operator as a
// user, among the status calls of an observation (which drops their errors).
type refusals struct {
	etcd.Client
	mu  sync.Mutex
	err error
}

// Status implements etcd.Client.
func (r *refusals) Status(ctx context.Context, endpoint string) (etcd.MemberStatus, error) {
	st, err := r.Client.Status(ctx, endpoint)
	if etcd.AuthRefused(err) {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return st, err
}

func (r *refusals) first() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

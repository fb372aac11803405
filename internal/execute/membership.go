package execute

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstructuredv1 "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/metrics"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

const (
	// MembershipFieldOwner is the field manager of the StatefulSet's replicas and of the
	// membership ConfigMap.
	MembershipFieldOwner = "etcd-pilot-membership"
	// FaultAfterEnv names a step kind after which the operator exits (tests of crash safety
	// only: the end-to-end suite sets it to kill the operator between two steps). The manager
	// command turns it into EtcdClusterReconciler.AfterStep; the executor never exits itself.
	FaultAfterEnv = "ETCD_PILOT_FAULT_AFTER"
)

// EnsureFoundingConfig creates the membership ConfigMap with the founding list before anything
// else of a cluster that never formed, so the first pods (the StatefulSet starts with one
// replica) never start before it exists.
func (x *Executor) EnsureFoundingConfig(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) error {
	if c.Status.ClusterID != "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := x.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	if err == nil || !apierrors.IsNotFound(err) {
		return client.IgnoreNotFound(err)
	}
	list := observe.FoundingList(t, render.SpecReplicas(c))
	return x.ApplyMembershipConfig(ctx, c, list, map[string]string{"ETCD_INITIAL_CLUSTER": strings.Join(list, ","), "ETCD_INITIAL_CLUSTER_STATE": "new"}, "")
}

// EnsureMembershipConfig applies the membership ConfigMap when its data or the member record
// differs, keeping the founding list recorded. The member record is etcd's member list of
// this pass when it was read, else the one recorded.
func (x *Executor) EnsureMembershipConfig(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation) error {
	data := membership.InitialCluster(mo)
	name := values.MembershipConfigMapName(c.Name)
	cur := &corev1.ConfigMap{}
	err := x.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get ConfigMap %s/%s: %w", c.Namespace, name, err)
	}
	record := cur.Annotations[observe.MembersAnnotation]
	computed := false
	if mo.Etcd != nil && mo.Etcd.Cluster.ClusterID != 0 && len(mo.Etcd.Cluster.Members) > 0 && !mo.SplitBrain {
		computed = true
		limit := max(mo.StsReplicas, mo.Desired, mo.Founders)
		now := plan.RecordOf(*mo.Etcd, t.StatefulSet, t.PeerURL, limit, mo.Now)
		if old, ok := observe.ParseMemberRecord(record); !ok || !old.SameMembers(now) {
			b, err := json.Marshal(now)
			if err != nil {
				return fmt.Errorf("failed to encode the member record: %w", err)
			}
			record = string(b)
		}
	}
	if err == nil && mapsEqual(cur.Data, data) && cur.Annotations[observe.FoundersAnnotation] != "" && cur.Annotations[observe.MembersAnnotation] == record {
		return nil
	}
	if !computed {
		// The record is carried over as it is stored: the cache may show an older one, or not
		// show the ConfigMap yet (an apply without it would drop it).
		fresh := &corev1.ConfigMap{}
		err := x.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, fresh)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to get ConfigMap %s/%s: %w", c.Namespace, name, err)
		}
		record = fresh.Annotations[observe.MembersAnnotation]
	}
	return x.ApplyMembershipConfig(ctx, c, mo.FoundingList, data, record)
}

// ApplyMembershipConfig applies the membership ConfigMap with data, the founding list and the
// member record ("" drops it: the ConfigMap's field owner no longer sets it).
func (x *Executor) ApplyMembershipConfig(ctx context.Context, c *v1alpha1.EtcdCluster, founders []string, data map[string]string, record string) error {
	name := values.MembershipConfigMapName(c.Name)
	cm := &unstructuredv1.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": c.Namespace,
			"labels": map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
			"annotations": map[string]any{
				"etcdpilot.io/purpose":     "initial cluster for members that start without data; written by the operator, read by etcd at start",
				observe.FoundersAnnotation: strings.Join(founders, ","),
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "EtcdCluster", "name": c.Name, "uid": string(c.UID),
				"controller": true, "blockOwnerDeletion": true,
			}},
		},
		"data": toAnyMap(data),
	}}
	if record != "" {
		cm.Object["metadata"].(map[string]any)["annotations"].(map[string]any)[observe.MembersAnnotation] = record
	}
	if err := x.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(cm), client.FieldOwner(MembershipFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply ConfigMap %s/%s: %w", c.Namespace, name, err)
	}
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func toAnyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ScaleStatefulSet sets the StatefulSet's replicas under the membership field owner, when
// they differ.
func (x *Executor) ScaleStatefulSet(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, want, have int32) error {
	if want == have {
		return nil
	}
	sts := &unstructuredv1.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": t.StatefulSet, "namespace": c.Namespace},
		"spec":     map[string]any{"replicas": int64(want)},
	}}
	if err := x.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(sts), client.FieldOwner(MembershipFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to scale StatefulSet %s/%s to %d: %w", c.Namespace, t.StatefulSet, want, err)
	}
	return nil
}

// StampClaims records on each started, healthy member's data holder (its claim, or its pod
// under emptyDir storage) which member's data it holds. Only a member that runs is stamped,
// and a member without data can run only as a founder or as the learner being added (see
// membershipEnv), so a stamp never marks an empty volume as a voter's data.
func (x *Executor) StampClaims(ctx context.Context, c *v1alpha1.EtcdCluster, mo membership.Observation) error {
	if mo.Etcd == nil {
		return nil
	}
	for _, m := range mo.Etcd.Cluster.Members {
		st, ok := mo.Etcd.Status[m.ID]
		if m.Name == "" || !ok || len(st.Errors) > 0 {
			continue
		}
		for _, p := range mo.Pods {
			if p.Name != m.Name || !p.PVCExists || !p.Running || p.PVCDeleting || p.DataStamp != "" {
				// Stamped already, as the observation read it: a stamp is never rewritten.
				continue
			}
			var holder client.Object = &corev1.PersistentVolumeClaim{}
			key := types.NamespacedName{Namespace: c.Namespace, Name: "data-" + p.Name}
			if p.Ephemeral {
				holder, key.Name = &corev1.Pod{}, p.Name
			}
			if err := x.Client.Get(ctx, key, holder); err != nil {
				return client.IgnoreNotFound(err)
			}
			if string(holder.GetUID()) != p.PVCUID || holder.GetAnnotations()[observe.MemberIDAnnotation] != "" {
				continue
			}
			patch := client.MergeFrom(holder.DeepCopyObject().(client.Object))
			ann := holder.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[observe.MemberIDAnnotation] = etcd.FormatID(m.ID)
			holder.SetAnnotations(ann)
			if err := x.Client.Patch(ctx, holder, patch); err != nil {
				return fmt.Errorf("failed to stamp %s of member %s: %w", key.Name, m.Name, err)
			}
		}
	}
	return nil
}

// ExecuteMembership carries out one membership step (those of membership, the rollout,
// maintenance, authentication and the peer switch). compacted is the process's memory of
// compactions, which it updates after a Compact or Defragment step.
func (x *Executor) ExecuteMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation, a plan.Step, compacted *observe.Compactions) error {
	if a.Kind == plan.Wait && a.Backup != nil {
		// The wait's own write: the backup it waits for (created once; one that exists is
		// success).
		return x.CreateBackup(ctx, c, a.Backup.Name, a.Backup.Labels)
	}
	if a.Kind == plan.None || a.Kind == plan.Wait {
		return nil
	}
	log.FromContext(ctx).Info("membership step", "step", a.Kind, "member", a.Member, "reason", a.Reason, "message", a.Message)
	var err error
	switch a.Kind {
	case plan.RecordIntent:
		err = x.SetIntent(ctx, c, a.Intent)
	case plan.ClearIntent:
		err = x.SetIntent(ctx, c, nil)
	case plan.ScaleStatefulSet:
		err = x.ScaleStatefulSet(ctx, c, t, a.Replicas, mo.StsReplicas)
	case plan.DeletePVC:
		// The UID precondition: the claim observed in this pass, never one created since.
		uid := observedUID(mo, a.Member, true)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "data-" + a.Member}}
		err = ignoreGone(x.Client.Delete(ctx, pvc, client.Preconditions{UID: &uid}))
	case plan.DeletePod:
		uid := observedUID(mo, a.Member, false)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: a.Member}}
		opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
		if a.Force {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		err = ignoreGone(x.Client.Delete(ctx, pod, opts...))
	case plan.Defragment:
		err = x.defragment(ctx, c, t, mo, a)
	case plan.EnsureRootUser, plan.RemoveUser, plan.EnableAuth, plan.DisableAuth:
		err = x.authExec(ctx, c, t, mo.Etcd, a)
	case plan.AdoptOperatorUser:
		err = x.adoptOperatorUser(ctx, c, t, a.User)
	case plan.ExpandClaim:
		err = x.expandClaim(ctx, c, mo, a.Member, a.Size)
	case plan.RecreateStatefulSet:
		err = x.recreateStatefulSet(ctx, c, t, a.Size)
	case plan.AddLearner:
		// The intent with the time of the add is stored first, so it is never later than the
		// add (a failed store leaves etcd untouched, and the next pass tries again).
		if a.Intent != nil {
			err = x.SetIntent(ctx, c, a.Intent)
		}
		if err == nil {
			err = x.etcdStep(ctx, t, mo, a)
		}
	default:
		err = x.etcdStep(ctx, t, mo, a)
	}
	if err != nil {
		x.Done(c, a.Kind, err)
		// The next pass decides again from what it observes; the event keeps the attempt.
		x.Recorder.Eventf(c, MemberPod(c.Namespace, a.Member), corev1.EventTypeWarning, a.Reason, string(a.Kind), "failed: %s: %v", a.Message, err)
		return fmt.Errorf("failed to %s (%s): %w", a.Kind, a.Reason, err)
	}
	switch a.Kind {
	case plan.Compact:
		compacted.Set(c.UID, a.Revision)
	case plan.Defragment:
		compacted.Defragmented(c.UID, a.ID)
	}
	x.Recorder.Eventf(c, MemberPod(c.Namespace, a.Member), corev1.EventTypeNormal, a.Reason, string(a.Kind), "%s", a.Message)
	if a.Kind == plan.MoveLeader {
		metrics.CountLeaderMove(c)
	}
	x.Done(c, a.Kind, nil)
	return nil
}

// MemberPod is the pod of member name, as the related object of a step's event (nil when the
// step names no member). The event recorder merges events about one object with the same type,
// reason, action and related object into one series that shows the first one's note: without
// it, a rollout's second member restart would show as the first's, counted twice.
func MemberPod(namespace, name string) runtime.Object {
	if name == "" {
		return nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

// observedUID is the UID of the pod (or, with claim, of the data claim) of member as this
// pass observed it.
func observedUID(mo membership.Observation, member string, claim bool) types.UID {
	for _, p := range mo.Pods {
		if p.Name != member {
			continue
		}
		if claim {
			return types.UID(p.PVCUID)
		}
		return types.UID(p.UID)
	}
	return ""
}

// ignoreGone treats an object already deleted, or replaced by a new one since the pass
// observed it (the UID precondition failed), as done: the next pass observes the new one.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// etcdStep carries out the steps that call etcd.
func (x *Executor) etcdStep(ctx context.Context, t render.Topology, mo membership.Observation, a plan.Step) error {
	var endpoints []string
	leaderURL := ""
	for _, m := range mo.Etcd.Cluster.Members {
		// A member being removed applies its own removal and stops: a request sent through it
		// would fail although the removal committed.
		if a.Kind == plan.RemoveMember && m.ID == a.ID {
			continue
		}
		if _, ok := mo.Etcd.Status[m.ID]; ok && len(m.ClientURLs) > 0 {
			endpoints = append(endpoints, m.ClientURLs[0])
			// etcd refuses a member add on a member connected to a quorum for less than 5 s:
			// sent through the member promoted a moment ago, the next add would wait for
			// nothing. The leader has been connected longest.
			if a.Kind == plan.AddLearner && m.ID == mo.Etcd.Leader() {
				leaderURL = m.ClientURLs[0]
			}
		}
	}
	if leaderURL != "" {
		endpoints = []string{leaderURL}
	}
	cl, err := x.Dial(ctx, endpoints, t.TLS)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*x.EtcdTimeout)
	defer cancel()
	switch a.Kind {
	case plan.AddLearner:
		_, err = cl.AddLearner(cctx, []string{a.PeerURL})
	case plan.PromoteLearner:
		err = cl.Promote(cctx, a.ID)
	case plan.RemoveMember:
		err = cl.Remove(cctx, a.ID)
	case plan.MoveLeader:
		leader, ok := "", false
		for _, m := range mo.Etcd.Cluster.Members {
			if m.ID == a.ID && len(m.ClientURLs) > 0 {
				leader, ok = m.ClientURLs[0], true
			}
		}
		if !ok {
			return fmt.Errorf("the leader %s has no client URL", etcd.FormatID(a.ID))
		}
		err = cl.MoveLeader(cctx, leader, a.Target)
	case plan.AdvanceLog:
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		err = cl.AdvanceLog(actx, a.Entries)
	case plan.Defragment, plan.Compact:
		// Both take as long as the database is large; etcd finishes them even when the client
		// gives up, so a generous bound only keeps a pass from hanging.
		mctx, mcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer mcancel()
		if a.Kind == plan.Compact {
			err = cl.Compact(mctx, a.Revision)
			break
		}
		var ep string
		for _, m := range mo.Etcd.Cluster.Members {
			if m.ID == a.ID && len(m.ClientURLs) > 0 {
				ep = m.ClientURLs[0]
			}
		}
		if ep == "" {
			return fmt.Errorf("member %s has no client URL", etcd.FormatID(a.ID))
		}
		err = cl.Defragment(mctx, ep)
	case plan.DisarmAlarm:
		err = cl.DisarmAlarm(cctx, etcd.Alarm{MemberID: a.ID, Type: a.Alarm})
	case plan.UpdatePeerURL:
		err = cl.UpdatePeerURLs(cctx, a.ID, []string{a.PeerURL})
	default:
		return fmt.Errorf("unknown membership step %s", a.Kind)
	}
	return err
}

// SetIntent stores in (or removes the stored intent when nil) on the EtcdCluster, with an
// optimistic lock: when the object changed since this pass read it (another operator replica
// during a leader-election hand-over, or a user's edit) the write fails and the next pass
// decides again from what is stored.
func (x *Executor) SetIntent(ctx context.Context, c *v1alpha1.EtcdCluster, in *plan.Intent) error {
	if in == nil {
		return x.setRecord(ctx, c, observe.IntentAnnotation, nil)
	}
	return x.setRecord(ctx, c, observe.IntentAnnotation, in)
}

// setRecord stores v as JSON in annotation key of the EtcdCluster, or removes it when v is
// nil, with SetIntent's optimistic lock.
func (x *Executor) setRecord(ctx context.Context, c *v1alpha1.EtcdCluster, key string, v any) error {
	// A copy is patched, and only its metadata taken back: the API server answers with the
	// stored object, whose spec is not the pass's effective one (values.Effective).
	w := c.DeepCopy()
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	if v == nil {
		delete(w.Annotations, key)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.Annotations[key] = string(b)
	}
	if err := x.Client.Patch(ctx, w, patch); err != nil {
		return err
	}
	c.ObjectMeta = w.ObjectMeta
	return nil
}

// defragment carries out a Defragment step: it records the defragmentation on the EtcdCluster
// first (the member, the time, and the applied index, raft index and database size the
// member reported in this pass), then calls etcd, and removes the record once the call
// returned successfully. A call that fails or outlives its deadline, or an operator that
// stops during it, leaves the record: the member counts as disrupted until etcd shows it
// done (plan.DefragmentationOver). A record that cannot be stored stops the step before
// etcd is called.
func (x *Executor) defragment(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation, a plan.Step) error {
	rec := plan.Defragmentation{Member: a.Member, ID: a.ID, Since: time.Now().UTC().Truncate(time.Second)}
	if mo.Etcd != nil {
		st := mo.Etcd.Status[a.ID]
		rec.AppliedIndex, rec.RaftIndex, rec.DBSize = st.AppliedIndex, st.RaftIndex, st.DBSize
	}
	if err := x.setRecord(ctx, c, observe.DefragmentationAnnotation, rec); err != nil {
		return fmt.Errorf("failed to record the defragmentation of %s before it starts: %w", a.Member, err)
	}
	if err := x.etcdStep(ctx, t, mo, a); err != nil {
		return err
	}
	if err := x.setRecord(ctx, c, observe.DefragmentationAnnotation, nil); err != nil {
		// The defragmentation finished; the record goes once the next pass sees the member's
		// database shrink or its applied index move.
		log.FromContext(ctx).Info("the defragmentation finished, but its record stays until etcd shows it", "member", a.Member, "error", err.Error())
	}
	return nil
}

// EndDefragmentation removes the record of defragmentation d, which etcd shows over (why is
// its evidence: see observe.Defragmentation). The pass's step was decided and gated as if it
// were gone; it runs only once the record is.
func (x *Executor) EndDefragmentation(ctx context.Context, c *v1alpha1.EtcdCluster, d *plan.Defragmentation, why string) error {
	if err := x.setRecord(ctx, c, observe.DefragmentationAnnotation, nil); err != nil {
		return fmt.Errorf("failed to remove the record of the finished defragmentation of %s: %w", d.Member, err)
	}
	log.FromContext(ctx).Info("a recorded defragmentation is over", "member", d.Member, "since", d.Since, "evidence", why)
	return nil
}

// expandClaim grows the data claim of member to size (never shrinks it), on the claim the pass
// observed.
func (x *Executor) expandClaim(ctx context.Context, c *v1alpha1.EtcdCluster, mo membership.Observation, member, size string) error {
	want, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("failed to parse the size %q: %w", size, err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := x.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + member}, pvc); err != nil {
		return err
	}
	if uid := observedUID(mo, member, true); uid != "" && pvc.UID != uid {
		return nil // another claim than the one observed: the next pass decides again
	}
	if have := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; have.Cmp(want) >= 0 {
		return nil
	}
	patch := client.MergeFromWithOptions(pvc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if pvc.Spec.Resources.Requests == nil {
		pvc.Spec.Resources.Requests = corev1.ResourceList{}
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
	return x.Client.Patch(ctx, pvc, patch)
}

// recreateStatefulSet deletes the StatefulSet, orphaning its pods and claims, when its data
// claim template still asks less than size; the next pass's apply creates it again with the
// new size and the replicas that keep every member pod (the controller's pinReplicas). The UID precondition deletes only the one read here.
func (x *Executor) recreateStatefulSet(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, size string) error {
	want, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("failed to parse the size %q: %w", size, err)
	}
	sts := &appsv1.StatefulSet{}
	if err := x.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: t.StatefulSet}, sts); err != nil {
		return client.IgnoreNotFound(err)
	}
	if sts.DeletionTimestamp != nil {
		return nil
	}
	for _, tmpl := range sts.Spec.VolumeClaimTemplates {
		if have := tmpl.Spec.Resources.Requests[corev1.ResourceStorage]; tmpl.Name == observe.DataClaimTemplate && have.Cmp(want) >= 0 {
			return nil
		}
	}
	uid := sts.UID
	return ignoreGone(x.Client.Delete(ctx, sts, client.PropagationPolicy(metav1.DeletePropagationOrphan), client.Preconditions{UID: &uid}))
}

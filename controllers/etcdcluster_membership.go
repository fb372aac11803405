package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/etcd-pilot/etcd-pilot/internal/plan/peerswitch"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/rollout"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Membership bookkeeping on Kubernetes objects.
const (
	// IntentAnnotation on the EtcdCluster holds the membership change in progress (JSON). It is
	// written before the first irreversible etcd call of a change and removed when it ends.
	IntentAnnotation = "etcdpilot.io/membership-intent"
	// DefragmentationAnnotation on the EtcdCluster records the defragmentation in progress
	// (plan.Defragmentation, JSON): written before the Defragment call, removed when it returns
	// successfully or when etcd shows the member done. It lives beside the membership intent
	// rather than on the membership ConfigMap: the pass reads it with the EtcdCluster it reads
	// anyway (no extra read), it is written with the same optimistic lock (so two operator
	// replicas during a leader-election hand-over cannot both start a defragmentation), and the
	// ConfigMap is the members' own start-up configuration, re-applied from the spec.
	DefragmentationAnnotation = "etcdpilot.io/defragmentation"
	// MemberIDAnnotation on a member's volume claim (or, under emptyDir storage, on its pod)
	// names the etcd member whose data it holds, stamped once the member has run on it.
	MemberIDAnnotation = "etcdpilot.io/member-id"
	// MembershipFieldOwner is the field manager of the StatefulSet's replicas and of the
	// membership ConfigMap.
	MembershipFieldOwner = "etcd-pilot-membership"
	// FaultAfterEnv names a step kind after which the operator exits (tests of crash safety
	// only: the end-to-end suite sets it to kill the operator between two steps). The manager
	// command turns it into EtcdClusterReconciler.AfterStep; the executor never exits itself.
	FaultAfterEnv = "ETCD_PILOT_FAULT_AFTER"

	// learnerMaxLag is how far a started learner may trail the leader and be promoted.
	learnerMaxLag = 1000
	// defaultReplaceAfter mirrors the CRD default of spec.membership.replaceAfter.
	defaultReplaceAfter = 5 * time.Minute
	// requeueMembership is how soon the next step of a membership change is looked at.
	requeueMembership = 500 * time.Millisecond
)

// reconcileMembership observes pods, claims and etcd, keeps the membership ConfigMap and the
// StatefulSet's replicas, and carries out at most one membership step.
func (r *EtcdClusterReconciler) reconcileMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, ps *observe.PeerSwitch) (plan.Step, error) {
	mo, err := r.memberObservation(ctx, c, t, o)
	if err != nil {
		return plan.Step{}, err
	}
	a := membership.Decide(mo)
	// Once membership matches the spec (or only waits for an unhealthy member, which may be
	// one restarting or failing on a new template), the pod template may roll out.
	if o.StatefulSet != nil && (a.Kind == plan.None || a.Reason == v1alpha1.ReasonMemberUnhealthy) {
		step, target := versionTargets(c)
		ro := rollout.Observation{
			UpdateRevision: o.StatefulSet.Status.UpdateRevision,
			StsCaughtUp:    status.StsCaughtUp(*o),
			Pods:           rollout.PodsOf(mo.Pods), Etcd: mo.Etcd, Now: mo.Now,
			MemberTimeout: rollout.DefaultMemberTimeout, MaxLag: learnerMaxLag,
			StepVersion: step, TargetVersion: target,
			LegacyLogIndex: c.Status.LegacyLogIndex, SnapshotCount: snapshotCount(c),
			Missing: missingOf(mo.Pods),
		}
		if d := c.Spec.Upgrade.MemberTimeout; d != nil {
			ro.MemberTimeout = d.Duration
		}
		if ra := rollout.Decide(ro); ra.Kind != plan.None {
			running := ""
			if mo.Etcd != nil {
				_, _, _, running = status.MemberStatuses(*mo.Etcd)
			}
			if ra, err = r.beforeUpgrade(ctx, c, o, ra, step, running); err != nil {
				return ra, err
			}
			a = ra
		}
		o.Upgrade, o.UpgradeKnown = rollout.Progress(ro, a), true
	}
	defrag, defragWait, err := r.defragmentation(ctx, c, mo.Etcd)
	if err != nil {
		return a, err
	}
	a = r.maintenanceStep(ctx, c, t, mo.Etcd, a, mo.Now, defrag, defragWait)
	if a, err = r.authStep(ctx, c, t, mo.Etcd, a); err != nil {
		return a, err
	}
	a = peerswitch.Step(a, o.PeerSwitch, t.PeerPort, t.PeerTransitionPort)
	if err := r.ensureMembershipConfig(ctx, c, t, mo); err != nil {
		return a, err
	}
	if err := r.stampClaims(ctx, c, mo); err != nil {
		return a, err
	}
	ev := mo.Evidence()
	ev.Defragmentation = defrag
	if a.Kind == plan.UpdatePeerURL && mo.Etcd != nil {
		// The gate's evidence that the member serves its new URL: ask it there, now.
		ev.PeerURLAnswers = map[string]string{a.PeerURL: observe.AskPeer(ctx, r.Client, r.apiReader(), r.EtcdTimeout, c, a.PeerURL, mo.Etcd.Cluster.ClusterID, ps.Secret(c))}
	}
	a = plan.Gate(a, ev)
	return a, r.act(ctx, c, t, mo, a)
}

// memberObservation gathers one pass's view for the membership planner.
func (r *EtcdClusterReconciler) memberObservation(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation) (membership.Observation, error) {
	mo := membership.Observation{
		Desired: render.SpecReplicas(c), StatefulSet: t.StatefulSet, Etcd: o.Etcd, Reached: o.Reached,
		// Formed: etcd reported a cluster ID before, or members answer with a leader now (a lone
		// founder of etcd 3.5 lists its founding peers before any quorum exists).
		Bootstrapped: c.Status.ClusterID != "" || (o.Etcd != nil && o.Etcd.Leader() != 0),
		FormedBefore: c.Status.ClusterID != "",
		PeerURL:      t.PeerURL, LearnerMaxLag: learnerMaxLag, LostMemberTimeout: defaultReplaceAfter,
		DeletePVCOnScaleIn: c.Spec.Storage.Retention.WhenScaledIn != v1alpha1.RetentionRetain,
		Now:                time.Now(),
	}
	if d := c.Spec.Membership.ReplaceAfter; d != nil {
		mo.LostMemberTimeout = d.Duration
	}
	if o.StatefulSet != nil && o.StatefulSet.Spec.Replicas != nil {
		mo.StsReplicas = *o.StatefulSet.Spec.Replicas
	}
	if o.StatefulSet != nil {
		mo.UpdateRevision = o.StatefulSet.Status.UpdateRevision
	}
	if raw := c.Annotations[IntentAnnotation]; raw != "" {
		in := &plan.Intent{}
		if err := json.Unmarshal([]byte(raw), in); err != nil {
			// An unreadable intent must not be mistaken for none: the engine abandons it
			// (InvalidIntent) and starts over from etcd's member list.
			in = &plan.Intent{Op: "unreadable", Reason: err.Error()}
		}
		mo.Intent = in
	}
	founders, err := r.founders(ctx, c, t)
	if err != nil {
		return mo, err
	}
	mo.FoundingList, mo.Founders = founders, int32(len(founders))
	if o.Etcd != nil {
		for _, st := range o.Etcd.Status {
			if st.ClusterID != 0 && st.ClusterID != o.Etcd.Cluster.ClusterID {
				mo.SplitBrain = true
			}
		}
	}
	pods := o.Pods
	if pods == nil {
		pods = &corev1.PodList{}
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
		return mo, fmt.Errorf("failed to list member volume claims: %w", err)
	}
	byOrdinal := map[int32]*plan.Pod{}
	info := func(k int32) *plan.Pod {
		if p, ok := byOrdinal[k]; ok {
			return p
		}
		p := &plan.Pod{Name: fmt.Sprintf("%s-%d", t.StatefulSet, k), Ordinal: k, NodeReady: true}
		byOrdinal[k] = p
		return p
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		k, ok := plan.Ordinal(t.StatefulSet, pod.Name)
		if !ok {
			continue
		}
		p := info(k)
		plan.PodState(p, pod)
		// The pod's node is read only when the pod is not Ready, from the API server: the node
		// lifecycle controller marks a lost node's pods not Ready when it marks the node, and
		// a cluster-wide Node informer would hold every node of the cluster in memory.
		if pod.Spec.NodeName != "" && !podConditionTrue(pod, corev1.PodReady) {
			node := &corev1.Node{}
			if err := r.apiReader().Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err == nil {
				for _, cond := range node.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
						p.NodeReady, p.NodeNotReadySince = false, cond.LastTransitionTime.Time
					}
				}
			} else if apierrors.IsNotFound(err) {
				p.NodeReady, p.NodeNotReadySince = false, pod.CreationTimestamp.Time
			}
		}
	}
	memberIDs := map[string]uint64{}
	if o.Etcd != nil {
		for _, m := range o.Etcd.Cluster.Members {
			if m.Name != "" && len(m.ClientURLs) > 0 {
				memberIDs[m.Name] = m.ID
			}
		}
	}
	claimList := map[string]*corev1.PersistentVolumeClaim{}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		podName, ok := strings.CutPrefix(pvc.Name, "data-")
		if !ok {
			continue
		}
		k, ok := plan.Ordinal(t.StatefulSet, podName)
		if !ok {
			continue
		}
		p := info(k)
		p.PVCExists, p.PVCUID, p.PVCDeleting = true, string(pvc.UID), pvc.DeletionTimestamp != nil
		claimList[podName] = pvc
	}
	ephemeral := c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral
	// A missing claim of a started member means its data is gone; the cache may only lag
	// behind (the StatefulSet creates a claim just before its pod), so that is read from the
	// API server before anything concludes from it.
	if !ephemeral && o.Etcd != nil {
		for _, m := range o.Etcd.Cluster.Members {
			k, ok := plan.Ordinal(t.StatefulSet, m.Name)
			if !ok || claimList[m.Name] != nil {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + m.Name}, pvc)
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return mo, fmt.Errorf("failed to get volume claim data-%s: %w", m.Name, err)
			}
			p := info(k)
			p.PVCExists, p.PVCUID, p.PVCDeleting = true, string(pvc.UID), pvc.DeletionTimestamp != nil
			claimList[m.Name] = pvc
		}
	}
	// The data holder of an ordinal is its claim, or under emptyDir storage its pod (the data
	// lives and dies with it). Each is stamped with the member ID once that member ran on it.
	stamps := map[string]string{}
	anyStamped := false
	if ephemeral {
		claimList = nil
		for i := range pods.Items {
			pod := &pods.Items[i]
			k, ok := plan.Ordinal(t.StatefulSet, pod.Name)
			if !ok {
				continue
			}
			p := byOrdinal[k]
			p.Ephemeral = true
			p.PVCExists, p.PVCDeleting, p.PVCUID = true, pod.DeletionTimestamp != nil, string(pod.UID)
			stamps[pod.Name] = pod.Annotations[MemberIDAnnotation]
		}
	} else {
		for podName, pvc := range claimList {
			stamps[podName] = pvc.Annotations[MemberIDAnnotation]
		}
	}
	for _, st := range stamps {
		anyStamped = anyStamped || st != ""
	}
	for podName, stamp := range stamps {
		id, ok := memberIDs[podName]
		k, _ := plan.Ordinal(t.StatefulSet, podName)
		if p := byOrdinal[k]; ok {
			p.PVCFresh = freshData(stamp, id, anyStamped, p.Running, p.RestartCount, ephemeral)
		}
	}
	// Started members whose pod does not exist: since when this process has seen them so.
	for name, since := range r.missingPods(c, o.Etcd, byOrdinal, t.StatefulSet, mo.Now) {
		if k, ok := plan.Ordinal(t.StatefulSet, name); ok {
			info(k).MissingSince = since
		}
	}
	for _, p := range byOrdinal {
		mo.Pods = append(mo.Pods, *p)
	}
	sort.Slice(mo.Pods, func(i, j int) bool { return mo.Pods[i].Ordinal < mo.Pods[j].Ordinal })
	return mo, nil
}

// FoundersAnnotation on the membership ConfigMap records the founding member list
// ("name=peerURL,..."), written once when the ConfigMap is first created and never changed:
// the first formation runs exactly these members.
const FoundersAnnotation = "etcdpilot.io/founders"

// foundingList is the founding member list for n members.
func foundingList(t render.Topology, n int32) []string {
	out := make([]string, 0, n)
	for k := int32(0); k < n; k++ {
		name := fmt.Sprintf("%s-%d", t.StatefulSet, k)
		out = append(out, name+"="+t.PeerURL(name))
	}
	return out
}

// founders reads the founding list recorded on the membership ConfigMap; without one, it is
// the list spec.replicas gives now (the first render's, recorded by ensureMembershipConfig).
func (r *EtcdClusterReconciler) founders(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) ([]string, error) {
	return r.foundersFrom(ctx, r.Client, c, t)
}

// foundersFrom is founders read through reader (the API server, where a restore must not act
// on a list the cache has not caught up with).
func (r *EtcdClusterReconciler) foundersFrom(ctx context.Context, reader client.Reader, c *v1alpha1.EtcdCluster, t render.Topology) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("failed to get the membership ConfigMap of %s/%s: %w", c.Namespace, c.Name, err)
	}
	if rec := cm.Annotations[FoundersAnnotation]; rec != "" {
		return strings.Split(rec, ","), nil
	}
	return foundingList(t, render.SpecReplicas(c)), nil
}

// ensureFoundingConfig creates the membership ConfigMap with the founding list before anything
// else of a cluster that never formed, so the first pods (the StatefulSet starts with one
// replica) never start before it exists.
func (r *EtcdClusterReconciler) ensureFoundingConfig(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) error {
	if c.Status.ClusterID != "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	if err == nil || !apierrors.IsNotFound(err) {
		return client.IgnoreNotFound(err)
	}
	list := foundingList(t, render.SpecReplicas(c))
	return r.applyMembershipConfig(ctx, c, list, map[string]string{"ETCD_INITIAL_CLUSTER": strings.Join(list, ","), "ETCD_INITIAL_CLUSTER_STATE": "new"}, "")
}

// MembersAnnotation on the membership ConfigMap records the last etcd member list the operator
// read (plan.MemberRecord, JSON): etcd serves its member list only through a quorum, so this
// is who voted when a quorum last answered. Disaster recovery counts voters from it. It is
// written whenever a pass reads a list that differs from it, before that pass's step runs.
const MembersAnnotation = "etcdpilot.io/members"

// ensureMembershipConfig applies the membership ConfigMap when its data or the member record
// differs, keeping the founding list recorded. The member record is etcd's member list of
// this pass when it was read, else the one recorded.
func (r *EtcdClusterReconciler) ensureMembershipConfig(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation) error {
	data := membership.InitialCluster(mo)
	name := values.MembershipConfigMapName(c.Name)
	cur := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to get ConfigMap %s/%s: %w", c.Namespace, name, err)
	}
	record := cur.Annotations[MembersAnnotation]
	computed := false
	if mo.Etcd != nil && mo.Etcd.Cluster.ClusterID != 0 && len(mo.Etcd.Cluster.Members) > 0 && !mo.SplitBrain {
		computed = true
		limit := max(mo.StsReplicas, mo.Desired, mo.Founders)
		now := plan.RecordOf(*mo.Etcd, t.StatefulSet, t.PeerURL, limit, mo.Now)
		if old, ok := parseMemberRecord(record); !ok || !old.SameMembers(now) {
			b, err := json.Marshal(now)
			if err != nil {
				return fmt.Errorf("failed to encode the member record: %w", err)
			}
			record = string(b)
		}
	}
	if err == nil && mapsEqual(cur.Data, data) && cur.Annotations[FoundersAnnotation] != "" && cur.Annotations[MembersAnnotation] == record {
		return nil
	}
	if !computed {
		// The record is carried over as it is stored: the cache may show an older one, or not
		// show the ConfigMap yet (an apply without it would drop it).
		fresh := &corev1.ConfigMap{}
		err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, fresh)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to get ConfigMap %s/%s: %w", c.Namespace, name, err)
		}
		record = fresh.Annotations[MembersAnnotation]
	}
	return r.applyMembershipConfig(ctx, c, mo.FoundingList, data, record)
}

// parseMemberRecord reads a MembersAnnotation value; ok is false when there is none or it
// cannot be read (then no record is known).
func parseMemberRecord(raw string) (plan.MemberRecord, bool) {
	var rec plan.MemberRecord
	if raw == "" || json.Unmarshal([]byte(raw), &rec) != nil {
		return plan.MemberRecord{}, false
	}
	return rec, true
}

// memberRecord reads the recorded member list from the API server (nil when none is
// recorded, or it cannot be read: then who votes is not known).
func (r *EtcdClusterReconciler) memberRecord(ctx context.Context, c *v1alpha1.EtcdCluster) (*plan.MemberRecord, error) {
	cm := &corev1.ConfigMap{}
	err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get the membership ConfigMap of %s/%s: %w", c.Namespace, c.Name, err)
	}
	rec, ok := parseMemberRecord(cm.Annotations[MembersAnnotation])
	if !ok {
		return nil, nil
	}
	return &rec, nil
}

// applyMembershipConfig applies the membership ConfigMap with data, the founding list and the
// member record ("" drops it: the ConfigMap's field owner no longer sets it).
func (r *EtcdClusterReconciler) applyMembershipConfig(ctx context.Context, c *v1alpha1.EtcdCluster, founders []string, data map[string]string, record string) error {
	name := values.MembershipConfigMapName(c.Name)
	cm := &unstructuredv1.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": c.Namespace,
			"labels": map[string]any{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue},
			"annotations": map[string]any{
				"etcdpilot.io/purpose": "initial cluster for members that start without data; written by the operator, read by etcd at start",
				FoundersAnnotation:     strings.Join(founders, ","),
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "EtcdCluster", "name": c.Name, "uid": string(c.UID),
				"controller": true, "blockOwnerDeletion": true,
			}},
		},
		"data": toAnyMap(data),
	}}
	if record != "" {
		cm.Object["metadata"].(map[string]any)["annotations"].(map[string]any)[MembersAnnotation] = record
	}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(cm), client.FieldOwner(MembershipFieldOwner), client.ForceOwnership); err != nil {
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

// scaleStatefulSet sets the StatefulSet's replicas under the membership field owner, when
// they differ.
func (r *EtcdClusterReconciler) scaleStatefulSet(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, want, have int32) error {
	if want == have {
		return nil
	}
	sts := &unstructuredv1.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": t.StatefulSet, "namespace": c.Namespace},
		"spec":     map[string]any{"replicas": int64(want)},
	}}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(sts), client.FieldOwner(MembershipFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to scale StatefulSet %s/%s to %d: %w", c.Namespace, t.StatefulSet, want, err)
	}
	return nil
}

// freshData reports whether the data holder (claim, or pod under emptyDir storage) of a
// started member with ID id is not known to hold that member's data. A holder stamped with
// another ID never does. An unstamped one, once other holders are stamped (so the operator had
// the chance to stamp this one), does not when its member does not run on it: an emptyDir pod
// created after the member started is always empty; a claim counts once its pod restarted
// on it. A container that restarts in the same pod keeps its emptyDir and its stamp.
func freshData(stamp string, id uint64, anyStamped, running bool, restarts int32, ephemeral bool) bool {
	switch {
	case stamp != "":
		return stamp != etcd.FormatID(id)
	case !anyStamped || running:
		return false
	case ephemeral:
		return true
	}
	return restarts > 0
}

// stampClaims records on each started, healthy member's data holder (its claim, or its pod
// under emptyDir storage) which member's data it holds. Only a member that runs is stamped,
// and a member without data can run only as a founder or as the learner being added (see
// membershipEnv), so a stamp never marks an empty volume as a voter's data.
func (r *EtcdClusterReconciler) stampClaims(ctx context.Context, c *v1alpha1.EtcdCluster, mo membership.Observation) error {
	if mo.Etcd == nil {
		return nil
	}
	for _, m := range mo.Etcd.Cluster.Members {
		st, ok := mo.Etcd.Status[m.ID]
		if m.Name == "" || !ok || len(st.Errors) > 0 {
			continue
		}
		for _, p := range mo.Pods {
			if p.Name != m.Name || !p.PVCExists || !p.Running || p.PVCDeleting {
				continue
			}
			var holder client.Object = &corev1.PersistentVolumeClaim{}
			key := types.NamespacedName{Namespace: c.Namespace, Name: "data-" + p.Name}
			if p.Ephemeral {
				holder, key.Name = &corev1.Pod{}, p.Name
			}
			if err := r.Client.Get(ctx, key, holder); err != nil {
				return client.IgnoreNotFound(err)
			}
			if string(holder.GetUID()) != p.PVCUID || holder.GetAnnotations()[MemberIDAnnotation] != "" {
				continue
			}
			patch := client.MergeFrom(holder.DeepCopyObject().(client.Object))
			ann := holder.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[MemberIDAnnotation] = etcd.FormatID(m.ID)
			holder.SetAnnotations(ann)
			if err := r.Client.Patch(ctx, holder, patch); err != nil {
				return fmt.Errorf("failed to stamp %s of member %s: %w", key.Name, m.Name, err)
			}
		}
	}
	return nil
}

// act carries out one membership step.
func (r *EtcdClusterReconciler) act(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation, a plan.Step) error {
	if a.Kind == plan.None || a.Kind == plan.Wait {
		return nil
	}
	log.FromContext(ctx).Info("membership step", "step", a.Kind, "member", a.Member, "reason", a.Reason, "message", a.Message)
	var err error
	switch a.Kind {
	case plan.RecordIntent:
		err = r.setIntent(ctx, c, a.Intent)
	case plan.ClearIntent:
		err = r.setIntent(ctx, c, nil)
	case plan.ScaleStatefulSet:
		err = r.scaleStatefulSet(ctx, c, t, a.Replicas, mo.StsReplicas)
	case plan.DeletePVC:
		// The UID precondition: the claim observed in this pass, never one created since.
		uid := observedUID(mo, a.Member, true)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "data-" + a.Member}}
		err = ignoreGone(r.Client.Delete(ctx, pvc, client.Preconditions{UID: &uid}))
	case plan.DeletePod:
		uid := observedUID(mo, a.Member, false)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: a.Member}}
		opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
		if a.Force {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		err = ignoreGone(r.Client.Delete(ctx, pod, opts...))
	case plan.Defragment:
		err = r.defragment(ctx, c, t, mo, a)
	case plan.EnsureRootUser, plan.EnableAuth, plan.DisableAuth:
		err = r.authExec(ctx, c, t, mo.Etcd, a)
	case plan.AddLearner:
		// The intent with the time of the add is stored first, so it is never later than the
		// add (a failed store leaves etcd untouched, and the next pass tries again).
		if a.Intent != nil {
			err = r.setIntent(ctx, c, a.Intent)
		}
		if err == nil {
			err = r.etcdStep(ctx, t, mo, a)
		}
	default:
		err = r.etcdStep(ctx, t, mo, a)
	}
	metrics.CountStep(c, a.Kind, err)
	if err != nil {
		// The next pass decides again from what it observes; the event keeps the attempt.
		r.Recorder.Eventf(c, memberPod(c.Namespace, a.Member), corev1.EventTypeWarning, a.Reason, string(a.Kind), "failed: %s: %v", a.Message, err)
		return fmt.Errorf("failed to %s (%s): %w", a.Kind, a.Reason, err)
	}
	switch a.Kind {
	case plan.Compact:
		r.compacted.set(c.UID, a.Revision)
	case plan.Defragment:
		r.compacted.defragmented(c.UID, a.ID)
	}
	r.Recorder.Eventf(c, memberPod(c.Namespace, a.Member), corev1.EventTypeNormal, a.Reason, string(a.Kind), "%s", a.Message)
	if a.Kind == plan.MoveLeader {
		metrics.CountLeaderMove(c)
	}
	if r.AfterStep != nil {
		r.AfterStep(string(a.Kind))
	}
	return nil
}

// memberPod is the pod of member name, as the related object of a step's event (nil when the
// step names no member). The event recorder merges events about one object with the same type,
// reason, action and related object into one series that shows the first one's note: without
// it, a rollout's second member restart would show as the first's, counted twice.
func memberPod(namespace, name string) runtime.Object {
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
func (r *EtcdClusterReconciler) etcdStep(ctx context.Context, t render.Topology, mo membership.Observation, a plan.Step) error {
	var endpoints []string
	for _, m := range mo.Etcd.Cluster.Members {
		// A member being removed applies its own removal and stops: a request sent through it
		// would fail although the removal committed.
		if a.Kind == plan.RemoveMember && m.ID == a.ID {
			continue
		}
		if _, ok := mo.Etcd.Status[m.ID]; ok && len(m.ClientURLs) > 0 {
			endpoints = append(endpoints, m.ClientURLs[0])
		}
	}
	cl, err := r.DialEtcd(ctx, endpoints, t.TLS)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*r.EtcdTimeout)
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

// setIntent stores in (or removes the stored intent when nil) on the EtcdCluster, with an
// optimistic lock: when the object changed since this pass read it (another operator replica
// during a leader-election hand-over, or a user's edit) the write fails and the next pass
// decides again from what is stored.
func (r *EtcdClusterReconciler) setIntent(ctx context.Context, c *v1alpha1.EtcdCluster, in *plan.Intent) error {
	if in == nil {
		return r.setRecord(ctx, c, IntentAnnotation, nil)
	}
	return r.setRecord(ctx, c, IntentAnnotation, in)
}

// setRecord stores v as JSON in annotation key of the EtcdCluster, or removes it when v is
// nil, with setIntent's optimistic lock.
func (r *EtcdClusterReconciler) setRecord(ctx context.Context, c *v1alpha1.EtcdCluster, key string, v any) error {
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if v == nil {
		delete(c.Annotations, key)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		c.Annotations[key] = string(b)
	}
	return r.Client.Patch(ctx, c, patch)
}

// defragment carries out a Defragment step: it records the defragmentation on the EtcdCluster
// first (the member, the time, and the applied index, raft index and database size the
// member reported in this pass), then calls etcd, and removes the record once the call
// returned successfully. A call that fails or outlives its deadline, or an operator that
// stops during it, leaves the record: the member counts as disrupted until etcd shows it
// done (plan.DefragmentationOver). A record that cannot be stored stops the step before
// etcd is called.
func (r *EtcdClusterReconciler) defragment(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, mo membership.Observation, a plan.Step) error {
	rec := plan.Defragmentation{Member: a.Member, ID: a.ID, Since: time.Now().UTC().Truncate(time.Second)}
	if mo.Etcd != nil {
		st := mo.Etcd.Status[a.ID]
		rec.AppliedIndex, rec.RaftIndex, rec.DBSize = st.AppliedIndex, st.RaftIndex, st.DBSize
	}
	if err := r.setRecord(ctx, c, DefragmentationAnnotation, rec); err != nil {
		return fmt.Errorf("failed to record the defragmentation of %s before it starts: %w", a.Member, err)
	}
	if err := r.etcdStep(ctx, t, mo, a); err != nil {
		return err
	}
	if err := r.setRecord(ctx, c, DefragmentationAnnotation, nil); err != nil {
		// The defragmentation finished; the record goes once the next pass sees the member's
		// database shrink or its applied index move.
		log.FromContext(ctx).Info("the defragmentation finished, but its record stays until etcd shows it", "member", a.Member, "error", err.Error())
	}
	return nil
}

// defragmentation reads the defragmentation record of c. A readable record that etcd, read in
// this pass (e), shows over is removed here, before any planner decides; one that stands is
// returned with what it waits for. An unreadable one is returned as it is (the gate refuses
// disruptions while it stands), never taken for none.
func (r *EtcdClusterReconciler) defragmentation(ctx context.Context, c *v1alpha1.EtcdCluster, e *etcd.Observed) (*plan.Defragmentation, string, error) {
	raw, ok := c.Annotations[DefragmentationAnnotation]
	if !ok {
		return nil, "", nil
	}
	d := plan.ParseDefragmentation(raw)
	over, why := plan.DefragmentationOver(*d, e)
	if !over {
		return d, why, nil
	}
	if err := r.setRecord(ctx, c, DefragmentationAnnotation, nil); err != nil {
		return nil, "", fmt.Errorf("failed to remove the record of the finished defragmentation of %s: %w", d.Member, err)
	}
	log.FromContext(ctx).Info("a recorded defragmentation is over", "member", d.Member, "since", d.Since, "evidence", why)
	return nil, "", nil
}

// missingPods returns, for every started member of etcd's list whose pod does not exist, since
// when this operator process has seen it missing. The memory is the process's own: after a
// restart a missing pod's wait starts over, which only delays the report.
func (r *EtcdClusterReconciler) missingPods(c *v1alpha1.EtcdCluster, e *etcd.Observed, pods map[int32]*plan.Pod, sts string, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	r.missingMu.Lock()
	defer r.missingMu.Unlock()
	if r.missingSince == nil {
		r.missingSince = map[string]time.Time{}
	}
	prefix := c.Namespace + "/" + c.Name + "/"
	seen := map[string]bool{}
	if e != nil {
		for _, m := range e.Cluster.Members {
			k, ok := plan.Ordinal(sts, m.Name)
			if !ok || (pods[k] != nil && pods[k].Exists) {
				continue
			}
			key := prefix + m.Name
			t, ok := r.missingSince[key]
			if !ok {
				t = now
				r.missingSince[key] = t
			}
			out[m.Name], seen[key] = t, true
		}
	}
	for k := range r.missingSince {
		if strings.HasPrefix(k, prefix) && !seen[k] {
			delete(r.missingSince, k)
		}
	}
	return out
}

// missingOf maps the member pods that do not exist to since when they have been missing.
func missingOf(pods []plan.Pod) map[string]time.Time {
	out := map[string]time.Time{}
	for _, p := range pods {
		if !p.Exists && !p.MissingSince.IsZero() {
			out[p.Name] = p.MissingSince
		}
	}
	return out
}

// podConditionTrue reports whether pod's condition typ is True.
func podConditionTrue(pod *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Membership bookkeeping on Kubernetes objects: the operator's memory, read here and written
// only by the executor.
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
)

// Membership gathers one pass's view for the membership planner. It reads the claims and the
// founding list through kc (the cache), and the nodes of pods that are not Ready and the claims
// the cache does not show through api (the API server); missing is the process's memory of
// since when member pods have been missing.
func Membership(ctx context.Context, kc, api client.Reader, c *v1alpha1.EtcdCluster, t render.Topology, o *Observation, missing *MissingPods) (membership.Observation, error) {
	mo := membership.Observation{
		Desired: render.SpecReplicas(c), StatefulSet: t.StatefulSet, Etcd: o.Etcd, Reached: o.Reached,
		// Formed: etcd reported a cluster ID before, or members answer with a leader now (a lone
		// founder of etcd 3.5 lists its founding peers before any quorum exists).
		Bootstrapped: o.Memory.Formed() || (o.Etcd != nil && o.Etcd.Leader() != 0),
		FormedBefore: o.Memory.Formed(),
		PeerURL:      t.PeerURL, LearnerMaxLag: membership.LearnerMaxLag, LostMemberTimeout: membership.DefaultReplaceAfter,
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
	founders, err := Founders(ctx, kc, c, t)
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
	if err := kc.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
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
			if err := api.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err == nil {
				for _, cond := range node.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
						p.NodeReady, p.NodeNotReadySince = false, cond.LastTransitionTime.Time
					}
				}
			} else if apierrors.IsNotFound(err) {
				p.NodeReady, p.NodeNotReadySince = false, pod.CreationTimestamp.Time
			}
			// No kubelet reports for a pod on a node that is not ready: its container
			// statuses are the last its kubelet wrote (the node lifecycle controller turns
			// only the pod's Ready condition false). A ready container there is no evidence
			// that etcd serves.
			if !p.NodeReady {
				p.Ready = false
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
			err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + m.Name}, pvc)
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
	o.Claims = claimList
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
			p.DataStamp = stamps[pod.Name]
		}
	} else {
		for podName, pvc := range claimList {
			stamps[podName] = pvc.Annotations[MemberIDAnnotation]
			if k, ok := plan.Ordinal(t.StatefulSet, podName); ok {
				byOrdinal[k].DataStamp = stamps[podName]
			}
		}
	}
	for _, st := range stamps {
		anyStamped = anyStamped || st != ""
	}
	for podName, stamp := range stamps {
		id, ok := memberIDs[podName]
		k, _ := plan.Ordinal(t.StatefulSet, podName)
		if p := byOrdinal[k]; ok {
			p.PVCFresh = membership.FreshData(stamp, id, anyStamped, p.Running, p.RestartCount, ephemeral)
		}
	}
	// Started members whose pod does not exist: since when this process has seen them so.
	for name, since := range missing.Pods(c, o.Etcd, byOrdinal, t.StatefulSet, mo.Now) {
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

// FoundingList is the founding member list for n members.
func FoundingList(t render.Topology, n int32) []string {
	out := make([]string, 0, n)
	for k := int32(0); k < n; k++ {
		name := fmt.Sprintf("%s-%d", t.StatefulSet, k)
		out = append(out, name+"="+t.PeerURL(name))
	}
	return out
}

// Founders reads the founding list recorded on the membership ConfigMap through reader; without
// one, it is the list spec.replicas gives now (the first render's, recorded by the executor's
// EnsureMembershipConfig). A pass reads it through the cache; a restore through the API server,
// where it must not act on a list the cache has not caught up with.
func Founders(ctx context.Context, reader client.Reader, c *v1alpha1.EtcdCluster, t render.Topology) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("failed to get the membership ConfigMap of %s/%s: %w", c.Namespace, c.Name, err)
	}
	if rec := cm.Annotations[FoundersAnnotation]; rec != "" {
		return strings.Split(rec, ","), nil
	}
	return FoundingList(t, render.SpecReplicas(c)), nil
}

// MembersAnnotation on the membership ConfigMap records the last etcd member list the operator
// read (plan.MemberRecord, JSON): etcd serves its member list only through a quorum, so this
// is who voted when a quorum last answered. Disaster recovery counts voters from it. It is
// written whenever a pass reads a list that differs from it, before that pass's step runs.
const MembersAnnotation = "etcdpilot.io/members"

// ParseMemberRecord reads a MembersAnnotation value; ok is false when there is none or it
// cannot be read (then no record is known).
func ParseMemberRecord(raw string) (plan.MemberRecord, bool) {
	var rec plan.MemberRecord
	if raw == "" || json.Unmarshal([]byte(raw), &rec) != nil {
		return plan.MemberRecord{}, false
	}
	return rec, true
}

// MemberRecord reads the recorded member list from the API server (api) (nil when none is
// recorded, or it cannot be read: then who votes is not known).
func MemberRecord(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster) (*plan.MemberRecord, error) {
	cm := &corev1.ConfigMap{}
	err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: values.MembershipConfigMapName(c.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("failed to get the membership ConfigMap of %s/%s: %w", c.Namespace, c.Name, err)
	}
	rec, ok := ParseMemberRecord(cm.Annotations[MembersAnnotation])
	if !ok {
		return nil, nil
	}
	return &rec, nil
}

// Defragmentation reads the defragmentation record of c (nil when there is none). A readable
// record that etcd, read in this pass (e), shows over is returned with over set and why as the
// evidence: the planners and the gate decide as if there were none, and the executor removes
// it (EndDefragmentation) after the gate, before the pass's step. One that
// stands is returned with what it waits for (why). An unreadable one is returned as it is (the
// gate refuses disruptions while it stands), never taken for none.
func Defragmentation(c *v1alpha1.EtcdCluster, e *etcd.Observed) (d *plan.Defragmentation, why string, over bool) {
	raw, ok := c.Annotations[DefragmentationAnnotation]
	if !ok {
		return nil, "", false
	}
	d = plan.ParseDefragmentation(raw)
	over, why = plan.DefragmentationOver(*d, e)
	return d, why, over
}

// MissingPods remembers since when member pods have been missing (see Pods). The reconciler
// keeps one for the life of the process; the zero value is ready to use.
type MissingPods struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// Pods returns, for every started member of etcd's list whose pod does not exist, since
// when this operator process has seen it missing. The memory is the process's own: after a
// restart a missing pod's wait starts over, which only delays the report.
func (mp *MissingPods) Pods(c *v1alpha1.EtcdCluster, e *etcd.Observed, pods map[int32]*plan.Pod, sts string, now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	mp.mu.Lock()
	defer mp.mu.Unlock()
	if mp.since == nil {
		mp.since = map[string]time.Time{}
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
			t, ok := mp.since[key]
			if !ok {
				t = now
				mp.since[key] = t
			}
			out[m.Name], seen[key] = t, true
		}
	}
	for k := range mp.since {
		if strings.HasPrefix(k, prefix) && !seen[k] {
			delete(mp.since, k)
		}
	}
	return out
}

// MissingOf maps the member pods that do not exist to since when they have been missing.
func MissingOf(pods []plan.Pod) map[string]time.Time {
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

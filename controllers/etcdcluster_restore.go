package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/metrics"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

const (
	// restoreMaxAttempts is how many failed restore pods end a restore.
	restoreMaxAttempts = 3
	// restoreVolumeRoot is where a restore pod mounts the member's claim: where the chart
	// mounts it for etcd.
	restoreVolumeRoot = "/var/lib/etcd"
)

// lostQuorum remembers since when this process has seen each cluster without quorum.
type lostQuorum struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

func (l *lostQuorum) observe(uid types.UID, lost bool, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since == nil {
		l.since = map[types.UID]time.Time{}
	}
	if !lost {
		delete(l.since, uid)
		return time.Time{}
	}
	if t, ok := l.since[uid]; ok {
		return t
	}
	l.since[uid] = now
	return now
}

// lostSince is since when quorum has been seen lost (and hopeless), zero when it is not.
func (l *lostQuorum) lostSince(uid types.UID) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since[uid]
}

// snapshotSource is a resolved snapshot: where the restore pods read it, and how.
type snapshotSource struct {
	restore.Source
	s3    *v1alpha1.S3Destination // with the full object key in key
	key   string
	claim string // claim name, with key the file's path on it
}

// holdStatefulSet reports whether the StatefulSet is kept back this pass: a bootstrap restore
// has not finished, and founders must never start on empty volumes.
func holdStatefulSet(c *v1alpha1.EtcdCluster) bool {
	return restore.HoldStatefulSet(c.Spec.Bootstrap != nil, c.Status.ClusterID != "", c.Status.Restore)
}

// reconcileRestore observes, asks the restore planner, passes the gate and carries out one
// restore step. It returns a step of kind None when no restore is wanted or under way.
func (r *EtcdClusterReconciler) reconcileRestore(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, desired []*unstructured) (plan.Step, error) {
	ro, srcs, ev, err := r.restoreObservation(ctx, c, t, o)
	if err != nil {
		return plan.Step{}, err
	}
	a := restore.Decide(ro)
	if a.Kind == plan.None {
		return a.Step, nil
	}
	ev.Etcd, ev.Answers, ev.StatefulSet, ev.StsReplicas, ev.Desired = o.Etcd, o.Answers, t.StatefulSet, ro.StsReplicas, render.SpecReplicas(c)
	ev.Formed = c.Status.ClusterID != "" || (o.Etcd != nil && o.Etcd.Leader() != 0)
	ev.PeerURL, ev.MaxLag = t.PeerURL, learnerMaxLag
	gated := plan.Gate(a.Step, ev)
	if gated.Kind != a.Kind {
		return gated, nil
	}
	return a.Step, r.actRestore(ctx, c, t, ro, a, srcs, desired)
}

// restoreSources are the sources the observation resolved, by location.
type restoreSources map[string]snapshotSource

// restoreObservation gathers the restore planner's view, and the evidence the gate reads for
// a disaster recovery's steps (pods, claims, the recorded member list; empty while etcd shows
// a serving quorum).
func (r *EtcdClusterReconciler) restoreObservation(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation) (ro restore.Observation, srcs restoreSources, drEv plan.Evidence, err error) {
	srcs = restoreSources{}
	ro = restore.Observation{
		ClusterUID: string(c.UID), Name: c.Name, Namespace: c.Namespace, Record: c.Status.Restore,
		Formed: c.Status.ClusterID != "", Policy: c.Spec.DisasterRecovery.Policy, After: time.Minute,
		MaxAttempts: restoreMaxAttempts, Now: o.Now,
	}
	if ro.Policy == "" {
		ro.Policy = v1alpha1.DisasterRecoveryManual
	}
	if d := c.Spec.DisasterRecovery.After; d != nil {
		ro.After = d.Duration
	}
	if o.StatefulSet != nil && o.StatefulSet.Spec.Replicas != nil {
		ro.StsReplicas = *o.StatefulSet.Spec.Replicas
	}
	if b := c.Spec.Bootstrap; b != nil && !ro.Formed {
		s, problem, err := r.bootstrapSource(ctx, c, b)
		if err != nil {
			return ro, srcs, drEv, err
		}
		// Bootstrap is set whenever spec.bootstrap is, also with a problem: the planner
		// reports BootstrapProblem only for a bootstrap it sees.
		ro.Bootstrap, ro.BootstrapProblem = &s.Source, problem
		if w, ok := strings.CutPrefix(problem, waitingPrefix); ok {
			ro.BootstrapProblem, ro.BootstrapWaiting = "", w
		}
		if problem == "" {
			srcs[s.Location] = s
		}
	}
	// Quorum and the members' data, proved from what this pass read: etcd's answers, and the
	// pods, claims and recorded member list read past the cache. A cluster etcd shows serving
	// needs none of it.
	ro.Ephemeral = c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral
	stopping := c.Status.Restore != nil && c.Status.Restore.Phase == v1alpha1.RestoreStopping
	servingNow := o.Etcd != nil && plan.Serving(*o.Etcd)
	if ro.Formed && (!servingNow || stopping) {
		ev, err := r.recoveryEvidence(ctx, c, t)
		if err != nil {
			return ro, srcs, drEv, err
		}
		drEv = ev
		state, why := plan.JudgeQuorum(plan.QuorumEvidence{Etcd: o.Etcd, Answers: o.Answers, Record: ev.Record, Intent: ev.Intent, Pods: ev.Pods})
		switch state {
		case plan.QuorumLost:
			ro.QuorumLost = true
		case plan.QuorumUnknown:
			ro.QuorumUnknown = why
			if o.EtcdErr != nil {
				ro.QuorumUnknown += " (the operator's last etcd error: " + o.EtcdErr.Error() + ")"
			}
		}
		d := plan.JudgeData(ev.Record, ev.Intent, ev.Pods)
		ro.Voters, ro.DataKept, ro.DataMayReturn = d.Voters, d.Kept, d.Why
		for i, name := range d.Gone {
			ro.DataGone = append(ro.DataGone, name+" ("+d.GoneWhy[i]+")")
		}
		// The wait before a disaster recovery counts from when a majority's data is known to
		// be gone, not from when quorum was lost (members may have been down for long, with
		// their data, before their claims went). A pass that proves nothing either way
		// neither starts nor resets it.
		if state != plan.QuorumUnknown {
			r.quorumLoss.observe(c.UID, state == plan.QuorumLost && d.Hopeless, o.Now)
		}
	} else {
		r.quorumLoss.observe(c.UID, false, o.Now)
	}
	ro.QuorumLostSince = r.quorumLoss.lostSince(c.UID)
	if ro.QuorumLost || restore.Active(c.Status.Restore) {
		latest, err := r.latestBackup(ctx, c)
		if err != nil {
			return ro, srcs, drEv, err
		}
		if latest != nil {
			ro.Latest = &latest.Source
			srcs[latest.Location] = *latest
		}
	}
	if rec := c.Status.Restore; rec != nil && restore.Active(rec) {
		if _, ok := srcs[rec.Location]; !ok {
			// The source of a restore under way, resolved again from what it recorded.
			s, problem, err := r.recordedSource(ctx, c, rec)
			if err != nil {
				return ro, srcs, drEv, err
			}
			if problem != "" {
				ro.SourceProblem = problem
			} else {
				srcs[rec.Location] = s
			}
		}
		ro.SequentialPods = srcs[rec.Location].claim != ""
	}
	if err := r.restoreFounders(ctx, c, t, o, &ro); err != nil {
		return ro, srcs, drEv, err
	}
	return ro, srcs, drEv, nil
}

// recoveryEvidence reads, past the cache, what disaster recovery decides on: the pod and data
// claim of every ordinal with the member stamps on them, the membership intent, and the member
// list last read with a quorum (the operator's memory). It lists pods and claims once each.
func (r *EtcdClusterReconciler) recoveryEvidence(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) (plan.Evidence, error) {
	ev := plan.Evidence{StatefulSet: t.StatefulSet}
	rec, err := r.memberRecord(ctx, c)
	if err != nil {
		return ev, err
	}
	ev.Record = rec
	if raw := c.Annotations[IntentAnnotation]; raw != "" {
		in := &plan.Intent{}
		if err := json.Unmarshal([]byte(raw), in); err != nil {
			// Not "no change in flight": it might remove a voter (JudgeQuorum: Unknown).
			in = &plan.Intent{Op: "unreadable", Reason: err.Error()}
		}
		ev.Intent = in
	}
	pods := &corev1.PodList{}
	if err := r.apiReader().List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return ev, fmt.Errorf("failed to list member pods: %w", err)
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.apiReader().List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
		return ev, fmt.Errorf("failed to list volume claims: %w", err)
	}
	// A recorded member's pod or claim the label selectors did not find (its labels changed by
	// hand) is looked up by name: a missing label is not missing data.
	if rec != nil {
		listed := map[string]bool{}
		for _, p := range pods.Items {
			listed[p.Name] = true
		}
		for _, p := range claims.Items {
			listed[p.Name] = true
		}
		for _, m := range rec.Members {
			if m.Name == "" {
				continue
			}
			if !listed[m.Name] {
				pod := &corev1.Pod{}
				if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: m.Name}, pod); err == nil {
					pods.Items = append(pods.Items, *pod)
				} else if !apierrors.IsNotFound(err) {
					return ev, fmt.Errorf("failed to get pod %s: %w", m.Name, err)
				}
			}
			if !listed["data-"+m.Name] {
				pvc := &corev1.PersistentVolumeClaim{}
				if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + m.Name}, pvc); err == nil {
					claims.Items = append(claims.Items, *pvc)
				} else if !apierrors.IsNotFound(err) {
					return ev, fmt.Errorf("failed to get volume claim data-%s: %w", m.Name, err)
				}
			}
		}
	}
	ev.Pods = recoveryPods(t.StatefulSet, c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral, pods.Items, claims.Items)
	return ev, nil
}

// recoveryPods describes every ordinal with a pod or a claim for disaster recovery's evidence:
// the pod's state, and its data holder (the claim, or under emptyDir storage the pod) with the
// member stamp on it and whether a pod holds a claim that is being deleted.
func recoveryPods(statefulSet string, ephemeral bool, pods []corev1.Pod, claims []corev1.PersistentVolumeClaim) []plan.Pod {
	byOrdinal := map[int32]*plan.Pod{}
	info := func(k int32) *plan.Pod {
		if p, ok := byOrdinal[k]; ok {
			return p
		}
		p := &plan.Pod{Name: fmt.Sprintf("%s-%d", statefulSet, k), Ordinal: k, NodeReady: true}
		byOrdinal[k] = p
		return p
	}
	for i := range pods {
		pod := &pods[i]
		k, ok := plan.Ordinal(statefulSet, pod.Name)
		if !ok {
			continue
		}
		p := info(k)
		plan.PodState(p, pod)
		terminated := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		p.PVCHeld = !terminated
		if ephemeral {
			p.Ephemeral, p.PVCExists, p.PVCDeleting, p.PVCUID = true, true, pod.DeletionTimestamp != nil, string(pod.UID)
			p.DataStamp = pod.Annotations[MemberIDAnnotation]
		}
	}
	if !ephemeral {
		for i := range claims {
			pvc := &claims[i]
			podName, ok := strings.CutPrefix(pvc.Name, "data-")
			if !ok {
				continue
			}
			k, ok := plan.Ordinal(statefulSet, podName)
			if !ok {
				continue
			}
			p := info(k)
			p.PVCExists, p.PVCUID, p.PVCDeleting = true, string(pvc.UID), pvc.DeletionTimestamp != nil
			p.DataStamp = pvc.Annotations[MemberIDAnnotation]
		}
	}
	out := make([]plan.Pod, 0, len(byOrdinal))
	for _, p := range byOrdinal {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ordinal < out[j].Ordinal })
	return out
}

// restoreFounders fills Founders: while members are being stopped, every ordinal that has a
// member pod; afterwards, the founding list.
func (r *EtcdClusterReconciler) restoreFounders(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, o *observe.Observation, ro *restore.Observation) error {
	rec := c.Status.Restore
	wanted := ro.Bootstrap != nil && rec == nil
	if rec == nil && !wanted {
		return nil
	}
	founders, err := r.foundersFrom(ctx, r.apiReader(), c, t)
	if err != nil {
		return err
	}
	n := int32(len(founders))
	// Whether member pods still exist decides when data is restored under them: read past
	// the cache, like every other read of a restore.
	members := map[string]bool{}
	stuck := map[string]string{}
	pods := &corev1.PodList{}
	if err := r.apiReader().List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if k, ok := plan.Ordinal(t.StatefulSet, p.Name); ok {
			members[p.Name] = true
			if rec != nil && rec.Phase == v1alpha1.RestoreStopping {
				n = max(n, k+1)
			}
			if why, err := r.stuckPod(ctx, p); err != nil {
				return err
			} else if why != "" {
				stuck[p.Name] = why
			}
		}
	}
	id := ""
	if rec != nil {
		id = rec.ID
	}
	for k := int32(0); k < n; k++ {
		name := fmt.Sprintf("%s-%d", t.StatefulSet, k)
		f := restore.Founder{Name: name, MemberPodExists: members[name], MemberPodStuck: stuck[name]}
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + name}, pvc)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to get volume claim data-%s: %w", name, err)
		}
		f.ClaimExists = err == nil
		f.ClaimStamped = f.ClaimExists && pvc.Annotations[MemberIDAnnotation] != ""
		if id != "" {
			pod := &corev1.Pod{}
			err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: restore.PodName(c.Name, id, k)}, pod)
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("failed to get restore pod: %w", err)
			}
			if err == nil {
				f.Pod = restore.PodState{Exists: true, Deleting: pod.DeletionTimestamp != nil, Phase: string(pod.Status.Phase),
					Message: restorePodMessage(pod), Revision: restoredRevision(pod)}
			}
		}
		ro.Founders = append(ro.Founders, f)
	}
	return nil
}

// stuckPod says why pod, being deleted, may never go by itself: its node is not ready (or
// gone), so no kubelet confirms that its containers stopped. Empty otherwise.
func (r *EtcdClusterReconciler) stuckPod(ctx context.Context, p *corev1.Pod) (string, error) {
	if p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
		return "", nil
	}
	node := &corev1.Node{}
	err := r.apiReader().Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, node)
	fix := fmt.Sprintf("; once you know its containers stopped (the node is off or its etcd is dead), delete the pod: kubectl -n %s delete pod %s --force --grace-period=0",
		p.Namespace, p.Name)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Terminating on node %s, which no longer exists%s", p.Spec.NodeName, fix), nil
	case err != nil:
		return "", fmt.Errorf("failed to get node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			return fmt.Sprintf("Terminating on node %s, which is not ready (Ready %s since %s), so no kubelet confirms it stopped%s",
				node.Name, cond.Status, cond.LastTransitionTime.UTC().Format(time.RFC3339), fix), nil
		}
	}
	return "", nil
}

// restorePodMessage is what a failed restore pod says: the first failed container's
// termination message (restore-prepare's report), or its exit.
func restorePodMessage(pod *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = t.Reason
			}
			return fmt.Sprintf("container %s exited with code %d: %s", cs.Name, t.ExitCode, msg)
		}
	}
	return pod.Status.Message
}

// waitingPrefix marks a bootstrap source that is not ready yet (a backup still running), as
// opposed to one that cannot be restored.
const waitingPrefix = "waiting: "

// restoredRevision is the snapshot revision a restore pod's prepare container reported, 0
// when it reported none.
func restoredRevision(pod *corev1.Pod) int64 {
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != "prepare" || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			continue
		}
		var p backup.Prepared
		if json.Unmarshal([]byte(strings.TrimSpace(cs.State.Terminated.Message)), &p) == nil {
			return p.Revision
		}
	}
	return 0
}

// bootstrapSource resolves spec.bootstrap, or says why it cannot be restored.
func (r *EtcdClusterReconciler) bootstrapSource(ctx context.Context, c *v1alpha1.EtcdCluster, b *v1alpha1.BootstrapSpec) (snapshotSource, string, error) {
	_, target := versionTargets(c)
	if o := b.FromObject; o != nil {
		s := snapshotSource{Source: restore.Source{Location: "s3://" + o.S3.Bucket + "/" + o.Key, SHA256: o.SHA256, EtcdVersion: o.EtcdVersion},
			s3: &o.S3, key: o.Key}
		return s, restore.VersionPairProblem(o.EtcdVersion, target), nil
	}
	eb := &v1alpha1.EtcdBackup{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: b.FromBackup.Name}, eb)
	if apierrors.IsNotFound(err) {
		return snapshotSource{}, fmt.Sprintf("spec.bootstrap.fromBackup names EtcdBackup %s, which does not exist in namespace %s; "+
			"create the cluster again naming an existing backup (kubectl get etcdbackups -n %s)", b.FromBackup.Name, c.Namespace, c.Namespace), nil
	}
	if err != nil {
		return snapshotSource{}, "", fmt.Errorf("failed to get EtcdBackup %s: %w", b.FromBackup.Name, err)
	}
	if eb.Status.Phase == v1alpha1.BackupFailed {
		return snapshotSource{}, fmt.Sprintf("EtcdBackup %s failed, so there is nothing to restore: create the cluster again naming a Succeeded backup",
			eb.Name), nil
	}
	if eb.Status.Phase != v1alpha1.BackupSucceeded {
		// Not a problem yet: the backup may still succeed.
		return snapshotSource{}, waitingPrefix + fmt.Sprintf("EtcdBackup %s is %s, not Succeeded yet: only a verified backup is restored; the founding members wait for it",
			eb.Name, orUnknown(string(eb.Status.Phase))), nil
	}
	s, problem, err := r.backupSource(ctx, c, eb)
	if err != nil || problem != "" {
		return s, problem, err
	}
	return s, restore.VersionPairProblem(eb.Status.EtcdVersion, target), nil
}

func orUnknown(s string) string {
	if s == "" {
		return "not started"
	}
	return s
}

// backupSource resolves where an EtcdBackup's snapshot is: its own destination, else its
// cluster's, else this cluster's spec.backup destination.
func (r *EtcdClusterReconciler) backupSource(ctx context.Context, c *v1alpha1.EtcdCluster, eb *v1alpha1.EtcdBackup) (snapshotSource, string, error) {
	d := eb.Spec.Destination
	if d == nil {
		owner := &v1alpha1.EtcdCluster{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.ClusterName}, owner)
		switch {
		case err == nil && owner.Spec.Backup != nil:
			d = &owner.Spec.Backup.Destination
		case err != nil && !apierrors.IsNotFound(err):
			return snapshotSource{}, "", fmt.Errorf("failed to get EtcdCluster %s: %w", eb.Spec.ClusterName, err)
		}
	}
	if d == nil && c.Spec.Backup != nil {
		d = &c.Spec.Backup.Destination
	}
	if d == nil {
		return snapshotSource{}, fmt.Sprintf("EtcdBackup %s names no destination, and neither its cluster %s nor this one has spec.backup: "+
			"the operator cannot tell where its snapshot is", eb.Name, eb.Spec.ClusterName), nil
	}
	s := snapshotSource{Source: restore.Source{Backup: eb.Name, Location: eb.Status.Location, SHA256: eb.Status.SHA256,
		Revision: eb.Status.Revision, EtcdVersion: eb.Status.EtcdVersion}}
	if t := eb.Status.CompletionTime; t != nil {
		s.Time = t.Time
	}
	switch {
	case d.S3 != nil:
		s.s3 = d.S3
		// The key the backup recorded, when it names this bucket: the destination's prefix may
		// have changed since.
		if k, ok := strings.CutPrefix(eb.Status.Location, "s3://"+d.S3.Bucket+"/"); ok && k != "" {
			s.key = k
		} else {
			s.key = strings.Trim(backup.S3Prefix(eb.Namespace, eb.Spec.ClusterName, d.S3), "/") + "/" + backup.ObjectKey(eb.Name)
		}
	case d.PersistentVolumeClaim != nil:
		s.claim, s.key = d.PersistentVolumeClaim.ClaimName, backup.ClaimPath(eb.Spec.ClusterName, d.PersistentVolumeClaim, eb.Name)
	}
	if s.Location == "" {
		s.Location = eb.Name
	}
	return s, "", nil
}

// latestBackup is the newest Succeeded EtcdBackup of c, resolved; nil when none.
func (r *EtcdClusterReconciler) latestBackup(ctx context.Context, c *v1alpha1.EtcdCluster) (*snapshotSource, error) {
	list := &v1alpha1.EtcdBackupList{}
	if err := r.apiReader().List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list EtcdBackups: %w", err)
	}
	_, target := versionTargets(c)
	var ok []v1alpha1.EtcdBackup
	for _, b := range list.Items {
		// Only backups of this etcd cluster (its cluster ID: a cluster deleted and created again
		// under the same name is another), of a version etcd restores into this one's.
		if b.Spec.ClusterName == c.Name && b.Status.Phase == v1alpha1.BackupSucceeded && b.Status.CompletionTime != nil && b.Status.SHA256 != "" &&
			(c.Status.ClusterID == "" || b.Status.ClusterID == c.Status.ClusterID) && restore.VersionPairProblem(b.Status.EtcdVersion, target) == "" {
			ok = append(ok, b)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].Status.CompletionTime.After(ok[j].Status.CompletionTime.Time) })
	for i := range ok {
		s, problem, err := r.backupSource(ctx, c, &ok[i])
		if err != nil {
			return nil, err
		}
		if problem == "" {
			return &s, nil
		}
	}
	return nil, nil
}

// recordedSource resolves the source of a restore under way from status.restore.
// It returns a problem instead when the source cannot be read any more (its EtcdBackup was
// deleted): restore pods that still have to run then cannot.
func (r *EtcdClusterReconciler) recordedSource(ctx context.Context, c *v1alpha1.EtcdCluster, rec *v1alpha1.RestoreStatus) (snapshotSource, string, error) {
	if rec.Backup != "" {
		eb := &v1alpha1.EtcdBackup{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: rec.Backup}, eb)
		if apierrors.IsNotFound(err) {
			return snapshotSource{}, fmt.Sprintf("its EtcdBackup %s was deleted during the restore", rec.Backup), nil
		}
		if err != nil {
			return snapshotSource{}, "", fmt.Errorf("failed to get EtcdBackup %s of the restore under way: %w", rec.Backup, err)
		}
		return r.backupSource(ctx, c, eb)
	}
	if b := c.Spec.Bootstrap; b != nil && b.FromObject != nil {
		s, _, err := r.bootstrapSource(ctx, c, b)
		return s, "", err
	}
	return snapshotSource{}, "the restore under way names no backup and spec.bootstrap names no object", nil
}

// actRestore carries out one restore step.
func (r *EtcdClusterReconciler) actRestore(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, ro restore.Observation, a restore.Action, srcs restoreSources, desired []*unstructured) error {
	if a.Kind == plan.Wait {
		return nil
	}
	log.FromContext(ctx).Info("restore step", "step", a.Kind, "member", a.Member, "reason", a.Reason, "message", a.Message)
	before := c.DeepCopy()
	var err error
	switch a.Kind {
	case restore.BeginRestore, restore.FinishRestore:
		c.Status.Restore = a.Record
	case plan.ScaleStatefulSet:
		err = r.scaleStatefulSet(ctx, c, t, a.Replicas, ro.StsReplicas)
	case restore.ResetMembership:
		err = r.resetMembership(ctx, c, t)
		if err == nil {
			c.Status.Restore = a.Record
		}
	case restore.CreateClaim:
		err = r.createClaim(ctx, c, a.Member, desired)
	case restore.RunRestorePod:
		err = r.runRestorePod(ctx, c, t, a.Member, srcs, desired)
	case restore.DeleteRestorePod, restore.CleanUp:
		k, _ := plan.Ordinal(t.StatefulSet, a.Member)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: restore.PodName(c.Name, c.Status.Restore.ID, k)}}
		err = client.IgnoreNotFound(r.Client.Delete(ctx, pod))
		if err == nil && a.Record != nil {
			c.Status.Restore = a.Record
		}
	default:
		err = fmt.Errorf("unknown restore step %s", a.Kind)
	}
	if err == nil && !equality.Semantic.DeepEqual(before.Status, c.Status) {
		// The restore's record is written now, not with the pass's status: the next step is
		// decided from it, so it must be stored before anything else happens (a crash right
		// after this step then finds it). The optimistic lock keeps a stale pass from
		// overwriting a newer record.
		// The base is the object as it is now (a step may have patched its metadata, such as
		// the intent) with the status it had before the step.
		base := c.DeepCopy()
		base.Status = *before.Status.DeepCopy()
		err = r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	metrics.CountStep(c, a.Kind, err)
	if err != nil {
		// Nothing of this step is recorded: the pass's own status write must not store it.
		c.Status = *before.Status.DeepCopy()
		r.Recorder.Eventf(c, memberPod(c.Namespace, a.Member), corev1.EventTypeWarning, a.Reason, string(a.Kind), "failed: %s: %v", a.Message, err)
		return fmt.Errorf("failed to %s (%s): %w", a.Kind, a.Reason, err)
	}
	evType := corev1.EventTypeNormal
	if a.Reason == v1alpha1.ReasonRecoveringFromBackup || a.Reason == v1alpha1.ReasonRestoreFailed ||
		(a.Kind == restore.FinishRestore && c.Status.Restore.Cause == v1alpha1.RestoreCauseDisasterRecovery) {
		evType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(c, memberPod(c.Namespace, a.Member), evType, a.Reason, string(a.Kind), "%s", a.Message)
	if r.AfterStep != nil {
		r.AfterStep(string(a.Kind))
	}
	return nil
}

// resetMembership drops the lost cluster's membership record, so the restored members form a
// new cluster as founders: the member stamps on the claims (they name the lost members), the
// intent of a change that can never finish, the membership ConfigMap (re-created with the
// founding list and state "new"), and what status knew of the lost cluster.
func (r *EtcdClusterReconciler) resetMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) error {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.apiReader().List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
		return fmt.Errorf("failed to list volume claims: %w", err)
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if _, ok := pvc.Annotations[MemberIDAnnotation]; !ok {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		delete(pvc.Annotations, MemberIDAnnotation)
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("failed to clear the member stamp of claim %s: %w", pvc.Name, err)
		}
	}
	if _, ok := c.Annotations[IntentAnnotation]; ok {
		if err := r.setIntent(ctx, c, nil); err != nil {
			return err
		}
	}
	// The founding list of the restored cluster, recorded in the same step: spec.replicas
	// members, and every ordinal that has a claim (a survivor above spec.replicas is restored
	// too, with its data set aside, rather than left with a stale claim; a scale-in follows).
	n := render.SpecReplicas(c)
	for i := range claims.Items {
		if podName, ok := strings.CutPrefix(claims.Items[i].Name, "data-"); ok {
			if k, ok := plan.Ordinal(t.StatefulSet, podName); ok {
				n = max(n, k+1)
			}
		}
	}
	list := foundingList(t, n)
	// The lost cluster's member record goes with it: the restored cluster's is recorded once
	// a quorum of it answers.
	if err := r.applyMembershipConfig(ctx, c, list, map[string]string{
		"ETCD_INITIAL_CLUSTER": strings.Join(list, ","), "ETCD_INITIAL_CLUSTER_STATE": "new"}, ""); err != nil {
		return err
	}
	s := &c.Status
	s.ClusterID, s.Members, s.Leader, s.LeaderID, s.LegacyLogIndex, s.Upgrade = "", nil, "", "", 0, nil
	return nil
}

// claimTemplate is the rendered StatefulSet's data claim template, and the StatefulSet.
func claimTemplate(desired []*unstructured) (*appsv1.StatefulSet, *corev1.PersistentVolumeClaim, error) {
	for _, o := range desired {
		if o.GetKind() != "StatefulSet" {
			continue
		}
		sts := &appsv1.StatefulSet{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
			return nil, nil, fmt.Errorf("failed to read the rendered StatefulSet: %w", err)
		}
		for i := range sts.Spec.VolumeClaimTemplates {
			if sts.Spec.VolumeClaimTemplates[i].Name == "data" {
				return sts, &sts.Spec.VolumeClaimTemplates[i], nil
			}
		}
		return sts, nil, fmt.Errorf("the rendered StatefulSet has no volume claim template named data")
	}
	return nil, nil, fmt.Errorf("the chart rendered no StatefulSet")
}

// createClaim creates member's data claim as the StatefulSet would: the template's name and
// spec, its labels and the StatefulSet's selector labels. The StatefulSet adopts it by name.
func (r *EtcdClusterReconciler) createClaim(ctx context.Context, c *v1alpha1.EtcdCluster, member string, desired []*unstructured) error {
	sts, tmpl, err := claimTemplate(desired)
	if err != nil {
		return err
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "data-" + member, Labels: map[string]string{}, Annotations: tmpl.Annotations},
		Spec:       tmpl.Spec,
	}
	for k, v := range tmpl.Labels {
		pvc.Labels[k] = v
	}
	if sts.Spec.Selector != nil {
		for k, v := range sts.Spec.Selector.MatchLabels {
			pvc.Labels[k] = v
		}
	}
	pvc.Labels[v1alpha1.LabelCluster] = c.Name
	if err := r.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create claim %s: %w", pvc.Name, err)
	}
	return nil
}

// runRestorePod creates the restore pod of member: restore-prepare (the operator's image)
// fetches and checks the snapshot and sets the volume's earlier data aside; etcdutl of the
// cluster's etcd image restores it with the founding list and the restore's cluster token;
// restore-finish checks the result and deletes the staging folder.
func (r *EtcdClusterReconciler) runRestorePod(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, member string, srcs restoreSources, desired []*unstructured) error {
	rec := c.Status.Restore
	src, ok := srcs[rec.Location]
	if !ok {
		return fmt.Errorf("the restore's source %s is not resolved", rec.Location)
	}
	sts, _, err := claimTemplate(desired)
	if err != nil {
		return err
	}
	founders, err := r.foundersFrom(ctx, r.apiReader(), c, t)
	if err != nil {
		return err
	}
	k, _ := plan.Ordinal(t.StatefulSet, member)
	var etcdImage, token string
	for _, ctr := range sts.Spec.Template.Spec.Containers {
		if ctr.Name != "etcd" {
			continue
		}
		etcdImage = ctr.Image
		token, _ = chartcontract.ParseEtcdArgs(ctr.Command, ctr.Args).Get("initial-cluster-token")
	}
	if etcdImage == "" || token == "" {
		return fmt.Errorf("the rendered StatefulSet has no etcd container with --initial-cluster-token")
	}
	args := backup.PrepareArgs{ID: rec.ID, SHA256: rec.SHA256, Volume: restoreVolumeRoot}
	var env []corev1.EnvVar
	volumes := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + member}}}}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: restoreVolumeRoot}}
	switch {
	case src.s3 != nil:
		args.S3Endpoint, args.S3Bucket, args.S3Key, args.S3Region = src.s3.Endpoint, src.s3.Bucket, src.key, src.s3.Region
		sec := src.s3.CredentialsSecret.Name
		env = []corev1.EnvVar{
			secretEnv(backup.EnvS3AccessKeyID, sec, backup.SecretKeyAccessKeyID, false),
			secretEnv(backup.EnvS3SecretAccessKey, sec, backup.SecretKeySecretAccessKey, false),
			secretEnv(backup.EnvS3SessionToken, sec, backup.SecretKeySessionToken, true),
		}
		if src.s3.CABundle != "" {
			env = append(env, corev1.EnvVar{Name: backup.EnvS3CABundle, Value: src.s3.CABundle})
		}
	case src.claim != "":
		args.File = backup.ClaimMountPath + "/" + src.key
		volumes = append(volumes, corev1.Volume{Name: "backup", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.claim, ReadOnly: true}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "backup", MountPath: backup.ClaimMountPath, ReadOnly: true})
	default:
		return fmt.Errorf("the restore's source %s has neither an S3 object nor a claim", rec.Location)
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	tpl := sts.Spec.Template.Spec
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespace, Name: restore.PodName(c.Name, rec.ID, k),
			Labels: map[string]string{
				v1alpha1.LabelCluster: c.Name, v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
				"app.kubernetes.io/component": "restore", LabelRestore: rec.ID,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext:              tpl.SecurityContext,
			// Where a restore pod runs decides where a claim bound on first use is provisioned:
			// it places itself as the member pod would.
			NodeSelector:              tpl.NodeSelector,
			Tolerations:               tpl.Tolerations,
			Affinity:                  tpl.Affinity,
			TopologySpreadConstraints: tpl.TopologySpreadConstraints,
			PriorityClassName:         tpl.PriorityClassName,
			ImagePullSecrets:          tpl.ImagePullSecrets,
			InitContainers: []corev1.Container{
				{
					Name: "prepare", Image: r.AgentImage, Command: []string{"/usr/local/bin/etcd-pilot"},
					Args: append([]string{"restore-prepare"}, args.Flags()...), Env: env,
					VolumeMounts: mounts, SecurityContext: restricted,
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				},
				{
					Name: "restore", Image: etcdImage, Command: []string{"/usr/local/bin/etcdutl"},
					Args: []string{"snapshot", "restore", restoreVolumeRoot + "/restore-" + rec.ID + "/" + backup.SnapshotFileName,
						"--data-dir=" + restoreVolumeRoot + "/" + backup.DataDirName,
						"--name=" + member,
						"--initial-cluster=" + strings.Join(founders, ","),
						"--initial-cluster-token=" + restore.Token(token, rec.ID),
						"--initial-advertise-peer-urls=" + t.PeerURL(member)},
					VolumeMounts: mounts[:1], SecurityContext: restricted,
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				},
			},
			Containers: []corev1.Container{{
				Name: "finish", Image: r.AgentImage, Command: []string{"/usr/local/bin/etcd-pilot"},
				Args:         []string{"restore-finish", "--id=" + rec.ID, "--volume=" + restoreVolumeRoot},
				VolumeMounts: mounts[:1], SecurityContext: restricted,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: volumes,
		},
	}
	if err := controllerutil.SetControllerReference(c, pod, r.Scheme); err != nil {
		return fmt.Errorf("failed to own restore pod %s: %w", pod.Name, err)
	}
	if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create restore pod %s: %w", pod.Name, err)
	}
	return nil
}

// LabelRestore on a restore pod holds the restore's ID.
const LabelRestore = "etcdpilot.io/restore"

func secretEnv(name, secret, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(optional)}}}
}

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
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// A restore's observation: the restore planner's view of a cluster (its bootstrap source, the
// newest backup, whether quorum is lost with a majority's data, the founders' claims and
// restore pods) and the evidence the gate reads for a disaster recovery's steps. Every read a
// restore step is decided on goes past the cache.

const (
	// restoreMaxAttempts is how many failed restore pods end a restore.
	restoreMaxAttempts = 3
)

// LostQuorum remembers since when this process has seen each cluster without quorum. Its
// zero value is ready; one is kept per reconciler, across passes.
type LostQuorum struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
}

// Observe records whether cluster uid is seen without quorum (and hopeless) at now, and
// returns since when it has been (zero when it is not).
func (l *LostQuorum) Observe(uid types.UID, lost bool, now time.Time) time.Time {
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

// LostSince is since when quorum has been seen lost (and hopeless), zero when it is not.
func (l *LostQuorum) LostSince(uid types.UID) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since[uid]
}

// SnapshotSource is a resolved snapshot: where the restore pods read it, and how.
type SnapshotSource struct {
	restore.Source
	S3    *v1alpha1.S3Destination // with the full object key in Key
	Key   string
	Claim string // claim name, with Key the file's path on it
}

// RestoreSources are the sources the observation resolved, by location.
type RestoreSources map[string]SnapshotSource

// RestoreReads are what a restore's observation reads through.
type RestoreReads struct {
	// Client reads from the manager's cache: the EtcdBackups and EtcdClusters a source names.
	Client client.Reader
	// APIReader reads past the cache: the pods, claims, nodes, founding list and backups a
	// restore step is decided on.
	APIReader client.Reader
	// QuorumLoss is the process's memory of since when each cluster has been without quorum;
	// Restore updates it.
	QuorumLoss *LostQuorum
	// Egress is the operator's outbound policy: a source whose S3 endpoint it refuses is a
	// problem the restore reports before any restore pod runs (egress.Default when nil).
	Egress *egress.Policy
}

// Restore gathers the restore planner's view, and the evidence the gate reads for a disaster
// recovery's steps (pods, claims, the recorded member list; empty while etcd shows a serving
// quorum). o is the pass's observation, with TargetVersion and Now set.
func Restore(ctx context.Context, rd RestoreReads, c *v1alpha1.EtcdCluster, t render.Topology, o *Observation) (ro restore.Observation, srcs RestoreSources, drEv plan.Evidence, err error) {
	srcs = RestoreSources{}
	ro = restore.Observation{
		ClusterUID: string(c.UID), Name: c.Name, Namespace: c.Namespace, Record: o.Memory.Restore,
		Formed: o.Memory.Formed(), Policy: c.Spec.DisasterRecovery.Policy, After: time.Minute,
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
		s, problem, err := bootstrapSource(ctx, rd.Client, c, b, o.TargetVersion)
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
			problem = endpointProblem(rd.Egress, s)
			ro.BootstrapProblem = problem
		}
		if problem == "" {
			srcs[s.Location] = s
		}
	}
	// Quorum and the members' data, proved from what this pass read: etcd's answers, and the
	// pods, claims and recorded member list read past the cache. A cluster etcd shows serving
	// needs none of it.
	ro.Ephemeral = c.Spec.Storage.Ephemeral != nil && *c.Spec.Storage.Ephemeral
	stopping := o.Memory.Restore != nil && o.Memory.Restore.Phase == v1alpha1.RestoreStopping
	servingNow := o.Etcd != nil && plan.Serving(*o.Etcd)
	if ro.Formed && (!servingNow || stopping) {
		ev, err := recoveryEvidence(ctx, rd.APIReader, c, t)
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
			rd.QuorumLoss.Observe(c.UID, state == plan.QuorumLost && d.Hopeless, o.Now)
		}
	} else {
		rd.QuorumLoss.Observe(c.UID, false, o.Now)
	}
	ro.QuorumLostSince = rd.QuorumLoss.LostSince(c.UID)
	if ro.QuorumLost || restore.Active(o.Memory.Restore) {
		latest, err := latestBackup(ctx, rd.Client, rd.APIReader, c, o.Memory.ClusterID, o.TargetVersion)
		if err != nil {
			return ro, srcs, drEv, err
		}
		if latest != nil && endpointProblem(rd.Egress, *latest) == "" {
			ro.Latest = &latest.Source
			srcs[latest.Location] = *latest
		}
	}
	if rec := o.Memory.Restore; rec != nil && restore.Active(rec) {
		if _, ok := srcs[rec.Location]; !ok {
			// The source of a restore under way, resolved again from what it recorded.
			s, problem, err := recordedSource(ctx, rd.Client, c, rec, o.TargetVersion)
			if err != nil {
				return ro, srcs, drEv, err
			}
			if problem == "" {
				problem = endpointProblem(rd.Egress, s)
			}
			if problem != "" {
				ro.SourceProblem = problem
			} else {
				srcs[rec.Location] = s
			}
		}
		ro.SequentialPods = srcs[rec.Location].Claim != ""
	}
	if err := restoreFounders(ctx, rd.APIReader, c, t, &ro); err != nil {
		return ro, srcs, drEv, err
	}
	return ro, srcs, drEv, nil
}

// recoveryEvidence reads, past the cache (api), what disaster recovery
// decides on: the pod and data claim of every ordinal with the member stamps on them, the
// membership intent, and the member list last read with a quorum (the operator's memory). It
// lists pods and claims once each.
func recoveryEvidence(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster, t render.Topology) (plan.Evidence, error) {
	ev := plan.Evidence{StatefulSet: t.StatefulSet}
	rec, err := MemberRecord(ctx, api, c)
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
	if err := api.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return ev, fmt.Errorf("failed to list member pods: %w", err)
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := api.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
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
				if err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: m.Name}, pod); err == nil {
					pods.Items = append(pods.Items, *pod)
				} else if !apierrors.IsNotFound(err) {
					return ev, fmt.Errorf("failed to get pod %s: %w", m.Name, err)
				}
			}
			if !listed["data-"+m.Name] {
				pvc := &corev1.PersistentVolumeClaim{}
				if err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + m.Name}, pvc); err == nil {
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
func restoreFounders(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster, t render.Topology, ro *restore.Observation) error {
	rec := ro.Record
	wanted := ro.Bootstrap != nil && rec == nil
	if rec == nil && !wanted {
		return nil
	}
	founders, err := Founders(ctx, api, c, t)
	if err != nil {
		return err
	}
	n := int32(len(founders))
	// Whether member pods still exist decides when data is restored under them: read past
	// the cache, like every other read of a restore.
	members := map[string]bool{}
	stuck := map[string]string{}
	pods := &corev1.PodList{}
	if err := api.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabelsSelector{Selector: t.Selector}); err != nil {
		return fmt.Errorf("failed to list member pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if k, ok := plan.Ordinal(t.StatefulSet, p.Name); ok {
			members[p.Name] = true
			if rec != nil && rec.Phase == v1alpha1.RestoreStopping {
				n = max(n, k+1)
			}
			if why, err := stuckPod(ctx, api, p); err != nil {
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
		err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: "data-" + name}, pvc)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to get volume claim data-%s: %w", name, err)
		}
		f.ClaimExists = err == nil
		f.ClaimStamped = f.ClaimExists && pvc.Annotations[MemberIDAnnotation] != ""
		if id != "" {
			pod := &corev1.Pod{}
			err := api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: restore.PodName(c.Name, id, k)}, pod)
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
func stuckPod(ctx context.Context, api client.Reader, p *corev1.Pod) (string, error) {
	if p.DeletionTimestamp == nil || p.Spec.NodeName == "" {
		return "", nil
	}
	node := &corev1.Node{}
	err := api.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, node)
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

// bootstrapSource resolves spec.bootstrap through kc, or says why it cannot be restored into
// etcd version target.
func bootstrapSource(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, b *v1alpha1.BootstrapSpec, target string) (SnapshotSource, string, error) {
	if o := b.FromObject; o != nil {
		s := SnapshotSource{Source: restore.Source{Location: "s3://" + o.S3.Bucket + "/" + o.Key, SHA256: o.SHA256, EtcdVersion: o.EtcdVersion},
			S3: &o.S3, Key: o.Key}
		return s, restore.VersionPairProblem(o.EtcdVersion, target), nil
	}
	eb := &v1alpha1.EtcdBackup{}
	err := kc.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: b.FromBackup.Name}, eb)
	if apierrors.IsNotFound(err) {
		return SnapshotSource{}, fmt.Sprintf("spec.bootstrap.fromBackup names EtcdBackup %s, which does not exist in namespace %s; "+
			"create the cluster again naming an existing backup (kubectl get etcdbackups -n %s)", b.FromBackup.Name, c.Namespace, c.Namespace), nil
	}
	if err != nil {
		return SnapshotSource{}, "", fmt.Errorf("failed to get EtcdBackup %s: %w", b.FromBackup.Name, err)
	}
	if eb.Status.Phase == v1alpha1.BackupFailed {
		return SnapshotSource{}, fmt.Sprintf("EtcdBackup %s failed, so there is nothing to restore: create the cluster again naming a Succeeded backup",
			eb.Name), nil
	}
	if eb.Status.Phase != v1alpha1.BackupSucceeded {
		// Not a problem yet: the backup may still succeed.
		return SnapshotSource{}, waitingPrefix + fmt.Sprintf("EtcdBackup %s is %s, not Succeeded yet: only a verified backup is restored; the founding members wait for it",
			eb.Name, orUnknown(string(eb.Status.Phase))), nil
	}
	s, problem, err := backupSource(ctx, kc, c, eb)
	if err != nil || problem != "" {
		return s, problem, err
	}
	return s, restore.VersionPairProblem(eb.Status.EtcdVersion, target), nil
}

// endpointProblem says why the outbound policy p refuses s's S3 endpoint ("" when it does
// not, or s is on a claim): the restore pods would be refused it (they run under the same
// policy), so the restore says so before it starts any. Only what can be told without a
// DNS lookup is checked here; a name the pods resolve to a refused address fails them.
func endpointProblem(p *egress.Policy, s SnapshotSource) string {
	if s.S3 == nil {
		return ""
	}
	if err := p.CheckEndpoint(s.S3.Endpoint); err != nil {
		return fmt.Sprintf("the snapshot's S3 endpoint %s cannot be read: %v", s.S3.Endpoint, err)
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "not started"
	}
	return s
}

// backupSource resolves where an EtcdBackup's snapshot is: its own destination, else its
// cluster's (read through kc), else this cluster's spec.backup destination.
func backupSource(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, eb *v1alpha1.EtcdBackup) (SnapshotSource, string, error) {
	d := eb.Spec.Destination
	if d == nil {
		owner := &v1alpha1.EtcdCluster{}
		err := kc.Get(ctx, types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.ClusterName}, owner)
		switch {
		case err == nil && owner.Spec.Backup != nil:
			d = &owner.Spec.Backup.Destination
		case err != nil && !apierrors.IsNotFound(err):
			return SnapshotSource{}, "", fmt.Errorf("failed to get EtcdCluster %s: %w", eb.Spec.ClusterName, err)
		}
	}
	if d == nil && c.Spec.Backup != nil {
		d = &c.Spec.Backup.Destination
	}
	if d == nil {
		return SnapshotSource{}, fmt.Sprintf("EtcdBackup %s names no destination, and neither its cluster %s nor this one has spec.backup: "+
			"the operator cannot tell where its snapshot is", eb.Name, eb.Spec.ClusterName), nil
	}
	s := SnapshotSource{Source: restore.Source{Backup: eb.Name, Location: eb.Status.Location, SHA256: eb.Status.SHA256,
		Revision: eb.Status.Revision, EtcdVersion: eb.Status.EtcdVersion}}
	if t := eb.Status.CompletionTime; t != nil {
		s.Time = t.Time
	}
	switch {
	case d.S3 != nil:
		s.S3 = d.S3
		// The key the backup recorded, when it names this bucket: the destination's prefix may
		// have changed since.
		if k, ok := strings.CutPrefix(eb.Status.Location, "s3://"+d.S3.Bucket+"/"); ok && k != "" {
			s.Key = k
		} else {
			s.Key = strings.Trim(backup.S3Prefix(eb.Namespace, eb.Spec.ClusterName, d.S3), "/") + "/" + backup.ObjectKey(eb.Name)
		}
	case d.PersistentVolumeClaim != nil:
		s.Claim, s.Key = d.PersistentVolumeClaim.ClaimName, backup.ClaimPath(eb.Spec.ClusterName, d.PersistentVolumeClaim, eb.Name)
	}
	if s.Location == "" {
		s.Location = eb.Name
	}
	return s, "", nil
}

// latestBackup is the newest Succeeded EtcdBackup of c that restores into etcd version
// target, listed past the cache (api) and resolved through kc; nil when none. clusterID is
// etcd's cluster ID as recorded ("" before the cluster formed).
func latestBackup(ctx context.Context, kc, api client.Reader, c *v1alpha1.EtcdCluster, clusterID, target string) (*SnapshotSource, error) {
	list := &v1alpha1.EtcdBackupList{}
	if err := api.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("failed to list EtcdBackups: %w", err)
	}
	var ok []v1alpha1.EtcdBackup
	for _, b := range list.Items {
		// Only backups of this etcd cluster (its cluster ID: a cluster deleted and created again
		// under the same name is another), of a version etcd restores into this one's.
		if b.Spec.ClusterName == c.Name && b.Status.Phase == v1alpha1.BackupSucceeded && b.Status.CompletionTime != nil && b.Status.SHA256 != "" &&
			(clusterID == "" || b.Status.ClusterID == clusterID) && restore.VersionPairProblem(b.Status.EtcdVersion, target) == "" {
			ok = append(ok, b)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].Status.CompletionTime.After(ok[j].Status.CompletionTime.Time) })
	for i := range ok {
		s, problem, err := backupSource(ctx, kc, c, &ok[i])
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
func recordedSource(ctx context.Context, kc client.Reader, c *v1alpha1.EtcdCluster, rec *v1alpha1.RestoreStatus, target string) (SnapshotSource, string, error) {
	if rec.Backup != "" {
		eb := &v1alpha1.EtcdBackup{}
		err := kc.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: rec.Backup}, eb)
		if apierrors.IsNotFound(err) {
			return SnapshotSource{}, fmt.Sprintf("its EtcdBackup %s was deleted during the restore", rec.Backup), nil
		}
		if err != nil {
			return SnapshotSource{}, "", fmt.Errorf("failed to get EtcdBackup %s of the restore under way: %w", rec.Backup, err)
		}
		return backupSource(ctx, kc, c, eb)
	}
	if b := c.Spec.Bootstrap; b != nil && b.FromObject != nil {
		s, _, err := bootstrapSource(ctx, kc, c, b, target)
		return s, "", err
	}
	return SnapshotSource{}, "the restore under way names no backup and spec.bootstrap names no object", nil
}

package execute

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unstructuredv1 "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/chartcontract"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/restore"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
)

// A restore's steps: the record of the restore, the StatefulSet scaled to zero, the lost
// cluster's membership dropped, the founders' claims, and the restore pods that put the
// snapshot on them.

const (
	// restoreVolumeRoot is where a restore pod mounts the member's claim: where the chart
	// mounts it for etcd.
	restoreVolumeRoot = "/var/lib/etcd"
)

// Restore carries out one restore step a (the gate let it through): ro is the observation it
// was decided on, srcs the sources that observation resolved, desired the rendered objects.
// A step that changes status.restore stores it before Restore returns; a step that fails
// leaves c's status as it was.
func (x *Executor) Restore(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, ro restore.Observation, a restore.Action, srcs observe.RestoreSources,
	desired []*unstructuredv1.Unstructured) error {
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
		err = x.ScaleStatefulSet(ctx, c, t, a.Replicas, ro.StsReplicas)
	case restore.ResetMembership:
		err = x.resetMembership(ctx, c, t)
		if err == nil {
			c.Status.Restore = a.Record
		}
	case restore.CreateClaim:
		err = x.createClaim(ctx, c, a.Member, desired)
	case restore.RunRestorePod:
		err = x.runRestorePod(ctx, c, t, ro.Record, a.Member, srcs, desired)
	case restore.DeleteRestorePod, restore.CleanUp:
		k, _ := plan.Ordinal(t.StatefulSet, a.Member)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: restore.PodName(c.Name, ro.Record.ID, k)}}
		err = client.IgnoreNotFound(x.Client.Delete(ctx, pod))
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
		// A copy is patched, and its metadata and status taken back: the API server answers
		// with the stored spec, not the pass's effective one (values.Effective).
		w := c.DeepCopy()
		if err = x.Client.Status().Patch(ctx, w, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err == nil {
			c.ObjectMeta, c.Status = w.ObjectMeta, w.Status
		}
	}
	if err != nil {
		x.Done(c, a.Kind, err)
		// Nothing of this step is recorded: the pass's own status write must not store it.
		c.Status = *before.Status.DeepCopy()
		x.Recorder.Eventf(c, MemberPod(c.Namespace, a.Member), corev1.EventTypeWarning, a.Reason, string(a.Kind), "failed: %s: %v", a.Message, err)
		return fmt.Errorf("failed to %s (%s): %w", a.Kind, a.Reason, err)
	}
	evType := corev1.EventTypeNormal
	if a.Reason == v1alpha1.ReasonRecoveringFromBackup || a.Reason == v1alpha1.ReasonRestoreFailed ||
		(a.Kind == restore.FinishRestore && a.Record != nil && a.Record.Cause == v1alpha1.RestoreCauseDisasterRecovery) {
		evType = corev1.EventTypeWarning
	}
	x.Recorder.Eventf(c, MemberPod(c.Namespace, a.Member), evType, a.Reason, string(a.Kind), "%s", a.Message)
	x.Done(c, a.Kind, nil)
	return nil
}

// resetMembership drops the lost cluster's membership record, so the restored members form a
// new cluster as founders: the member stamps on the claims (they name the lost members), the
// intent of a change that can never finish, the membership ConfigMap (re-created with the
// founding list and state "new"), and what status knew of the lost cluster.
func (x *Executor) resetMembership(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology) error {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := x.APIReader.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name}); err != nil {
		return fmt.Errorf("failed to list volume claims: %w", err)
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if _, ok := pvc.Annotations[observe.MemberIDAnnotation]; !ok {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		delete(pvc.Annotations, observe.MemberIDAnnotation)
		if err := x.Client.Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("failed to clear the member stamp of claim %s: %w", pvc.Name, err)
		}
	}
	if _, ok := c.Annotations[observe.IntentAnnotation]; ok {
		if err := x.SetIntent(ctx, c, nil); err != nil {
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
	list := observe.FoundingList(t, n)
	// The lost cluster's member record goes with it: the restored cluster's is recorded once
	// a quorum of it answers.
	if err := x.ApplyMembershipConfig(ctx, c, list, map[string]string{
		"ETCD_INITIAL_CLUSTER": strings.Join(list, ","), "ETCD_INITIAL_CLUSTER_STATE": "new"}, ""); err != nil {
		return err
	}
	s := &c.Status
	s.ClusterID, s.Members, s.Leader, s.LeaderID, s.LegacyLogIndex, s.Upgrade = "", nil, "", "", 0, nil
	return nil
}

// claimTemplate is the rendered StatefulSet's data claim template, and the StatefulSet.
func claimTemplate(desired []*unstructuredv1.Unstructured) (*appsv1.StatefulSet, *corev1.PersistentVolumeClaim, error) {
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
func (x *Executor) createClaim(ctx context.Context, c *v1alpha1.EtcdCluster, member string, desired []*unstructuredv1.Unstructured) error {
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
	if err := x.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create claim %s: %w", pvc.Name, err)
	}
	return nil
}

// runRestorePod creates the restore pod of member: restore-prepare (the operator's image)
// fetches and checks the snapshot and sets the volume's earlier data aside; etcdutl of the
// cluster's etcd image restores it with the founding list and the restore's cluster token;
// restore-finish checks the result and deletes the staging folder. The founding list is read
// past the cache.
func (x *Executor) runRestorePod(ctx context.Context, c *v1alpha1.EtcdCluster, t render.Topology, rec *v1alpha1.RestoreStatus, member string, srcs observe.RestoreSources, desired []*unstructuredv1.Unstructured) error {
	src, ok := srcs[rec.Location]
	if !ok {
		return fmt.Errorf("the restore's source %s is not resolved", rec.Location)
	}
	sts, _, err := claimTemplate(desired)
	if err != nil {
		return err
	}
	founders, err := observe.Founders(ctx, x.APIReader, c, t)
	if err != nil {
		return err
	}
	pod, err := x.restorePod(c, t, rec, member, src, sts, founders)
	if err != nil {
		return err
	}
	// The pod takes the rendered pod's securityContext and placement: held to the same level.
	if err := podsecurity.CheckPod(pod, x.Operator.PodSecurity); err != nil {
		return fmt.Errorf("failed to create restore pod %s: %w", pod.Name, err)
	}
	if err := controllerutil.SetControllerReference(c, pod, x.Scheme); err != nil {
		return fmt.Errorf("failed to own restore pod %s: %w", pod.Name, err)
	}
	if err := x.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create restore pod %s: %w", pod.Name, err)
	}
	return nil
}

// restorePod builds the restore pod of member from the restore's source, the rendered
// StatefulSet and the founding list: restricted Pod Security whatever the render (its pod
// securityContext and placement aside), no service-account token.
func (x *Executor) restorePod(c *v1alpha1.EtcdCluster, t render.Topology, rec *v1alpha1.RestoreStatus, member string, src observe.SnapshotSource, sts *appsv1.StatefulSet, founders []string) (*corev1.Pod, error) {
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
		return nil, fmt.Errorf("the rendered StatefulSet has no etcd container with --initial-cluster-token")
	}
	args := backup.PrepareArgs{ID: rec.ID, SHA256: rec.SHA256, Volume: restoreVolumeRoot}
	var env []corev1.EnvVar
	volumes := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + member}}}}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: restoreVolumeRoot}}
	switch {
	case src.S3 != nil:
		args.S3Endpoint, args.S3Bucket, args.S3Key, args.S3Region = src.S3.Endpoint, src.S3.Bucket, src.Key, src.S3.Region
		// The pod reads the snapshot under the operator's outbound policy too.
		args.Egress = x.Egress.Args()
		sec := src.S3.CredentialsSecret.Name
		env = []corev1.EnvVar{
			secretEnv(backup.EnvS3AccessKeyID, sec, backup.SecretKeyAccessKeyID, false),
			secretEnv(backup.EnvS3SecretAccessKey, sec, backup.SecretKeySecretAccessKey, false),
			secretEnv(backup.EnvS3SessionToken, sec, backup.SecretKeySessionToken, true),
		}
		if src.S3.CABundle != "" {
			env = append(env, corev1.EnvVar{Name: backup.EnvS3CABundle, Value: src.S3.CABundle})
		}
	case src.Claim != "":
		args.File = backup.ClaimMountPath + "/" + src.Key
		volumes = append(volumes, corev1.Volume{Name: "backup", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.Claim, ReadOnly: true}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "backup", MountPath: backup.ClaimMountPath, ReadOnly: true})
	default:
		return nil, fmt.Errorf("the restore's source %s has neither an S3 object nor a claim", rec.Location)
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	tpl := sts.Spec.Template.Spec
	return &corev1.Pod{
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
					Name: "prepare", Image: x.AgentImage, Command: []string{"/usr/local/bin/etcd-pilot"},
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
				Name: "finish", Image: x.AgentImage, Command: []string{"/usr/local/bin/etcd-pilot"},
				Args:         []string{"restore-finish", "--id=" + rec.ID, "--volume=" + restoreVolumeRoot},
				VolumeMounts: mounts[:1], SecurityContext: restricted,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: volumes,
		},
	}, nil
}

// LabelRestore on a restore pod holds the restore's ID.
const LabelRestore = "etcdpilot.io/restore"

// secretEnv is environment variable name from key of Secret secret.
func secretEnv(name, secret, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(optional)}}}
}

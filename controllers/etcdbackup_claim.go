package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	backupplan "github.com/etcd-pilot/etcd-pilot/internal/plan/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Backup pods: the pods that stream a snapshot onto a claim.
const (
	// LabelBackup names the EtcdBackup a backup pod works for.
	LabelBackup = "etcdpilot.io/backup"
	// backupContainer is the backup pod's only container.
	backupContainer = "snapshot"
	// backupUser runs the backup pod, as the chart runs etcd.
	backupUser = 65532
)

// backupPodName is the name of the pod of EtcdBackup name's attempt.
func backupPodName(name string, attempt int32) string {
	return fmt.Sprintf("%s-snapshot-%d", name, attempt)
}

// takeToClaim runs one pass of a backup to a claim: it starts a pod of the operator's image
// that mounts the claim and streams the snapshot into it, and reads its result from the pod's
// termination message once the pod ends. One pod per attempt, named after it, so a crash of
// the operator between creating the pod and recording the attempt finds the same pod.
func (r *EtcdBackupReconciler) takeToClaim(ctx context.Context, b *v1alpha1.EtcdBackup, c *v1alpha1.EtcdCluster, d *v1alpha1.PVCDestination, now time.Time) (reconcile.Result, error) {
	if b.Status.Phase == v1alpha1.BackupRunning {
		pod := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: backupPodName(b.Name, b.Status.Attempts)}, pod)
		switch {
		case apierrors.IsNotFound(err):
			if b.Status.StartTime != nil && now.Sub(b.Status.StartTime.Time) < 10*time.Second {
				return reconcile.Result{RequeueAfter: time.Second}, nil // the cache may not show it yet
			}
			return r.retry(b, now, v1alpha1.ReasonSnapshotFailed, "the backup pod disappeared before it finished")
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("failed to get the backup pod: %w", err)
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			rep, perr := podReport(pod)
			if err := r.deletePod(ctx, pod); err != nil {
				return reconcile.Result{}, err
			}
			switch {
			case perr != nil:
				return r.retry(b, now, v1alpha1.ReasonSnapshotFailed, perr.Error())
			case pod.Status.Phase == corev1.PodFailed || rep.Failure != "" || rep.Error != "":
				return r.retry(b, now, failureReason(rep.Failure), fmt.Sprintf("backup pod %s: %s", pod.Name, rep.Error))
			}
			if b.Status.MemberID != "" && rep.MemberID != b.Status.MemberID {
				// The pod checks this itself; a report from another member is not that
				// member's data, whatever the pod's version did.
				return r.retry(b, now, v1alpha1.ReasonSnapshotFailed, fmt.Sprintf("backup pod %s took its snapshot from member %q, not from member %s (%s) it was to take it from",
					pod.Name, rep.MemberID, b.Status.MemberID, b.Status.Member))
			}
			rep.Location = "pvc://" + d.ClaimName + "/" + backup.ClaimPath(c.Name, d, b.Name)
			r.succeed(b, rep, c)
			return reconcile.Result{}, nil
		}
		if b.Status.StartTime != nil && now.Sub(b.Status.StartTime.Time) > r.Timeout {
			if err := r.deletePod(ctx, pod); err != nil {
				return reconcile.Result{}, err
			}
			return r.retry(b, now, v1alpha1.ReasonSnapshotFailed, fmt.Sprintf("backup pod %s did not finish within %s", pod.Name, r.Timeout))
		}
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}

	if r.AgentImage == "" {
		return r.fail(b, now, v1alpha1.ReasonNoDestination, "the operator was started without --agent-image, so it cannot run the pod that writes to a claim")
	}
	claim := &corev1.PersistentVolumeClaim{}
	// From the API server: the cache holds only the members' claims.
	if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: d.ClaimName}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return r.pending(b, now, v1alpha1.ReasonNoDestination, fmt.Sprintf("the claim %s/%s does not exist", b.Namespace, d.ClaimName))
		}
		return reconcile.Result{}, fmt.Errorf("failed to get the claim %s/%s: %w", b.Namespace, d.ClaimName, err)
	}
	src, _, why, err := r.source(ctx, c)
	if render.IsTLSError(err) {
		return r.pending(b, now, v1alpha1.ReasonNoHealthyMember, err.Error())
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if why != "" {
		return r.pending(b, now, v1alpha1.ReasonNoHealthyMember, why)
	}
	location := "pvc://" + d.ClaimName + "/" + backup.ClaimPath(c.Name, d, b.Name)
	r.running(b, now, src, location)
	pod := r.backupPod(b, c, d, src)
	if err := controllerutil.SetControllerReference(b, pod, r.Scheme); err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to own the backup pod: %w", err)
	}
	if err := r.executor().CreateBackupPod(ctx, pod); err != nil {
		return r.retry(b, now, v1alpha1.ReasonUploadFailed, fmt.Sprintf("failed to create the backup pod: %v", err))
	}
	return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
}

func (r *EtcdBackupReconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	return r.executor().DeleteBackupPod(ctx, pod)
}

// executor is the executor for the EtcdBackup controller's writes (its status aside).
func (r *EtcdBackupReconciler) executor() *execute.Executor {
	return &execute.Executor{Client: r.Client, APIReader: r.apiReader(), Scheme: r.Scheme, Recorder: r.Recorder, Dial: r.DialEtcd,
		EtcdTimeout: r.EtcdTimeout, AgentImage: r.AgentImage, Operator: r.Operator, OpenS3: r.OpenS3, Egress: r.Egress}
}

// podReport reads the report the backup pod left in its termination message.
func podReport(pod *corev1.Pod) (backup.Report, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != backupContainer || cs.State.Terminated == nil {
			continue
		}
		msg := strings.TrimSpace(cs.State.Terminated.Message)
		var rep backup.Report
		if msg == "" {
			return rep, fmt.Errorf("backup pod %s ended (exit code %d, %s) without a report", pod.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
		if err := json.Unmarshal([]byte(msg), &rep); err != nil {
			return rep, fmt.Errorf("backup pod %s left a report that is not JSON (%v): %q", pod.Name, err, msg)
		}
		return rep, nil
	}
	return backup.Report{}, fmt.Errorf("backup pod %s has no terminated %s container", pod.Name, backupContainer)
}

// backupPod is the pod that streams the snapshot of the member at endpoint onto the claim. It
// runs the operator's image under restricted Pod Security, never restarts, and mounts only
// the claim.
func (r *EtcdBackupReconciler) backupPod(b *v1alpha1.EtcdBackup, c *v1alpha1.EtcdCluster, d *v1alpha1.PVCDestination, src backupplan.Source) *corev1.Pod {
	endpoint := src.Endpoint
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: b.Namespace, Name: backupPodName(b.Name, b.Status.Attempts),
			// The cluster's NetworkPolicy admits pods with values.BackupPodLabels to the
			// client port.
			Labels: backupPodLabels(c.Name, b.Name),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			NodeSelector:                 c.Spec.NodeSelector,
			Tolerations:                  c.Spec.Tolerations,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(backupUser)), RunAsGroup: ptr.To(int64(backupUser)),
				FSGroup: ptr.To(int64(backupUser)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: backupContainer, Image: r.AgentImage,
				Command: []string{"/usr/local/bin/etcd-pilot"},
				Args: []string{"snapshot", "--endpoint=" + endpoint, "--member=" + src.Member.Name,
					"--member-id=" + etcd.FormatID(src.Member.ID), fmt.Sprintf("--applied-index=%d", src.Committed),
					"--dir=" + backup.ClaimMountPath, "--key=" + backup.ClaimPath(c.Name, d, b.Name),
					"--timeout=" + r.Timeout.String()},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "backup", MountPath: backup.ClaimMountPath}},
			}},
			Volumes: []corev1.Volume{{Name: "backup", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.ClaimName}}}},
		},
	}
	if strings.HasPrefix(endpoint, "https://") {
		// The pod presents the operator's client certificate, mounted from its Secret.
		secret := v1alpha1.OperatorTLSSecretName(c.Name)
		if render.ClientTLSEnabled(c) {
			secret = observe.OperatorTLSSecret(c)
		}
		ctr := &pod.Spec.Containers[0]
		ctr.Args = append(ctr.Args, "--tls-dir="+agentTLSPath)
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "client-tls", MountPath: agentTLSPath, ReadOnly: true})
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "client-tls", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o440))}}})
	}
	return pod
}

// backupPodLabels are the labels of a backup pod: values.BackupPodLabels, its backup, and the
// managed-by label the operator's pod cache selects.
func backupPodLabels(cluster, backup string) map[string]string {
	l := values.BackupPodLabels(cluster)
	l[LabelBackup] = backup
	l[v1alpha1.LabelManagedBy] = v1alpha1.ManagedByValue
	return l
}

// agentTLSPath is where backup pods mount the operator's client certificate.
const agentTLSPath = "/etc/etcd-pilot/tls"

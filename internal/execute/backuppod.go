package execute

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
)

// CreateBackupPod creates the pod that writes a snapshot to a claim (the EtcdBackup
// controller builds it, owned by its EtcdBackup); one that exists already is success. A pod
// outside the operator's Pod Security level is refused (a *podsecurity.Error), uncreated.
func (x *Executor) CreateBackupPod(ctx context.Context, pod *corev1.Pod) error {
	if err := podsecurity.CheckPod(pod, x.Operator.PodSecurity); err != nil {
		return err
	}
	if err := x.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// DeleteBackupPod deletes a backup pod that finished or timed out, only the one observed (its
// UID); gone, or replaced meanwhile, is success.
func (x *Executor) DeleteBackupPod(ctx context.Context, pod *corev1.Pod) error {
	err := x.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("failed to delete the backup pod %s: %w", pod.Name, err)
	}
	return nil
}

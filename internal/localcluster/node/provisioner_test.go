package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// createClaim creates a claim of the local class that the scheduler placed on node.
func createClaim(t *testing.T, ns, name, node string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{annSelectedNode: node}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	got, err := clientset.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("failed to create claim %s: %v", name, err)
	}
	return got
}

func waitVolume(t *testing.T, name string) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	eventually(t, 10*time.Second, func() (bool, string) {
		var err error
		pv, err = clientset.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		return err == nil, fmt.Sprintf("no volume %s: %v", name, err)
	})
	return pv
}

// bindClaim binds claim and volume as kube-controller-manager's PV controller would.
func bindClaim(t *testing.T, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	pvc.Spec.VolumeName = pv.Name
	pvc, err := clientset.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, pvc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if _, err := clientset.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setVolumePhase(t, pv.Name, corev1.VolumeBound)
}

func setVolumePhase(t *testing.T, name string, phase corev1.PersistentVolumePhase) {
	t.Helper()
	pv, err := clientset.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = phase
	if _, err := clientset.CoreV1().PersistentVolumes().UpdateStatus(context.Background(), pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestStorageClassIsAcceptedAsTheDefault(t *testing.T) {
	t.Parallel()
	sc, err := clientset.StorageV1().StorageClasses().Create(context.Background(), StorageClass(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		sc, err = clientset.StorageV1().StorageClasses().Get(context.Background(), StorageClassName, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if sc.Provisioner != ProvisionerName || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer ||
		*sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || sc.Annotations[annDefaultClass] != "true" {
		t.Errorf("storage class = %+v", sc)
	}
}

func TestProvisionerCreatesAndDeletesVolumes(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	dir := volumesDir

	// A claim without a selected node (the scheduler has not placed its pod) waits.
	waitingClaim := createClaim(t, ns, "unplaced", "")
	delete(waitingClaim.Annotations, annSelectedNode)
	pvc := createClaim(t, ns, "data", "node-a")
	pv := waitVolume(t, volumeName(pvc))

	if _, err := clientset.CoreV1().PersistentVolumes().Get(context.Background(), volumeName(waitingClaim), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("volume for the unplaced claim: err = %v, want NotFound", err)
	}
	if pv.Annotations[annProvisionedBy] != ProvisionerName || pv.Spec.StorageClassName != StorageClassName ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("volume metadata = %+v / %+v", pv.Annotations, pv.Spec)
	}
	if c := pv.Spec.ClaimRef; c == nil || c.Namespace != ns || c.Name != "data" || c.UID != pvc.UID {
		t.Errorf("claimRef = %+v", c)
	}
	if size := pv.Spec.Capacity[corev1.ResourceStorage]; size.String() != "2Gi" {
		t.Errorf("capacity = %s, want 2Gi", size.String())
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchExpressions[0].Key != labelHostname || terms[0].MatchExpressions[0].Values[0] != "node-a" {
		t.Errorf("node affinity = %+v", terms)
	}
	path := pv.Spec.HostPath.Path
	if filepath.Dir(path) != dir {
		t.Errorf("volume folder %s is not under %s", path, dir)
	}
	if err := os.WriteFile(filepath.Join(path, "data"), []byte("x"), 0o644); err != nil {
		t.Fatalf("volume folder not usable: %v", err)
	}

	// The claim is gone: the PV controller marks the volume Released, the provisioner removes
	// the folder and deletes the volume.
	if err := clientset.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setVolumePhase(t, pv.Name, corev1.VolumeReleased)
	eventually(t, 10*time.Second, func() (bool, string) {
		_, err := os.Stat(path)
		return os.IsNotExist(err), fmt.Sprintf("folder %s still there (%v)", path, err)
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		got, err := clientset.CoreV1().PersistentVolumes().Get(context.Background(), pv.Name, metav1.GetOptions{})
		// envtest runs no pv-protection controller: a deleted volume may linger with its finalizer.
		return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil), fmt.Sprintf("volume not deleted (%v)", err)
	})
}

// TestProvisionerGrowsABoundVolume: a bound claim that asks more has its volume grown (the
// PV's capacity), then its file system (the claim's capacity), as a real resizer and kubelet
// would, through the API server's own resize admission (the class allows expansion).
func TestProvisionerGrowsABoundVolume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := clientset.StorageV1().StorageClasses().Create(ctx, StorageClass(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	pvc := createClaim(t, ns, "grows", "node-a")
	pv := waitVolume(t, volumeName(pvc))
	bindClaim(t, pvc, pv)
	eventually(t, 10*time.Second, func() (bool, string) {
		got, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("3Gi")
		_, err = clientset.CoreV1().PersistentVolumeClaims(ns).Update(ctx, got, metav1.UpdateOptions{})
		return err == nil, fmt.Sprintf("claim not grown: %v", err)
	})
	eventually(t, 10*time.Second, func() (bool, string) {
		v, err := clientset.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		have, capacity := v.Spec.Capacity[corev1.ResourceStorage], c.Status.Capacity[corev1.ResourceStorage]
		return have.String() == "3Gi" && capacity.String() == "3Gi" && len(c.Status.Conditions) == 0,
			fmt.Sprintf("volume %s, claim %s, conditions %v", have.String(), capacity.String(), c.Status.Conditions)
	})
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// The local storage class and its provisioner.
const (
	// StorageClassName is the name of the local cluster's default StorageClass.
	StorageClassName = "local"
	// OfflineStorageClassName is a class of the same provisioner whose file systems grow only
	// offline: a grown claim stays FileSystemResizePending until the pod using it starts
	// again, as with storage drivers without online expansion.
	OfflineStorageClassName = "local-offline"
	// ProvisionerName provisions the StorageClass's volumes.
	ProvisionerName = "etcdpilot.io/local"

	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
	// annSelectedNode is set on a claim by the scheduler when a pod using it (with a
	// WaitForFirstConsumer class) was scheduled.
	annSelectedNode = "volume.kubernetes.io/selected-node"
	// annProvisionedBy marks the PVs a provisioner made; it also tells kube-controller-manager's
	// PV controller to leave their deletion to that (external) provisioner.
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// StorageClass is the StorageClass to install for RunProvisioner: the default class, bound
// when a pod using a claim is scheduled (so the volume goes to the pod's node), its volumes
// deleted with their claims.
func StorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{annDefaultClass: "true"},
		},
		Provisioner: ProvisionerName,
		// Its folders have no size of their own: a claim grows by the number on its PV.
		AllowVolumeExpansion: ptr.To(true),
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// StorageClasses are the classes to install for RunProvisioner: the default one, and the
// one whose file systems grow only offline.
func StorageClasses() []*storagev1.StorageClass {
	offline := StorageClass()
	offline.Name, offline.Annotations = OfflineStorageClassName, nil
	return []*storagev1.StorageClass{StorageClass(), offline}
}

// ourClass reports whether class is one of RunProvisioner's.
func ourClass(class *string) bool {
	c := ptr.Deref(class, "")
	return c == StorageClassName || c == OfflineStorageClassName
}

// RunProvisioner provisions the volumes of the local StorageClass until ctx ends: for every
// pending claim of the class that the scheduler gave a node (volume.kubernetes.io/selected-
// node), it creates a folder under dir and a hostPath PV for it, pre-bound to the claim and
// pinned to the node, which kube-controller-manager's PV controller then binds. When such a
// PV is Released (its claim was deleted) it removes the folder and deletes the PV. Folders of
// one cluster's volumes all live under dir; the caller must give every cluster its own dir.
// It returns nil when ctx ends, or an error when its caches could not sync.
func RunProvisioner(ctx context.Context, client kubernetes.Interface, dir string, log logr.Logger) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("failed to make volume folder %s absolute: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create volume folder %s: %w", dir, err)
	}
	p := &provisioner{client: client, dir: dir, log: log.WithName("provisioner")}
	factory := informers.NewSharedInformerFactory(client, 0)
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	p.pvcs, p.pvs = pvcs.Lister(), pvs.Lister()
	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "local-provisioner"})
	defer p.queue.ShutDown()
	enqueue := func(prefix string) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				p.queue.Add(prefix + key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
	}
	if _, err := pvcs.Informer().AddEventHandler(enqueue("pvc/")); err != nil {
		return fmt.Errorf("failed to watch persistentvolumeclaims: %w", err)
	}
	if _, err := pvs.Informer().AddEventHandler(enqueue("pv/")); err != nil {
		return fmt.Errorf("failed to watch persistentvolumes: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("failed to sync the cache of %v", typ)
		}
	}
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	for p.next(ctx) {
	}
	return nil
}

type provisioner struct {
	client kubernetes.Interface
	dir    string
	log    logr.Logger
	pvcs   corelisters.PersistentVolumeClaimLister
	pvs    corelisters.PersistentVolumeLister
	queue  workqueue.TypedRateLimitingInterface[string]
}

// next processes one queued key; it returns false once the queue shut down.
func (p *provisioner) next(ctx context.Context) bool {
	key, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(key)
	var err error
	if k, ok := strings.CutPrefix(key, "pvc/"); ok {
		err = p.syncClaim(ctx, k)
	} else if k, ok := strings.CutPrefix(key, "pv/"); ok {
		err = p.syncVolume(ctx, k)
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Error(err, "Failed to sync; retrying", "key", key)
		}
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// volumeName is the PV of a claim, named as external provisioners name them.
func volumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// syncClaim provisions a PV for the claim namespace/name when it needs one.
func (p *provisioner) syncClaim(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := p.pvcs.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName == volumeName(pvc) {
		return p.resize(ctx, pvc)
	}
	node := pvc.Annotations[annSelectedNode]
	if !ourClass(pvc.Spec.StorageClassName) || node == "" ||
		pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
		return nil
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		p.log.Info("Not provisioning a block volume", "claim", key)
		return nil
	}
	pvName := volumeName(pvc)
	if _, err := p.pvs.Get(pvName); err == nil {
		return nil
	}
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		size = resource.MustParse("1Gi")
	}
	path := filepath.Join(p.dir, pvName)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fmt.Errorf("failed to create the folder of volume %s: %w", pvName, err)
	}
	// A host path volume gets no fsGroup from a real kubelet: a pod that runs as another user
	// than root (the etcd members run as 65532) can write it only if everyone may, as with
	// the local-path provisioners of kind and k3s. The umask took those bits off.
	if err := os.Chmod(path, 0o777); err != nil {
		return fmt.Errorf("failed to open the folder of volume %s to its pod's user: %w", pvName, err)
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        pvName,
			Annotations: map[string]string{annProvisionedBy: ProvisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes: modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
			},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, StorageClassName),
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: labelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}}}},
			}},
		},
	}
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create persistentvolume %s: %w", pvName, err)
	}
	p.log.Info("Provisioned volume", "claim", key, "volume", pvName, "node", node, "path", path)
	return nil
}

// resize grows the bound volume of pvc to what the claim asks, in the two steps of a real
// storage: as its resizer, the PV's capacity first, the claim then FileSystemResizePending;
// as the kubelet growing the file system online, the claim's capacity. A folder has no size,
// so each step is only the number.
func (p *provisioner) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	want, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || pvc.DeletionTimestamp != nil {
		return nil
	}
	pv, err := p.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return client404(err)
	}
	if pv.Annotations[annProvisionedBy] != ProvisionerName {
		return nil
	}
	if have := pv.Spec.Capacity[corev1.ResourceStorage]; have.Cmp(want) < 0 {
		pv = pv.DeepCopy()
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := p.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("failed to grow persistentvolume %s to %s: %w", pv.Name, want.String(), err)
		}
		pvc = pvc.DeepCopy()
		pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
		pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{
			Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
		}}
		if _, err := p.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("failed to mark claim %s/%s FileSystemResizePending: %w", pvc.Namespace, pvc.Name, err)
		}
		p.log.Info("Grew volume", "claim", pvc.Namespace+"/"+pvc.Name, "volume", pv.Name, "size", want.String())
		return nil
	}
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	if have := pvc.Status.Capacity[corev1.ResourceStorage]; have.Cmp(capacity) >= 0 && len(pvc.Status.Conditions) == 0 {
		return nil
	}
	if ptr.Deref(pvc.Spec.StorageClassName, "") == OfflineStorageClassName {
		// Offline: the file system grows when a pod mounts the volume again. Pod starts are
		// not claim events: look again in a while.
		if remounted, err := p.remounted(ctx, pvc); err != nil || !remounted {
			p.queue.AddAfter("pvc/"+pvc.Namespace+"/"+pvc.Name, 2*time.Second)
			return err
		}
	}
	pvc = pvc.DeepCopy()
	if pvc.Status.Capacity == nil {
		pvc.Status.Capacity = corev1.ResourceList{}
	}
	pvc.Status.Capacity[corev1.ResourceStorage] = capacity
	pvc.Status.Conditions = nil
	pvc.Status.AllocatedResourceStatuses = nil
	if _, err := p.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("failed to record the grown file system of claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	p.log.Info("Grew file system", "claim", pvc.Namespace+"/"+pvc.Name, "size", capacity.String())
	return nil
}

// remounted reports whether a pod that uses pvc started after its file system resize was
// asked for, runs and is not being deleted: it mounted the grown volume.
func (p *provisioner) remounted(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	var asked time.Time
	for _, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending {
			asked = c.LastTransitionTime.Time
		}
	}
	pods, err := p.client.CoreV1().Pods(pvc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("failed to list the pods of %s: %w", pvc.Namespace, err)
	}
	for _, pod := range pods.Items {
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
				continue
			}
			if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.StartTime != nil && pod.Status.StartTime.After(asked) {
				return true, nil
			}
		}
	}
	return false, nil
}

// client404 makes a lister's not-found nil (the informer's next event brings the object).
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// syncVolume deletes a Released volume of this provisioner, folder first.
func (p *provisioner) syncVolume(ctx context.Context, name string) error {
	pv, err := p.pvs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Annotations[annProvisionedBy] != ProvisionerName || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.DeletionTimestamp != nil {
		return nil
	}
	if pv.Spec.HostPath != nil {
		path := pv.Spec.HostPath.Path
		// Remove only what this provisioner made: a folder right under its dir.
		if filepath.Dir(filepath.Clean(path)) != p.dir {
			return fmt.Errorf("persistentvolume %s has path %s outside %s: not removing it", name, path, p.dir)
		}
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("failed to remove the folder of persistentvolume %s: %w", name, err)
		}
	}
	err = p.client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: metav1.NewUIDPreconditions(string(pv.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete persistentvolume %s: %w", name, err)
	}
	p.log.Info("Deleted released volume", "volume", name)
	return nil
}

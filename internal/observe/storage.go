package observe

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/membership"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/storage"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// DataClaimTemplate is the name of the StatefulSet's volume claim template of the members'
// data (the claims are "<template>-<pod>").
const DataClaimTemplate = "data"

// Storage builds the storage planner's view from what the membership observation read (the
// claims, the pods, etcd) and the StatefulSet. The StorageClass of a claim that must grow is
// read from the API server (api), only then: a class that cannot be read is left out, and
// the API server's admission decides whether the claim may grow.
func Storage(ctx context.Context, api client.Reader, c *v1alpha1.EtcdCluster, o *Observation, mo membership.Observation) storage.Observation {
	so := storage.Observation{Ephemeral: o.Ephemeral, Now: mo.Now}
	// What the render asks (a custom chart or a patch may set another size than the spec):
	// the StatefulSet is re-created with it, so it is what the claims must reach.
	so.Want = resource.MustParse(values.DefaultStorageSize)
	if c.Spec.Storage.Size != nil {
		so.Want = c.Spec.Storage.Size.DeepCopy()
	}
	if q, err := resource.ParseQuantity(o.RenderedStorageSize); err == nil {
		so.Want = q
	}
	if o.StatefulSet == nil || o.Ephemeral {
		return so
	}
	for _, t := range o.StatefulSet.Spec.VolumeClaimTemplates {
		if t.Name == DataClaimTemplate {
			q := t.Spec.Resources.Requests[corev1.ResourceStorage]
			so.Template = &q
		}
	}
	var ids map[string]uint64
	var leader uint64
	if mo.Etcd != nil {
		ids, leader = map[string]uint64{}, mo.Etcd.Leader()
	}
	voter := map[uint64]bool{}
	if mo.Etcd != nil {
		for _, m := range mo.Etcd.Cluster.Members {
			if m.Name != "" {
				ids[m.Name] = m.ID
			}
			voter[m.ID] = !m.IsLearner
		}
	}
	for _, p := range mo.Pods {
		if p.Ordinal >= mo.StsReplicas {
			continue
		}
		pvc := o.Claims[p.Name]
		if pvc == nil {
			continue
		}
		cl := claimOf(p, pvc)
		cl.PodCreated = p.CreatedAt
		if id, ok := ids[p.Name]; ok {
			_, answered := mo.Etcd.Status[id]
			cl.MemberID, cl.Voter, cl.Leader, cl.Healthy = id, voter[id], id == leader, answered && p.Ready && !p.Deleting
		}
		so.Claims = append(so.Claims, cl)
	}
	so.Unsettled = plan.PodsUnsettled(mo.Pods, mo.StsReplicas)
	for _, cl := range so.Claims {
		if cl.Requested.Cmp(so.Want) >= 0 || cl.Deleting {
			continue
		}
		if so.Expandable == nil {
			so.Expandable = map[string]bool{}
		}
		if _, done := so.Expandable[cl.Class]; done || cl.Class == "" {
			continue
		}
		sc := &storagev1.StorageClass{}
		if err := api.Get(ctx, types.NamespacedName{Name: cl.Class}, sc); err == nil {
			so.Expandable[cl.Class] = sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
		}
	}
	return so
}

// claimOf is a member pod's claim as the storage planner sees it.
func claimOf(p plan.Pod, pvc *corev1.PersistentVolumeClaim) storage.Claim {
	cl := storage.Claim{
		Member:    p.Name,
		Requested: pvc.Spec.Resources.Requests[corev1.ResourceStorage],
		Capacity:  pvc.Status.Capacity[corev1.ResourceStorage],
		Deleting:  pvc.DeletionTimestamp != nil,
		Bound:     pvc.Status.Phase == corev1.ClaimBound,
	}
	if pvc.Spec.StorageClassName != nil {
		cl.Class = *pvc.Spec.StorageClassName
	}
	for _, cond := range pvc.Status.Conditions {
		if cond.Type == corev1.PersistentVolumeClaimFileSystemResizePending && cond.Status == corev1.ConditionTrue {
			cl.FileSystemResizePending, cl.PendingSince = true, cond.LastTransitionTime.Time
		}
	}
	if st, ok := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
		switch st {
		case corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeInfeasible:
			cl.Infeasible = string(st)
		}
	}
	return cl
}

// StorageStatus is status.storage from the storage planner's view (nil under emptyDir
// storage or without a StatefulSet).
func StorageStatus(so *storage.Observation) *v1alpha1.StorageStatus {
	if so == nil || so.Ephemeral || so.Template == nil {
		return nil
	}
	st := &v1alpha1.StorageStatus{TemplateSize: so.Template.String()}
	for _, cl := range so.Claims {
		m := v1alpha1.MemberVolumeStatus{Name: cl.Member, Requested: cl.Requested.String(), State: storage.State(cl, so.Want)}
		if !cl.Capacity.IsZero() {
			m.Capacity = cl.Capacity.String()
		}
		st.Members = append(st.Members, m)
	}
	return st
}

package manager

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/etcd-pilot/etcd-pilot/internal/plan"
)

// stripPod keeps of a cached Pod only what the controllers read, and drops managedFields
// as the default transform does (a kind's own transform replaces the default one):
//
//   - metadata, whole (labels, annotations, owners, deletion);
//   - spec.nodeName and spec.subdomain (where a member runs; its DNS name);
//   - the etcd container's name and args (what it listens on: the peer and client
//     switches), the other containers' names;
//   - the volumes that are Secrets, by name and Secret (the TLS volumes' Secrets);
//   - status, whole (readiness, the etcd container's state, the pod's IP, a restore's or a
//     backup's termination message).
//
// Everything else in the spec (images, env, probes, mounts, resources, affinity,
// tolerations, the projected token volume) is written by the StatefulSet controller from a
// template the operator reads from the StatefulSet itself, or by the operator when it creates
// a backup or restore pod, and nothing reads it back from the pod: with a thousand clusters
// the cache held three thousand full pod specs.
//
// A pod is patched only by merge patches computed from a copy of the cached object (an
// annotation on an ephemeral member), which carry only what changed, so the stripped fields
// are never written back.
func stripPod(in any) (any, error) {
	if d, ok := in.(cache.DeletedFinalStateUnknown); ok {
		obj, err := stripPod(d.Obj)
		return cache.DeletedFinalStateUnknown{Key: d.Key, Obj: obj}, err
	}
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return ctrlcache.TransformStripManagedFields()(in)
	}
	pod.ManagedFields = nil
	spec := corev1.PodSpec{NodeName: pod.Spec.NodeName, Subdomain: pod.Spec.Subdomain, Hostname: pod.Spec.Hostname}
	for _, c := range pod.Spec.Containers {
		kept := corev1.Container{Name: c.Name}
		if c.Name == plan.EtcdContainer {
			kept.Args = c.Args
		}
		spec.Containers = append(spec.Containers, kept)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: v.Secret.SecretName}}})
		}
	}
	pod.Spec = spec
	return pod, nil
}

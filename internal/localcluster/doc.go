// Package localcluster runs `etcd-pilot-local up`: a Kubernetes cluster on this machine whose
// pods are local processes. The real control plane (internal/localcluster/controlplane) runs
// on loopback; process nodes (internal/localcluster/node) play the kubelets; every process
// shares one name view, a hosts file bind-mounted over /etc/hosts in a private mount
// namespace (internal/localcluster/hosts); run by a user other than root, that mount namespace
// belongs to a user namespace mapping the user to root (internal/localcluster/userns). It is
// the embedded default of the main job and the end-to-end test harness. Only the local
// cluster's own binary (cmd/etcd-pilot-local) links it, never the operator's binary or image.
package localcluster

// Package localcluster runs `etcd-pilot local`: a Kubernetes cluster on this machine whose
// pods are local processes. The real control plane (internal/localcluster/controlplane) runs
// on loopback; process nodes (internal/localcluster/node) play the kubelets; every process
// shares one name view, a hosts file bind-mounted over /etc/hosts in a private mount
// namespace (internal/localcluster/hosts). It is the embedded default of the main job and the
// end-to-end test harness, and never part of the operator's production code paths.
package localcluster

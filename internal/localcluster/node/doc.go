// Package node is the process node of the local cluster: a small kubelet for a machine with no
// container runtime. It registers a Node, renews its Lease, and runs the containers of the pods
// bound to it as local processes, each in a private mount namespace where the image's folder
// and the pod's volumes are bind-mounted where the pod spec expects them (see ShimMain). It
// needs the rights to create mount namespaces: root, or the root of a user namespace (the
// local cluster of a user other than root runs in one, see package userns).
//
// What it does, as the kubelet does it: pod IPs (127.x.y.z, one per pod, see IPAllocator) and
// DNS names published through a NameView before any process starts; command, args and env
// with $(VAR) expansion and the downward API; emptyDir, PersistentVolumeClaim (see
// RunProvisioner), hostPath, Secret, ConfigMap, downward API and projected volumes; startup,
// liveness and readiness probes (HTTP, TCP, exec); init containers; restart policies with
// exponential back-off; container statuses and pod conditions written through the status
// subresource; termination messages (a fresh file per run, bound at the container's
// terminationMessagePath, read when the run ends, with FallbackToLogsOnError and the
// kubelet's size limits); graceful deletion (SIGTERM to the command, then SIGKILL to all its
// processes after the grace period).
//
// A mount point missing on the machine is created there (see ShimMain): the first container
// with the default terminationMessagePath leaves an empty /dev/termination-log on the
// machine, which no container writes to. In a user namespace, where the machine's folders
// cannot be written, it is created in a tmpfs copy of its folder that only the container's
// mount namespace sees, and nothing is left on the machine.
//
// The image folder appears at /usr/local/bin in the process's view, where images keep their
// programs, and also replaces the directory of an absolute command elsewhere, unless that
// directory is at or under one of the container's volume mounts: a command an init container
// copied into an emptyDir runs from the emptyDir and can still exec the image's programs in
// /usr/local/bin. Volumes are mounted after the image folder. The image folder must hold real
// files, or links that resolve outside the directories it covers.
//
// What it does not do: resource limits, security contexts (every process runs as the node's
// user, which in a user namespace is its root: the user who started the cluster), sidecar (restartable) init containers, ephemeral containers, lifecycle hooks, gRPC
// probes, service environment variables (except the kubernetes Service's, which name the API
// server itself: there is no kube-proxy), in-place updates of a pod's containers, refreshing
// token and projected volumes after the pod started, and image entrypoints (a container must
// name its command). Secret and ConfigMap volumes are refreshed while the pod runs, every two
// seconds, atomically through a ..data link as the kubelet writes them.
package node

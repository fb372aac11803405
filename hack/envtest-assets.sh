#!/usr/bin/env bash
# Prepares bin/envtest/, the KUBEBUILDER_ASSETS folder of the envtest suites: symlinks to
# kube-apiserver (hack/build-kube.sh), etcd (hack/build-etcd.sh) and kubectl when it has been
# built. Builds what is missing first, then prints the folder's absolute path.
# Usage: KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go test ./...
# Progress goes to stderr; stdout carries only the folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
etcd_version=3.6.16
kube=$("$root/hack/build-kube.sh" kube-apiserver)
etcd=$("$root/hack/build-etcd.sh" "$etcd_version")
out="$root/bin/envtest"
mkdir -p "$out"
link() { # link <target> <name>: replace the symlink atomically, so a running suite never misses it
  ln -sfn "$1" "$out/.$2.tmp"
  mv -T "$out/.$2.tmp" "$out/$2"
}
link "$kube/kube-apiserver" kube-apiserver
link "$etcd/etcd" etcd
if [ -x "$kube/kubectl" ]; then
  link "$kube/kubectl" kubectl
fi
echo "$out"

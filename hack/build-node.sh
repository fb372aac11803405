#!/usr/bin/env bash
# Builds and installs what the real-node lane (etcd-pilot-local up --runtime=containerd) needs
# beyond the control plane: the kubelet and kube-proxy (hack/build-kube.sh), containerd with
# ctr and its runc shim, and CoreDNS, from their Go modules into bin/; runc, the CNI plugins,
# iptables and conntrack from Debian's packages (apt-get, as root, when missing).
# Cached: what is already there is not built or installed again.
# Usage: hack/build-node.sh      Progress goes to stderr; stdout carries only bin/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
containerd_version=v2.4.2
coredns_version=v1.14.7

"$root/hack/build-kube.sh" kubelet kube-proxy kube-apiserver kube-controller-manager kube-scheduler kubectl >/dev/null

build() { # build OUT_DIR MODULE@VERSION [go build flags...] -- PACKAGES...
  local out=$1 what=$2; shift 2
  mkdir -p "$out"
  local start; start=$(date +%s)
  echo ">> building $what (first use only; a few minutes)" >&2
  GOBIN="$out.tmp" go install "$@"
  for f in "$out.tmp"/*; do mv "$f" "$out/"; done
  rmdir "$out.tmp"
  echo ">> built $what in $(( $(date +%s) - start ))s" >&2
}

cd_out="$root/bin/containerd/$containerd_version"
if ! [ -x "$cd_out/containerd" ] || ! [ -x "$cd_out/ctr" ] || ! [ -x "$cd_out/containerd-shim-runc-v2" ]; then
  # The snapshotters the lane does not use need C libraries this machine lacks.
  build "$cd_out" "containerd $containerd_version" -trimpath -tags "no_btrfs no_zfs no_devmapper" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/ctr@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version"
fi

dns_out="$root/bin/coredns/$coredns_version"
if ! [ -x "$dns_out/coredns" ]; then
  CGO_ENABLED=0 build "$dns_out" "CoreDNS $coredns_version" -trimpath -ldflags "-s -w" \
    "github.com/coredns/coredns@$coredns_version"
fi

# Debian's packages: runc (crun fails on this kind's hybrid cgroups), the bridge and host-local
# CNI plugins, and the tools kube-proxy runs.
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "the real-node lane needs Debian's ${need[*]}: install them as root (apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo ">> installing ${need[*]} from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2; }
fi
echo "$root/bin"

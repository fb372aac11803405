#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the
# k8s.io/kubernetes Go module (through hack/tools/kube) into bin/k8s/<version>/.
# Cached: a binary that is already there is not built again.
# Usage: hack/build-kube.sh [component ...]   (default: all four)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=v1.37.1
out="$root/bin/k8s/$version"
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
mkdir -p "$out"
missing=()
for c in "${components[@]}"; do
  [ -x "$out/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$out"
  exit 0
fi
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
cd "$root/hack/tools/kube"
for c in "${missing[@]}"; do
  echo ">> building $c $version (first use only; a few minutes)" >&2
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$out/$c.tmp" "$out/$c"
  echo ">> built $c in $(( $(date +%s) - start ))s" >&2
done
echo "$out"

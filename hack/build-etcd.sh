#!/usr/bin/env bash
# Builds etcd, etcdctl and etcdutl of one etcd release from its Go modules (through the tools
# module hack/tools/etcd-<version>) into bin/etcd/v<version>/, and prints that folder.
# Cached: a binary that is already there is not built again.
# Usage: hack/build-etcd.sh [version]   (default 3.6.16, without the leading v)
# Progress goes to stderr; stdout carries only the output folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-3.6.16}
version=${version#v}
tools="$root/hack/tools/etcd-$version"
out="$root/bin/etcd/v$version"
if [ ! -f "$tools/go.mod" ]; then
  echo "no tools module for etcd $version: create $tools (copy another hack/tools/etcd-*, change the version, run go mod tidy inside it)" >&2
  exit 1
fi
# Binary name -> main package. The server's main package is the root of its module (etcd 3.5+).
declare -A pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [etcdctl]=go.etcd.io/etcd/etcdctl/v3
  [etcdutl]=go.etcd.io/etcd/etcdutl/v3
)
mkdir -p "$out"
missing=()
for b in etcd etcdctl etcdutl; do
  [ -x "$out/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$out"
  exit 0
fi
# etcd's own build stamps the git commit here; a module zip carries no commit, so stamp the tag.
ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$version"
cd "$tools"
for b in "${missing[@]}"; do
  echo ">> building $b v$version (first use only; a few minutes)" >&2
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "${pkgs[$b]}"
  mv "$out/$b.tmp" "$out/$b"
  echo ">> built $b in $(( $(date +%s) - start ))s" >&2
done
echo "$out"

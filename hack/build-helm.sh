#!/usr/bin/env bash
# Builds the Helm CLI (the same release the charts package links) into bin/helm/<version>/helm
# and prints the binary's path. Cached: an existing binary is not built again.
# Usage: hack/build-helm.sh
# Progress goes to stderr; stdout carries only the binary's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=v3.22.0
out="$root/bin/helm/$version"
if [ -x "$out/helm" ]; then
  echo "$out/helm"
  exit 0
fi
mkdir -p "$out"
echo ">> building helm $version (first use only; a few minutes)" >&2
start=$(date +%s)
# helm's module has no replace directives, so go install pkg@version works. Install into a
# scratch GOBIN and move the binary, so an interrupted build never leaves a half-written helm.
tmp=$(mktemp -d "$out/.gobin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"
mv "$tmp/helm" "$out/helm"
echo ">> built helm in $(( $(date +%s) - start ))s" >&2
echo "$out/helm"

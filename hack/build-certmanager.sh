#!/usr/bin/env bash
# Builds certmanager-controllers (cert-manager's own controllers from the
# github.com/cert-manager/cert-manager module, wired by the tools module hack/tools/certmanager)
# into bin/certmanager/<version>/, puts cert-manager's CRDs from the same module's deploy/crds
# beside it (crds/), and prints that folder.
# Cached: what is already there is not built or copied again.
# Progress goes to stderr; stdout carries only the output folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools/certmanager"
# The version the tools module requires (go.mod is the one place it is written).
version=$(cd "$tools" && go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
out="$root/bin/certmanager/$version"
bin="$out/certmanager-controllers"
mkdir -p "$out"
if [ ! -x "$bin" ]; then
  echo ">> building certmanager-controllers (cert-manager $version; first use only, about 2 minutes)" >&2
  start=$(date +%s)
  (cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo ">> built certmanager-controllers in $(( $(date +%s) - start ))s" >&2
fi
if [ ! -f "$out/crds/cert-manager.io_certificates.yaml" ]; then
  src=$(cd "$tools" && go mod download -json "github.com/cert-manager/cert-manager@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$src" ] || [ ! -d "$src/deploy/crds" ]; then
    echo "cert-manager $version has no deploy/crds in its module (looked in '$src')" >&2
    exit 1
  fi
  rm -rf "$out/crds.tmp"
  mkdir -p "$out/crds.tmp"
  cp "$src"/deploy/crds/*.yaml "$out/crds.tmp/"
  chmod u+w "$out"/crds.tmp/*.yaml
  rm -rf "$out/crds"
  mv "$out/crds.tmp" "$out/crds"
fi
echo "$out"

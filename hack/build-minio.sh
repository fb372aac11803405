#!/usr/bin/env bash
# Builds the MinIO server (an S3-compatible object store) from its Go module into bin/minio and
# prints the binary's path. Tests of internal/objstore run it (internal/testutil/minio); it is a
# test-only tool: MinIO is AGPL-3.0, and the operator never imports it (deps_test.go checks).
# Cached: an existing binary is not built again (remove bin/minio after changing the version).
# Usage: hack/build-minio.sh
# Progress goes to stderr; stdout carries only the binary's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# MinIO tags its releases RELEASE.<time>, which are not semantic versions: the module proxy
# serves the commit as a pseudo-version. This one is the newest it serves (2026-02-12).
version=v0.0.0-20260212201848-7aac2a2c5b7c
release=2026-02-12T20:18:48Z
commit=7aac2a2c5b7c
out="$root/bin/minio"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$root/bin"
echo ">> building minio $version (first use only; about 5 minutes)" >&2
start=$(date +%s)
# minio's module has no replace directives, so go install pkg@version works. Install into a
# scratch GOBIN and move the binary, so an interrupted build never leaves a half-written minio.
tmp=$(mktemp -d "$root/bin/.minio-gobin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The stamps MinIO's own build sets (buildscripts/gen-ldflags.go); without them it reports
# DEVELOPMENT.GOGET. A module zip carries only the pseudo-version's short commit.
ldflags="-s -w"
ldflags+=" -X github.com/minio/minio/cmd.Version=$release"
ldflags+=" -X github.com/minio/minio/cmd.ReleaseTag=DEVELOPMENT.${release//:/-}"
ldflags+=" -X github.com/minio/minio/cmd.CommitID=$commit"
ldflags+=" -X github.com/minio/minio/cmd.ShortCommitID=$commit"
ldflags+=" -X github.com/minio/minio/cmd.CopyrightYear=${release:0:4}"
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "github.com/minio/minio@$version"
mv "$tmp/minio" "$out"
echo ">> built minio in $(( $(date +%s) - start ))s" >&2
echo "$out"

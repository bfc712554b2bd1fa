#!/usr/bin/env bash
# Build the static reconciler binary. The single source of the build command:
# the Dockerfile's build stage, `make build`-style local builds and CI
# (scripts/check-build.sh) all run this script.
#
#   scripts/build.sh [OUT]          # default OUT: bin/reconciler
#   VERSION=v1.2.3 scripts/build.sh # version stamped into `reconciler version`
set -euo pipefail
cd "$(dirname "$0")/.."

version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
out="${1:-bin/reconciler}"

CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${version}" -o "${out}" ./cmd/reconciler

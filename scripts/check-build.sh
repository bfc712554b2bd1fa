#!/usr/bin/env bash
# CI check for the container build, which cannot run docker here:
#  1. the Dockerfile's build stage invokes scripts/build.sh (so the line CI
#     runs is the line the image runs);
#  2. scripts/build.sh builds, and the binary reports the stamped version;
#     a plain `go build` (no stamp) reports the commit it was built from,
#     not "dev" (internal/buildinfo);
#  3. the binary is static (CGO_ENABLED=0, no dynamic loader);
#  4. deploy/prometheus/alerts.yaml passes `promtool check rules` and its
#     unit tests (alerts.test.yaml) when promtool is installed (optional:
#     go test ./deploy/prometheus/ checks the file's structure regardless).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check-build: $*" >&2; exit 1; }

echo "== Dockerfile build stage runs scripts/build.sh"
grep -Eq '^RUN .*scripts/build\.sh' Dockerfile || fail "Dockerfile does not RUN scripts/build.sh"
grep -Eq '^FROM golang:1\.26-bookworm AS build' Dockerfile || fail "Dockerfile build stage is not golang:1.26-bookworm"
if grep -Eq '^RUN .*go build' Dockerfile; then
  fail "Dockerfile runs go build directly: use scripts/build.sh"
fi

echo "== scripts/build.sh"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
VERSION=ci-test scripts/build.sh "$out/reconciler"

echo "== version stamp"
got="$("$out/reconciler" version)"
[ "$got" = "reconciler ci-test" ] || fail "reconciler version printed \"$got\", want \"reconciler ci-test\""

echo "== unstamped build: version from the build info"
# -buildvcs=true: a GOFLAGS=-buildvcs=false in the environment would leave
# no revision to print. Outside a git checkout there is none to check.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  CGO_ENABLED=0 go build -buildvcs=true -o "$out/unstamped" ./cmd/reconciler
  got="$("$out/unstamped" version)"
  rev="$(git rev-parse HEAD | cut -c1-12)"
  [[ "$got" =~ ^reconciler\ devel\ \($rev(,\ dirty)?,\ go[0-9][^\)]*\)$ ]] \
    || fail "an unstamped go build printed \"$got\", want \"reconciler devel ($rev[, dirty], goX)\""
  echo "$got"
else
  echo "not a git checkout: skipping"
fi

echo "== static binary"
go version -m "$out/reconciler" | grep -Eq '^[[:space:]]+build[[:space:]]+CGO_ENABLED=0$' \
  || fail "binary not built with CGO_ENABLED=0: $(go version -m "$out/reconciler" | grep CGO_ENABLED || true)"
if command -v ldd >/dev/null 2>&1; then
  # ldd exits non-zero for a static executable ("not a dynamic executable").
  if ldd "$out/reconciler" >/dev/null 2>&1; then
    fail "binary is dynamically linked: $(ldd "$out/reconciler")"
  fi
fi

if command -v promtool >/dev/null 2>&1; then
  echo "== promtool check rules"
  promtool check rules deploy/prometheus/alerts.yaml
  (cd deploy/prometheus && promtool test rules alerts.test.yaml)
else
  echo "== promtool not installed: skipping (go test ./deploy/prometheus/ checks the rules file)"
fi

echo "check-build: ok"

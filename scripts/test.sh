#!/usr/bin/env bash
# Runs the whole test suite against a real PostgreSQL.
#
# With DATABASE_URL set, the tests use that server (each test in its own
# schema). Without it, this script starts a throwaway cluster from the local
# PostgreSQL binaries (Debian: /usr/lib/postgresql/*/bin) on 127.0.0.1 and a
# private socket directory, and removes it afterwards. As root (CI), initdb
# and postgres run as the postgres user, as they refuse to run as root.
#
# It also provides Stripe's stripe-mock (providers/stripe/stripemock_test.go
# validates every request the provider makes against Stripe's OpenAPI spec):
# installed once per version with `go install` into
# $(go env GOPATH)/tools/stripe-mock@VERSION and exported as STRIPE_MOCK_BIN,
# unless STRIPE_MOCK_BIN is already set. Those tests fail in CI without it.
#
# Extra arguments go to `go test` (default: ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

args=("$@")
[ ${#args[@]} -eq 0 ] && args=(./...)

STRIPE_MOCK_VERSION=v0.203.0
if [ -z "${STRIPE_MOCK_BIN:-}" ]; then
  sm_dir="$(go env GOPATH)/tools/stripe-mock@$STRIPE_MOCK_VERSION"
  STRIPE_MOCK_BIN="$sm_dir/stripe-mock"
  if ! go version -m "$STRIPE_MOCK_BIN" 2>/dev/null | grep -q "stripe-mock[[:space:]]*$STRIPE_MOCK_VERSION"; then
    if ! GOBIN="$sm_dir" GOFLAGS= go install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION" >"/tmp/stripe-mock-install.$$.log" 2>&1; then
      echo "stripe-mock $STRIPE_MOCK_VERSION could not be installed (see /tmp/stripe-mock-install.$$.log): the stripe-mock tests skip, or fail in CI" >&2
      STRIPE_MOCK_BIN=
    else
      rm -f "/tmp/stripe-mock-install.$$.log"
    fi
  fi
fi
if [ -n "$STRIPE_MOCK_BIN" ]; then export STRIPE_MOCK_BIN; fi

if [ -z "${DATABASE_URL:-}" ]; then
  source scripts/pg.sh
  pg_start
  trap pg_stop EXIT
  export DATABASE_URL
fi

go test -count=1 -timeout 20m "${args[@]}"

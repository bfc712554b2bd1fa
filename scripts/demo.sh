#!/usr/bin/env bash
# The job end to end on this machine, with nothing but Go and the local
# PostgreSQL binaries: a throwaway PostgreSQL, the project's fake Stripe with
# a generated account whose webhooks were a tenth missed, then `reconciler
# run` over it, printing the drift report.
# Extra arguments go to `reconciler run` (e.g. --format json, --dry-run).
#
# It seeds fake payments, so it never touches what the caller configured:
# DATABASE_URL, provider keys, chat webhooks and Pushgateway in the shell
# are ignored (the job runs with an environment of its own). To keep the
# demo's data, give it a database meant for it: DEMO_DATABASE_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/reconciler-demo.XXXXXX)
cleanup() {
  [ -n "${fake_pid:-}" ] && kill "$fake_pid" 2>/dev/null && wait "$fake_pid" 2>/dev/null || true
  type pg_stop >/dev/null 2>&1 && pg_stop
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${DEMO_DATABASE_URL:-}" ]; then
  DATABASE_URL=$DEMO_DATABASE_URL
else
  source scripts/pg.sh
  pg_start
fi

go build -o "$work/reconciler" ./cmd/reconciler
go build -o "$work/fakestripe" ./cmd/fakestripe
"$work/fakestripe" -listen 127.0.0.1:0 -payments "${DEMO_PAYMENTS:-2000}" -seed-db "$DATABASE_URL" -ready-file "$work/url" &
fake_pid=$!
for _ in $(seq 1 600); do [ -s "$work/url" ] && break; sleep 0.1; done
[ -s "$work/url" ] || { echo "fake Stripe did not start" >&2; exit 1; }

STRIPE_API_BASE=$(cat "$work/url")
echo "== reconciler run against the fake Stripe at $STRIPE_API_BASE" >&2
env -i PATH="$PATH" HOME="${HOME:-/tmp}" TZ=UTC DATABASE_URL="$DATABASE_URL" STRIPE_API_KEY=sk_test_demo STRIPE_API_BASE="$STRIPE_API_BASE" \
  "$work/reconciler" run --config config.yaml --since "$(date -u -d '4 days ago' +%Y-%m-%dT%H:%M:%SZ)" --format md "$@"

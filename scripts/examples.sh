#!/usr/bin/env bash
# Regenerates docs/examples/: a report of each format (json, csv, md, html)
# of a run over the fake Stripe with every drift kind, and the history page.
#   ./scripts/examples.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/reconciler-examples.XXXXXX)
cleanup() {
  [ -n "${fake_pid:-}" ] && kill "$fake_pid" 2>/dev/null && wait "$fake_pid" 2>/dev/null || true
  type pg_stop >/dev/null 2>&1 && pg_stop
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${DATABASE_URL:-}" ]; then
  source scripts/pg.sh
  pg_start
  export DATABASE_URL
fi
go build -o "$work/reconciler" ./cmd/reconciler
go build -o "$work/fakestripe" ./cmd/fakestripe
"$work/fakestripe" -listen 127.0.0.1:0 -payments 400 -all-kinds -seed-db "$DATABASE_URL" -ready-file "$work/url" &
fake_pid=$!
for _ in $(seq 1 600); do [ -s "$work/url" ] && break; sleep 0.1; done
export STRIPE_API_KEY=sk_test_examples STRIPE_API_BASE
STRIPE_API_BASE=$(cat "$work/url")
out=docs/examples
mkdir -p "$out"
# Three nights, for the history page: a dry run, the repair, a quiet rerun.
"$work/reconciler" run --config config.yaml --dry-run --format json >/dev/null 2>&1
"$work/reconciler" run --config config.yaml --format json > "$work/run.json" 2>/dev/null
"$work/reconciler" run --config config.yaml --format json >/dev/null 2>&1
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["id"])' "$work/run.json")
for f in json csv md html; do
  "$work/reconciler" report --config config.yaml --run "$id" --format "$f" --output "$out/report.$f"
done
"$work/reconciler" report --config config.yaml --history 10 --format html --output "$out/history.html"
echo "wrote $out/report.{json,csv,md,html} and $out/history.html (run $id)" >&2

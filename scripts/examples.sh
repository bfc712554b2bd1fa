#!/usr/bin/env bash
# Regenerates docs/examples/: a report of each format (json, csv, md, html)
# of a run over the fake Stripe with every drift kind, the follow-up report
# of a later run after two items were acknowledged, and the history page.
# The screenshots come from the Chromium layout test, after this script:
#   ./scripts/test.sh ./report/ -run TestChromiumLayout -update
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
# A fourth night after support acknowledged two of the refused items: the
# follow-up report lists them as acknowledged and the rest as still open.
fps=$(python3 -c 'import json,sys; print(" ".join([i["fingerprint"] for i in json.load(open(sys.argv[1]))["runs"][0]["items"] if i["action"] == "refused"][:2]))' "$work/run.json")
# shellcheck disable=SC2086 # two fingerprints, one word each
"$work/reconciler" ack --config config.yaml $fps --by support-desk --note "checked with finance: refunded by hand, ticket 4411" >&2
"$work/reconciler" run --config config.yaml --format json > "$work/run4.json" 2>/dev/null
id4=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["id"])' "$work/run4.json")
for f in md html; do
  "$work/reconciler" report --config config.yaml --run "$id4" --format "$f" --output "$out/report-followup.$f"
done
"$work/reconciler" report --config config.yaml --history 10 --format html --output "$out/history.html"
echo "wrote $out/report.{json,csv,md,html} (run $id), $out/report-followup.{md,html} (run $id4) and $out/history.html" >&2

#!/usr/bin/env bash
# Renders docs/examples/dashboard.png: the Grafana dashboard
# (deploy/grafana/reconciler.json) over real metrics of the real binary.
#
#   ./scripts/dashboard-screenshot.sh            # about 14 minutes
#   DASH_MINUTES=6 ./scripts/dashboard-screenshot.sh [OUT.png]
#
# What runs, all on loopback, all stopped at the end:
#   - a throwaway PostgreSQL (scripts/pg.sh);
#   - scripts/dashboard/feed: a fake Stripe (platform + two connected
#     accounts) and a fake GoCardless whose payments happen in real time,
#     their webhooks delivered to the database with a share lost, 429s,
#     a revoked key and hand-made conflicts on the way (its doc comment);
#   - `reconciler serve` (built from this tree) reconciling every account
#     every 30 s (scripts/dashboard/config.yaml), scraped at /metrics;
#   - Prometheus (Debian's package) scraping serve every 5 s (a divisor of
#     the 30 s schedule and of the bar panels' 30 s interval, so that each
#     bar holds the same runs);
#   - then scripts/dashboard/render.mjs runs every query of the dashboard
#     JSON against Prometheus's HTTP API, as Grafana would with All
#     selected, and writes a page that draws each panel at its gridPos
#     with uPlot (Grafana's own time series library, from npm into a
#     temporary directory, never committed); headless Chromium takes the
#     screenshot.
# Grafana itself is not used (it is not installable here): the picture is
# this project's renderer of the dashboard JSON, not Grafana's.
#
# Needs Go, node and npm, the PostgreSQL server binaries, and the Debian
# packages prometheus and chromium (installed here when run as root with
# apt-get; CI does not run this script).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-docs/examples/dashboard.png}
minutes=${DASH_MINUTES:-12}

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${need_apt[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "missing ${need_apt[*]} (Debian packages): install them first" >&2
    exit 1
  fi
fi
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "node and npm are needed" >&2; exit 1; }

work=$(mktemp -d /tmp/reconciler-dashboard.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  type pg_stop >/dev/null 2>&1 && pg_stop
  [ -n "${DASH_KEEP:-}" ] && { echo "kept $work" >&2; return; }
  rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The chart library, in the background while the story plays.
(cd "$work" && npm install --silent --no-audit --no-fund --prefix "$work/npm" uplot@1.6.32 >"$work/npm.log" 2>&1) &
npm_pid=$!

source scripts/pg.sh
pg_start
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
# -buildvcs=auto: reconciler_build_info shows the revision (a machine may
# set GOFLAGS=-buildvcs=false; a git worktree is not stamped either way).
go build -buildvcs=auto -ldflags "-X main.version=${version}" -o "$work/reconciler" ./cmd/reconciler
go build -o "$work/feed" ./scripts/dashboard/feed

"$work/feed" -db "$DATABASE_URL" -duration "${minutes}m" -env-file "$work/fakes.env" 2>"$work/feed.log" &
pids+=($!)
for _ in $(seq 1 600); do [ -s "$work/fakes.env" ] && break; sleep 0.1; done
[ -s "$work/fakes.env" ] || { cat "$work/feed.log" >&2; echo "the feed did not start" >&2; exit 1; }
# shellcheck disable=SC1091 # written by the feed
source "$work/fakes.env"

serve_port=$(freeport)
env -i PATH="$PATH" HOME="$work" TZ=UTC DATABASE_URL="$DATABASE_URL" \
  STRIPE_API_KEY=sk_test_dashboard STRIPE_API_BASE="$STRIPE_API_BASE" \
  GOCARDLESS_ACCESS_TOKEN=sandbox_dashboard GOCARDLESS_API_BASE="$GOCARDLESS_API_BASE" \
  RECONCILER_HTTP_ADDR="127.0.0.1:$serve_port" \
  "$work/reconciler" serve --config scripts/dashboard/config.yaml 2>"$work/serve.log" &
pids+=($!)

prom_port=$(freeport)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files: [$root/deploy/prometheus/alerts.yaml]
scrape_configs:
  - job_name: reconciler-serve
    static_configs:
      - targets: ['127.0.0.1:$serve_port']
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn 2>"$work/prometheus.log" &
pids+=($!)
for _ in $(seq 1 300); do curl -fsS "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://127.0.0.1:$serve_port/healthz" >/dev/null || { tail -n 20 "$work/serve.log" >&2; echo "serve did not start" >&2; exit 1; }

from=$(date -u +%s)
echo "== the story plays for ${minutes} minutes (serve :$serve_port, Prometheus :$prom_port, $work)" >&2
end=$((from + minutes * 60 + 20))
while [ "$(date -u +%s)" -lt "$end" ]; do
  sleep 30
  runs=$(curl -fsS "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode 'query=sum(reconciler_runs_total)' \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null || echo "?")
  echo "   $(( ($(date -u +%s) - from) / 60 )) min: ${runs} runs finished" >&2
done
to=$(date -u +%s)

wait "$npm_pid" || { cat "$work/npm.log" >&2; echo "npm install uplot failed" >&2; exit 1; }
node scripts/dashboard/render.mjs --dashboard deploy/grafana/reconciler.json \
  --prometheus "http://127.0.0.1:$prom_port" --from "$from" --to "$to" --scrape-interval 5s \
  --uplot "$work/npm/node_modules/uplot/dist" --out "$work/page.html" --size-file "$work/size"
read -r width height <"$work/size"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$work/chromium" \
  --force-device-scale-factor=1 --window-size="$width,$height" --virtual-time-budget=5000 \
  --screenshot="$work/dashboard.png" "file://$work/page.html" 2>"$work/chromium.log" \
  || { cat "$work/chromium.log" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
cp "$work/dashboard.png" "$out"
grep -h '"level":"ERROR"' "$work/serve.log" | tail -n 3 >&2 || true
echo "wrote $out (${width}x${height}) from $(( (to - from) / 60 )) minutes of serve's metrics" >&2

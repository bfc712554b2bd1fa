#!/usr/bin/env bash
# Alternates builds of the binary through the month's benchmark, round by
# round, so that each build meets the same machine (docs/benchmarks.md:
# this machine's noise is larger than most changes).
#
#   go build -o /tmp/new ./cmd/reconciler     # and /tmp/old from another commit
#   scripts/bench-ab.sh OUT ROUNDS PATTERN /tmp/new /tmp/old
#   scripts/bench-ab.sh ab.out 5 'BenchmarkMonth/rerun' /tmp/new /tmp/old
#
# It needs DATABASE_URL (a cluster used for nothing else, with the
# durability users run: source scripts/pg.sh, then
# PG_EXTRA_OPTS="-c fsync=on -c synchronous_commit=on -c full_page_writes=on" pg_start;
# export DATABASE_URL).
# Each line of OUT: round, binary, benchmark, events/s, job CPU µs/event,
# job CPU s, PostgreSQL CPU s, wall s, peak RSS MiB.
#
# A build whose migrations differ needs the benchmark's own test binary
# from the same commit (the benchmark migrates each fresh schema with the
# migrations compiled into it): give it as BINARY:TEST_BINARY, e.g.
#   (git worktree add /tmp/old OLD && cd /tmp/old && go build -o /tmp/old-bin ./cmd/reconciler && go test -c -o /tmp/old-bench.test ./bench)
#   scripts/bench-ab.sh ab.out 3 'BenchmarkMonth/empty$' /tmp/new:/tmp/new-bench.test /tmp/old-bin:/tmp/old-bench.test
set -euo pipefail
if [ $# -lt 4 ] || [ -z "${DATABASE_URL:-}" ]; then
  echo "usage: DATABASE_URL=… $0 OUT ROUNDS PATTERN BINARY... (see the comment at the top)" >&2
  exit 2
fi
out=$1 rounds=$2 pattern=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
test_bin=$(mktemp /tmp/bench-ab.XXXXXX)
trap 'rm -f "$test_bin"' EXIT
(cd "$root" && go test -c -o "$test_bin" ./bench/)
cd "$root/bench"
for r in $(seq 1 "$rounds"); do
  for arg in "$@"; do
    bin=${arg%%:*} tb=$test_bin
    if [ "$arg" != "$bin" ]; then tb=${arg#*:}; fi
    BENCH_BINARY=$bin "$tb" -test.run '^$' -test.bench "$pattern" -test.benchtime 1x 2>&1 |
      grep '^Benchmark' | sed -E 's/ +/ /g' |
      awk -v bin="$arg" -v r="$r" '{
        for (i = 1; i <= NF; i++) {
          if ($i == "events/s") e = $(i-1); if ($i == "cpu_us/event") c = $(i-1)
          if ($i == "job_cpu_s") j = $(i-1); if ($i == "pg_cpu_s") p = $(i-1)
          if ($i == "wall_s") w = $(i-1); if ($i == "peakRSS_MiB") m = $(i-1)
        }
        print r, bin, $1, e, c, j, p, w, m
      }' >>"$out"
  done
done

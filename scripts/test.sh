#!/usr/bin/env bash
# Runs the whole test suite against a real PostgreSQL.
#
# With DATABASE_URL set, the tests use that server (each test in its own
# schema). Without it, this script starts a throwaway cluster from the local
# PostgreSQL binaries (Debian: /usr/lib/postgresql/*/bin) on 127.0.0.1 and a
# private socket directory, and removes it afterwards. As root (CI), initdb
# and postgres run as the postgres user, as they refuse to run as root.
#
# Extra arguments go to `go test` (default: ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

args=("$@")
[ ${#args[@]} -eq 0 ] && args=(./...)

if [ -z "${DATABASE_URL:-}" ]; then
  source scripts/pg.sh
  pg_start
  trap pg_stop EXIT
  export DATABASE_URL
fi

go test -count=1 -timeout 20m "${args[@]}"

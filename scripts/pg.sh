# Sourced by scripts/test.sh and scripts/demo.sh: start and stop a throwaway
# PostgreSQL cluster. pg_start sets DATABASE_URL; pg_stop removes the cluster.

pg_bindir() {
  if command -v pg_ctl >/dev/null 2>&1; then dirname "$(command -v pg_ctl)"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$d" ]; then
    echo "no PostgreSQL binaries found: install them (Debian: apt-get install postgresql) or set DATABASE_URL" >&2
    return 1
  fi
  echo "$d"
}

pg_start() {
  local bin port
  bin=$(pg_bindir)
  PG_DIR=$(mktemp -d /tmp/reconciler-pg.XXXXXX)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))
  PG_AS=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$PG_DIR"
    chmod 700 "$PG_DIR"
    PG_AS=(runuser -u postgres --)
  fi
  "${PG_AS[@]}" "$bin/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --no-sync >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; return 1; }
  "${PG_AS[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=256MB ${PG_EXTRA_OPTS:-}" \
    start >/dev/null || { cat "$PG_DIR/server.log" >&2; return 1; }
  PG_BIN=$bin
  DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "started throwaway PostgreSQL at 127.0.0.1:$port ($PG_DIR)" >&2
}

pg_stop() {
  [ -n "${PG_DIR:-}" ] || return 0
  "${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
}

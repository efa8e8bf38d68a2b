#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A private PostgreSQL cluster for the tests, in a directory of the build tree: its own data,
# socket directory, log and TCP port on 127.0.0.1, so builds tested side by side never meet and
# no system service is touched. The CTest fixture `postgres` (tests/CMakeLists.txt) runs it.
#   tests/pg/cluster.sh start DIR PORT   make DIR (removing what a killed run left there), start
#   tests/pg/cluster.sh restart DIR      stop the server (fast: sessions are ended) and start it
#   tests/pg/cluster.sh stop DIR         stop the server and remove DIR; nothing to do is fine
#   tests/pg/cluster.sh crash DIR WHAT   kill -9 a client backend (WHAT=backend: the postmaster
#                                        then ends every session and recovers from its WAL, as
#                                        after the out-of-memory killer) or the postmaster itself
#                                        (WHAT=postmaster: then started again); returns once the
#                                        server accepts connections again
#   tests/pg/cluster.sh standby PRIMARY DIR PORT
#                                        a streaming standby of the cluster in PRIMARY, in DIR
# PG_FSYNC: on (the default) or off, for a test about something other than the server's own
# durability.
# PG_LISTEN: the addresses to listen on (default 127.0.0.1), for a cluster started inside a
# network namespace of a test's own. Roles: the superuser `postgres`, trusted on the socket and
# from 127.0.0.1/::1 and the server's own subnets (samenet) without a password; `durable_pw`
# with password `secret`, which must give it (scram-sha-256), so a test can check what a wrong
# password does. The server refuses to run as root: as root, everything
# runs as the `postgres` OS user, which owns DIR.
set -euo pipefail

marker=.durable-test-cluster # in DIR: a directory this script made, and so may remove

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

# The newest installed server's programs, unless PG_BINDIR names others.
bindir="${PG_BINDIR:-}"
if [ -z "$bindir" ]; then
  for candidate in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    [ -x "$candidate/initdb" ] && bindir=$candidate && break
  done
fi
if [ -z "$bindir" ] && command -v initdb >/dev/null; then
  bindir=$(dirname "$(command -v initdb)")
fi

# Runs a command as the cluster's owner, from a directory that owner can read.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

# Where the cluster of DIR lives: DIR itself, or (when the postgres user cannot enter DIR, as in
# a build tree under a root-only temporary directory) a directory of its own under /tmp, which
# DIR/home names.
cluster_home() {
  if [ -f "$1/home" ]; then cat "$1/home"; else echo "$1"; fi
}

# Stops a server left running in DIR (at once: its data is thrown away) and removes DIR, and
# its home, which must be ones this script made.
remove_cluster() {
  local dir=$1 home
  [ -e "$dir" ] || return 0
  [ -f "$dir/$marker" ] ||
    die "$dir exists and is not a test cluster made by this script; not touching it"
  home=$(cluster_home "$dir")
  # Immediate: no shutdown checkpoint, which would write out every test database only for it
  # to be deleted (it took 20 to 90 s with fsync on).
  if [ -f "$home/data/postmaster.pid" ]; then
    as_owner "$bindir/pg_ctl" stop -D "$home/data" -m immediate -w -t 60 >/dev/null 2>&1 || true
  fi
  if [ "$home" != "$dir" ] && [ -f "$home/$marker" ]; then rm -rf -- "$home"; fi
  rm -rf -- "$dir"
}

start() {
  local dir=$1 port=$2
  if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1024 ] || [ "$port" -gt 65535 ]; then
    die "PORT must be a number from 1024 to 65535, not '$port'"
  fi
  [ -n "$bindir" ] || die "no PostgreSQL server programs found (install the postgresql package)"
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 ||
      die "running as root, but there is no 'postgres' user to run the server as"
  fi
  remove_cluster "$dir"
  mkdir -p "$dir"
  touch "$dir/$marker"
  local home=$dir
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres:postgres "$dir"
    if ! as_owner test -w "$dir"; then
      home=$(mktemp -d /tmp/durable-pg.XXXXXX)
      touch "$home/$marker"
      chown -R postgres:postgres "$home"
      echo "$home" >"$dir/home"
    fi
  fi
  as_owner test -w "$home" ||
    die "the user running the server cannot write $home (is there a parent directory it cannot enter?)"
  # The socket path, HOME/.s.PGSQL.PORT, must fit in sun_path (107 bytes).
  [ ${#home} -le 90 ] || die "DIR is too long for a socket path ($home); use a shorter build path"

  as_owner "$bindir/initdb" -D "$home/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
    --no-sync --no-instructions >"$home/initdb.log" 2>&1 || {
    cat "$home/initdb.log" >&2
    die "initdb failed"
  }
  # First match wins: durable_pw must give its password; everyone else is trusted.
  cat >"$home/data/pg_hba.conf" <<'EOF'
# TYPE  DATABASE  USER        ADDRESS       METHOD
local   all       durable_pw                scram-sha-256
host    all       durable_pw  127.0.0.1/32  scram-sha-256
host    all       durable_pw  ::1/128       scram-sha-256
local   all       all                       trust
local   replication all                     trust
host    all       all         127.0.0.1/32  trust
host    all       all         ::1/128       trust
host    all       all         samenet       trust
EOF
  cat >>"$home/data/postgresql.conf" <<EOF

# durable's test cluster (tests/pg/cluster.sh)
listen_addresses = '${PG_LISTEN:-127.0.0.1}'
port = $port
unix_socket_directories = '$home'
fsync = ${PG_FSYNC:-on}
password_encryption = 'scram-sha-256'
shared_buffers = 32MB
max_connections = 50
EOF
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$home/data/pg_hba.conf" "$home/data/postgresql.conf"
  fi

  as_owner "$bindir/pg_ctl" start -D "$home/data" -l "$home/server.log" -w -t 60 >/dev/null || {
    cat "$home/server.log" >&2 || true
    die "the server did not start on port $port (see above)"
  }
  as_owner "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$home" -p "$port" -U postgres -d postgres \
    -c "CREATE ROLE durable_pw LOGIN PASSWORD 'secret'" >/dev/null
  echo "cluster.sh: PostgreSQL running in $home on 127.0.0.1:$port"
}

restart() {
  local home
  [ -f "$1/$marker" ] || die "$1 is not a test cluster made by this script"
  home=$(cluster_home "$1")
  as_owner "$bindir/pg_ctl" restart -D "$home/data" -l "$home/server.log" -m fast -w -t 60 \
    >/dev/null || die "the server in $home did not restart"
}

# Returns once the server in HOME accepts connections (within 60 s).
wait_ready() {
  local home=$1 port
  port=$(sed -n 's/^port = //p' "$home/data/postgresql.conf" | tail -n 1)
  for _ in $(seq 600); do
    as_owner "$bindir/pg_isready" -q -h "$home" -p "$port" && return 0
    sleep 0.1
  done
  die "the server in $home does not accept connections"
}

crash() {
  local home pid
  [ -f "$1/$marker" ] || die "$1 is not a test cluster made by this script"
  home=$(cluster_home "$1")
  pid=$(head -n 1 "$home/data/postmaster.pid")
  case "$2" in
    backend)
      local victim
      victim=$(pgrep -P "$pid" -f 'postgres: .*(127[.]0[.]0[.]1|[[]local[]])' | head -n 1 || true)
      [ -n "$victim" ] || die "no client backend to kill in $home"
      kill -9 "$victim"
      sleep 0.5 # the postmaster notices, ends every session and recovers
      ;;
    postmaster)
      local children
      children=$(pgrep -P "$pid" | tr '\n' ' ')
      kill -9 "$pid"
      # Its children end when they see it gone; a new postmaster refuses to start while any of
      # them still holds the shared memory.
      local alive
      for _ in $(seq 600); do
        alive=no
        for child in $children; do kill -0 "$child" 2>/dev/null && alive=yes; done
        [ $alive = yes ] || break
        sleep 0.1
      done
      as_owner "$bindir/pg_ctl" start -D "$home/data" -l "$home/server.log" -w -t 60 >/dev/null ||
        die "the server in $home did not start again after its postmaster was killed"
      ;;
    *) die "crash: WHAT is backend or postmaster, not '$2'" ;;
  esac
  wait_ready "$home"
}

standby() {
  local primary dir=$2 port=$3 home primary_port
  [ -f "$1/$marker" ] || die "$1 is not a test cluster made by this script"
  primary=$(cluster_home "$1")
  remove_cluster "$dir"
  mkdir -p "$dir"
  touch "$dir/$marker"
  home=$dir
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres:postgres "$dir"
    if ! as_owner test -w "$dir"; then
      home=$(mktemp -d /tmp/durable-pg.XXXXXX)
      touch "$home/$marker"
      chown -R postgres:postgres "$home"
      echo "$home" >"$dir/home"
    fi
  fi
  primary_port=$(sed -n 's/^port = //p' "$primary/data/postgresql.conf" | tail -n 1)
  as_owner "$bindir/pg_basebackup" -h "$primary" -p "$primary_port" -U postgres -D "$home/data" \
    -R -X stream --no-sync >"$home/basebackup.log" 2>&1 || {
    cat "$home/basebackup.log" >&2
    die "pg_basebackup from $primary failed"
  }
  printf '\n# a standby (tests/pg/cluster.sh)\nport = %s\nunix_socket_directories = %s\n' \
    "$port" "'$home'" >>"$home/data/postgresql.conf"
  as_owner "$bindir/pg_ctl" start -D "$home/data" -l "$home/server.log" -w -t 60 >/dev/null || {
    cat "$home/server.log" >&2 || true
    die "the standby did not start on port $port (see above)"
  }
  echo "cluster.sh: standby of $primary running in $home on 127.0.0.1:$port"
}

case "${1:-}" in
  crash)
    [ $# -eq 3 ] || die "usage: $0 crash DIR backend|postmaster"
    crash "$(realpath -m -- "$2")" "$3"
    ;;
  standby)
    [ $# -eq 4 ] || die "usage: $0 standby PRIMARY DIR PORT"
    standby "$(realpath -m -- "$2")" "$(realpath -m -- "$3")" "$4"
    ;;
  restart)
    [ $# -eq 2 ] || die "usage: $0 restart DIR"
    restart "$(realpath -m -- "$2")"
    ;;
  start)
    [ $# -eq 3 ] || die "usage: $0 start DIR PORT"
    start "$(realpath -m -- "$2")" "$3"
    ;;
  stop)
    [ $# -eq 2 ] || die "usage: $0 stop DIR"
    remove_cluster "$(realpath -m -- "$2")"
    ;;
  *)
    die "usage: $0 start DIR PORT | restart DIR | stop DIR | crash DIR WHAT | standby PRIMARY DIR PORT"
    ;;
esac

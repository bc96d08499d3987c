#!/usr/bin/env bash
# Start a local PostgreSQL for the store tests (tests marked `postgres`) and print its URL.
#
#   eval "$(sudo .ci/postgres.sh)"     # as root, on a Debian-based machine
#
# Installs PostgreSQL with apt-get when it is missing, starts a cluster as the postgres user
# listening on 127.0.0.1 only, and creates role gpuaudit/gpuaudit (CREATEDB: each test makes its
# own database) and database gpuaudit_test. Safe to re-run. stdout is exactly one line,
#   export GPUAUDIT_TEST_PG_URL=postgresql://gpuaudit:gpuaudit@127.0.0.1:<port>/gpuaudit_test
# and every log line goes to stderr, so that eval sees nothing else.
set -euo pipefail
exec 3>&1 1>&2 # fd 3: the real stdout, kept for the final line
# Every command that may leave a server running gets `3>&-`: a daemon holding fd 3 open keeps
# the caller's `$(...)` waiting for end-of-file forever (CI hung on exactly that).

ROLE=gpuaudit
PASSWORD=gpuaudit
DB=gpuaudit_test

log() { echo "postgres.sh: $*" >&2; }
die() { log "$*"; exit 1; }
as_pg() { runuser -u postgres -- "$@"; }

[ "$(id -u)" -eq 0 ] || die "run me as root (I install packages and switch to the postgres user)"
cd / # the postgres user may not be allowed into the caller's directory

# The newest server's bin directory (a client-only install has psql there, but no initdb).
newest_bindir() {
    { ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null || true; } | sort -V | tail -n 1 \
        | xargs -r dirname
}

if ! command -v initdb >/dev/null && [ -z "$(newest_bindir)" ]; then
    log "PostgreSQL is not installed: installing it with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

if command -v pg_ctlcluster >/dev/null; then
    # Debian's postgresql-common: clusters are managed by pg_ctlcluster, which runs the
    # server as the cluster's owner (postgres), never as root.
    bindir=$(newest_bindir)
    [ -n "$bindir" ] || die "pg_ctlcluster is here but no server under /usr/lib/postgresql/*/bin"
    ver=$(basename "$(dirname "$bindir")")
    if [ ! -d "/etc/postgresql/$ver/main" ]; then
        log "creating cluster $ver/main"
        pg_createcluster "$ver" main >&2
    fi
    # A drop-in (Debian's postgresql.conf includes conf.d/) rather than editing the main file.
    confd=/etc/postgresql/$ver/main/conf.d
    mkdir -p "$confd"
    echo "listen_addresses = '127.0.0.1'  # .ci/postgres.sh: tests only" >"$confd/gpuaudit-ci.conf"
    chown -R postgres: "$confd"
    port=$(pg_conftool -s "$ver" main show port)
    sockdir=$(pg_conftool -s "$ver" main show unix_socket_directories 2>/dev/null \
        | cut -d, -f1 || true)
    sockdir=${sockdir:-/var/run/postgresql}
    if pg_ctlcluster "$ver" main status >/dev/null 2>&1; then
        listening=$(as_pg "$bindir/psql" -h "$sockdir" -p "$port" -XAtqc 'SHOW listen_addresses')
        if [ "$listening" != "127.0.0.1" ]; then
            log "cluster $ver/main listens on '$listening': restarting it on 127.0.0.1 only"
            pg_ctlcluster "$ver" main restart 3>&-
        else
            log "cluster $ver/main is already running on port $port"
        fi
    else
        log "starting cluster $ver/main on port $port"
        pg_ctlcluster "$ver" main start 3>&-
    fi
else
    # No postgresql-common (e.g. a server built from source): a data directory of our own.
    initdb_path=$(command -v initdb || echo "$(newest_bindir)/initdb")
    bindir=$(dirname "$(readlink -f "$initdb_path")")
    data=${PGDATA:-/var/lib/postgresql/gpuaudit-ci}
    port=${PGPORT:-5432}
    sockdir=/var/run/postgresql
    id postgres >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/postgresql postgres
    mkdir -p "$data" "$sockdir"
    chown postgres: "$data" "$sockdir"
    if [ ! -s "$data/PG_VERSION" ]; then
        log "initialising $data"
        as_pg "$bindir/initdb" -D "$data" -U postgres --auth-local=peer \
            --auth-host=scram-sha-256 >&2
    fi
    if ! as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        log "starting the server in $data on port $port"
        as_pg "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $sockdir" start >&2 3>&-
    fi
fi

for _ in $(seq 60); do
    "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 1
done
"$bindir/pg_isready" -h 127.0.0.1 -p "$port" >&2 || die "the server on 127.0.0.1:$port is not ready"

# Idempotent: an existing role gets its password and CREATEDB back, an existing database stays.
as_pg "$bindir/psql" -h "$sockdir" -p "$port" -d postgres -Xq -v ON_ERROR_STOP=1 <<SQL
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    ELSE
        ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    END IF;
END
\$\$;
SELECT 'CREATE DATABASE $DB OWNER $ROLE'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')\gexec
SQL

# Prove the URL works as the tests will use it: TCP, password authentication.
PGPASSWORD=$PASSWORD "$bindir/psql" -h 127.0.0.1 -p "$port" -U "$ROLE" -d "$DB" -XAtqc 'SELECT 1' \
    >/dev/null || die "cannot log in as $ROLE over TCP (check pg_hba.conf allows 127.0.0.1)"
log "ready: database $DB on 127.0.0.1:$port"

echo "export GPUAUDIT_TEST_PG_URL=postgresql://$ROLE:$PASSWORD@127.0.0.1:$port/$DB" >&3

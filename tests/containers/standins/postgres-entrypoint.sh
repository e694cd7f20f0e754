#!/bin/sh
# First start on an empty data directory: initdb with POSTGRES_USER as the superuser
# (password POSTGRES_PASSWORD, scram-sha-256 over the network) and create POSTGRES_DB,
# as the official image does; then run the server as the postgres user.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
install -d -o postgres -g postgres -m 700 "$PGDATA"
install -d -o postgres -g postgres /run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        as_postgres createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
    fi
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
if [ "$1" = postgres ]; then
    shift
    exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"

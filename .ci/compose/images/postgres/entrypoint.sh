#!/bin/sh
# The official image's first start, in short: initdb with the given superuser and password
# (scram-sha-256 over the network), create POSTGRES_DB, then run the server in the foreground.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$database" != postgres ]; then
        pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
        psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres \
            -c "CREATE DATABASE \"$database\"" >/dev/null
        pg_ctl -w stop >/dev/null
    fi
fi
exec postgres -c listen_addresses='*'

#!/bin/sh
# One-shot (docker-compose.yml `temporal-schema`, image temporalio/admin-tools): create Temporal's
# two databases on the PostgreSQL service and bring their schemas to the server image's version.
# Safe to run again: every step leaves an up-to-date database as it is.
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS (the PostgreSQL host) is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD (the PostgreSQL password) is required}"
port="${DB_PORT:-5432}"
schema_dir=/etc/temporal/schema/postgresql/v12

for database in temporal temporal_visibility; do
    case "$database" in
        temporal) versions="$schema_dir/temporal/versioned" ;;
        *) versions="$schema_dir/visibility/versioned" ;;
    esac
    sql() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$port" -u "$POSTGRES_USER" --db "$database" "$@"; }
    sql create
    sql setup-schema -v 0.0
    sql update-schema -d "$versions"
done
echo "temporal-schema: databases temporal and temporal_visibility are at the server's schema"

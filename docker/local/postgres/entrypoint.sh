#!/bin/sh
# First start (an empty data volume): initdb with POSTGRES_USER as the superuser and
# POSTGRES_PASSWORD as its password, password logins over TCP, then POSTGRES_DB; every start: the
# server in the foreground, listening on every address of the container.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        # A private socket in a directory of its own, no TCP: nothing else can connect meanwhile.
        socket="$(mktemp -d)"
        pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=$socket" -w start
        createdb -h "$socket" -U "$user" "$db"
        pg_ctl -D "$PGDATA" -m fast -w stop
        rmdir "$socket"
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'

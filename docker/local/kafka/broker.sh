#!/bin/bash
# Tansu with the listeners the Apache image would take from KAFKA_LISTENERS (its PLAINTEXT entry)
# and KAFKA_ADVERTISED_LISTENERS; CLUSTER_ID is read by Tansu itself.
set -euo pipefail
plaintext() {  # the host:port of the PLAINTEXT listener in a Kafka listener list
    tr ',' '\n' <<< "$1" | sed -n 's|^PLAINTEXT://||p' | head -n 1
}
listen="$(plaintext "${KAFKA_LISTENERS:-PLAINTEXT://:9092}")"
advertised="$(plaintext "${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://localhost:9092}")"
[ "${listen%%:*}" ] || listen="0.0.0.0$listen"
echo "tansu broker on tcp://$listen, advertised as tcp://$advertised (in-memory storage)"
exec tansu broker --listener-url "tcp://$listen" --advertised-listener-url "tcp://$advertised" \
    --storage-engine memory://tansu/

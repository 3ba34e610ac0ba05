#!/bin/bash
# Apache Kafka's kafka-broker-api-versions.sh as the health check uses it: exit 0 once the broker
# at --bootstrap-server answers Kafka requests (a metadata request through `tansu topic list`).
set -euo pipefail
bootstrap=localhost:9092
while [ $# -gt 0 ]; do
    case "$1" in
        --bootstrap-server) bootstrap="$2"; shift 2 ;;
        *) shift ;;
    esac
done
exec tansu topic list --broker "tcp://$bootstrap"

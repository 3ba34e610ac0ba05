#!/bin/bash
# The subset of Apache Kafka's kafka-topics.sh that k8s/base/kafka/create-topics.sh uses, on Tansu:
#   --bootstrap-server B (--list | --describe | --create [--if-not-exists] --topic T --partitions N
#   [--replication-factor R])
set -euo pipefail
bootstrap=localhost:9092 action="" topic="" partitions=1 if_not_exists=false
while [ $# -gt 0 ]; do
    case "$1" in
        --bootstrap-server) bootstrap="$2"; shift 2 ;;
        --list|--describe|--create) action="${1#--}"; shift ;;
        --if-not-exists) if_not_exists=true; shift ;;
        --topic) topic="$2"; shift 2 ;;
        --partitions) partitions="$2"; shift 2 ;;
        --replication-factor) shift 2 ;;  # one broker: always 1
        *) echo "kafka-topics.sh (Tansu stand-in): unsupported argument $1" >&2; exit 2 ;;
    esac
done
broker="tcp://$bootstrap"
case "$action" in
    list|describe) exec tansu topic list --broker "$broker" ;;
    create)
        [ -n "$topic" ] || { echo "kafka-topics.sh: --create needs --topic" >&2; exit 2; }
        if $if_not_exists && tansu topic list --broker "$broker" | grep -qF "\"name\":\"$topic\""; then
            echo "topic $topic exists"
            exit 0
        fi
        tansu topic create "$topic" --partitions "$partitions" --broker "$broker"
        echo "Created topic $topic."
        ;;
    *) echo "kafka-topics.sh (Tansu stand-in): one of --list, --describe, --create" >&2; exit 2 ;;
esac

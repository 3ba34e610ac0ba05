#!/bin/bash
# Create tengen's Kafka topics and converge their settings (idempotent). Runs in the apache/kafka
# image: as the kafka-init service in docker-compose.yml and as the kafka-topics Job on Kubernetes.
# The names, partition counts and compaction match tengen.infra.kafka.default_topics(), which the
# services also call (it creates what is missing, but with broker defaults); this script adds the
# retention and size settings.
#
# Environment: KAFKA_BOOTSTRAP (default kafka:9092), TOPIC_REPLICATION_FACTOR (default 1),
# TOPIC_MIN_INSYNC_REPLICAS (default 1), GAMES_PARTITIONS (default 4).
set -euo pipefail

bootstrap="${KAFKA_BOOTSTRAP:-kafka:9092}"
replication="${TOPIC_REPLICATION_FACTOR:-1}"
min_isr="${TOPIC_MIN_INSYNC_REPLICAS:-1}"
games_partitions="${GAMES_PARTITIONS:-4}"
bin=/opt/kafka/bin

day_ms=86400000
for attempt in $(seq 1 60); do
    if "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --list > /dev/null 2>&1; then
        break
    fi
    echo "waiting for Kafka at $bootstrap ($attempt/60)"
    sleep 5
done

# topic NAME PARTITIONS CONFIGS: create when missing, then set CONFIGS on it (new or existing).
topic() {
    local name="$1" partitions="$2" configs="$3"
    "$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --create --if-not-exists \
        --topic "$name" --partitions "$partitions" --replication-factor "$replication"
    "$bin/kafka-configs.sh" --bootstrap-server "$bootstrap" --alter \
        --entity-type topics --entity-name "$name" --add-config "$configs"
}

# Finished games, key = game id. Two weeks covers a trainer outage; records up to 4 MiB.
topic tengen.games "$games_partitions" \
    "retention.ms=$((14 * day_ms)),max.message.bytes=4194304,min.insync.replicas=$min_isr"
# Records the trainer rejected, kept long enough to read the reason.
topic tengen.games.dlq 1 \
    "retention.ms=$((30 * day_ms)),max.message.bytes=4194304,min.insync.replicas=$min_isr"
# The serving version per model: compacted, so a late worker reads the latest announcement. Small
# segments and a low dirty ratio let compaction run on a topic this small.
topic tengen.models 1 \
    "cleanup.policy=compact,segment.ms=3600000,min.cleanable.dirty.ratio=0.1,min.insync.replicas=$min_isr"
# The services' progress figures, the latest per reporter: compacted like tengen.models.
topic tengen.progress 1 \
    "cleanup.policy=compact,segment.ms=3600000,min.cleanable.dirty.ratio=0.1,min.insync.replicas=$min_isr"
# Candidate exports for gating.
topic tengen.candidates 1 \
    "retention.ms=$((30 * day_ms)),min.insync.replicas=$min_isr"

"$bin/kafka-topics.sh" --bootstrap-server "$bootstrap" --describe

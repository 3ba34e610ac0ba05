#!/bin/bash
# Apache Kafka's kafka-configs.sh, on Tansu: the in-memory broker keeps no topic settings
# (retention, compaction, message size), so this says so and changes nothing.
echo "kafka-configs.sh (Tansu stand-in): topic settings are not kept by this broker: $*"

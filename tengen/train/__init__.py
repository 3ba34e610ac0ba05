"""The trainer's stage: GameRecords into training rows (rows), the durable window (window), ingesting
games into it (ingest), the learner (learner: SGD with the paper's schedule, SWA candidates), the
service that wires them to Kafka (service; `python -m services.trainer` is its shell), and the
whole loop in one process without services (learning_loop)."""

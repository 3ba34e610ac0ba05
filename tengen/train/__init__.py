"""The trainer's stage: the durable window (window), ingesting games into it (ingest: records into
rows with tengen.loop.rows), the learner (learner: SGD with the paper's schedule, SWA candidates)
and the service that wires them to Kafka (service; `python -m services.trainer` is its shell)."""

"""The trainer's stage as a library: ingesting games into the window (ingest) and the learner
(learner: SGD with the paper's schedule, SWA candidates); services.trainer wires them to Kafka."""

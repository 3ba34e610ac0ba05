"""Self-play: one game as a generator over searches, many games batched in one process, and the
worker that plays against Triton and publishes to Kafka."""

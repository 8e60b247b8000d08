"""Kafka's on-disk log: segments, indexes, checkpoints, recovery. No network."""

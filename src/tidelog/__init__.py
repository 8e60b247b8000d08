"""tidelog: a Kafka-compatible commit log in Python."""

__version__ = "0.1.0"

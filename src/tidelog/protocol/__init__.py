"""The Kafka wire protocol, sans-io: frames, request/response codecs, error codes. No sockets, no files."""

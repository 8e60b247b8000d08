"""The Kafka wire protocol, sans-io: frames, request/response codecs, error codes. No sockets; the only files
read are Kafka's JSON message specs (``schema``), as data.

* ``framing``  — size-prefixed framing: ``FrameDecoder`` (bytes in, frame payloads out, size limit) and
  ``ClientConnection`` (request encoding, correlation-id matching, response decoding); no I/O.
* ``codec``    — ``decode_request`` / ``encode_response`` (broker side), ``encode_request`` /
  ``decode_response`` (clients, tools, replication), ``SUPPORTED_VERSIONS`` and friends.
* ``schema`` + ``compiler`` — Kafka's JSON message specs (read at runtime from the installed
  kafka-python distribution, as data) compiled per (api_key, version, request|response) into
  specialised Python functions over plain dicts with snake_case keys.
* ``errors``   — Kafka's error-code table; ``api_keys`` — the ApiKey enum.
* ``exceptions`` — the only exceptions a malformed frame can raise.
"""

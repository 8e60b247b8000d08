"""Reading the classic "consumer" protocol payloads (``ConsumerProtocolSubscription`` / ``Assignment``).

The coordinator never interprets member metadata to assign partitions (client-side assignors do that); it only
reads subscriptions to answer OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC) and assignments for ``tidelog groups
describe``. Both payloads are ``int16 version`` followed by the message body at that version.
"""

from __future__ import annotations

import struct

from tidelog.protocol import codec
from tidelog.protocol.exceptions import ProtocolError

SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3


def _decode(name: str, max_version: int, data: bytes) -> dict | None:
    if len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data, 0)
    if version < 0:
        return None
    try:
        # a newer version starts with the fields of the newest we know (Kafka's compatibility rule)
        return codec.decode_data(name, min(version, max_version), memoryview(data)[2:])
    except (ProtocolError, KeyError, ValueError):
        return None


def subscription_topics(metadata: bytes) -> set[str] | None:
    body = _decode("ConsumerProtocolSubscription", SUBSCRIPTION_MAX_VERSION, bytes(metadata))
    if body is None:
        return None
    return {str(t) for t in body.get("topics") or ()}


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]] | None:
    body = _decode("ConsumerProtocolAssignment", ASSIGNMENT_MAX_VERSION, bytes(assignment))
    if body is None:
        return None
    out: list[tuple[str, int]] = []
    for tp in body.get("assigned_partitions") or ():
        for p in tp.get("partitions") or ():
            out.append((str(tp.get("topic")), int(p)))
    return out

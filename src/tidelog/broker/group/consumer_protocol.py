"""The classic "consumer" embedded protocol as the broker reads and writes it for members using the classic
protocol inside a consumer group (:mod:`classic_in_consumer`, :mod:`migration`): a JoinGroup's
``ConsumerProtocolSubscription`` (topics, owned partitions, rack) and a SyncGroup's ``ConsumerProtocolAssignment``,
each ``int16 version`` then the body at that version (Kafka's ``ConsumerProtocol``)."""

from __future__ import annotations

import struct

from tidelog.broker.group.assignors import TopicPartition
from tidelog.protocol import codec
from tidelog.protocol.exceptions import ProtocolError

ASSIGNMENT_MAX_VERSION = 3
SUBSCRIPTION_MAX_VERSION = 3


class Subscription:
    __slots__ = ("owned", "rack_id", "topics")

    def __init__(self, topics: list[str], owned: set[TopicPartition], rack_id: str | None) -> None:
        self.topics = topics
        self.owned = owned
        self.rack_id = rack_id


def parse_subscription(metadata: bytes) -> Subscription | None:
    """A ``ConsumerProtocolSubscription`` (int16 version, then the body), None when malformed."""
    if len(metadata) < 2:
        return None
    (version,) = struct.unpack_from(">h", metadata, 0)
    if version < 0:
        return None
    try:
        body = codec.decode_data("ConsumerProtocolSubscription", min(version, SUBSCRIPTION_MAX_VERSION),
                                 memoryview(metadata)[2:])
    except (ProtocolError, KeyError, ValueError):
        return None
    owned = {(str(t.get("topic")), int(p)) for t in body.get("owned_partitions") or () for p in t.get("partitions") or ()}
    return Subscription(sorted({str(t) for t in body.get("topics") or ()}), owned, body.get("rack_id"))


def parse_assignment(data: bytes) -> set[TopicPartition] | None:
    """A ``ConsumerProtocolAssignment``'s partitions (empty bytes: none), None when malformed."""
    if not data:
        return set()
    if len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data, 0)
    if version < 0:
        return None
    try:
        body = codec.decode_data("ConsumerProtocolAssignment", min(version, ASSIGNMENT_MAX_VERSION),
                                 memoryview(data)[2:])
    except (ProtocolError, KeyError, ValueError):
        return None
    return {(str(t.get("topic")), int(p)) for t in body.get("assigned_partitions") or () for p in t.get("partitions") or ()}


def protocol_version(metadata: bytes) -> int:
    """The ConsumerProtocol version a member speaks: its first protocol's metadata version (Kafka's
    ``ConsumerProtocol.deserializeVersion``), capped at the newest known."""
    if len(metadata) < 2:
        return 0
    return max(0, min(struct.unpack_from(">h", metadata, 0)[0], ASSIGNMENT_MAX_VERSION))


def encode_assignment(tps: set[TopicPartition], version: int) -> bytes:
    by: dict[str, list[int]] = {}
    for t, p in tps:
        by.setdefault(t, []).append(p)
    body = {"assigned_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by.items())],
            "user_data": None}
    return struct.pack(">h", version) + codec.encode_data("ConsumerProtocolAssignment", version, body)

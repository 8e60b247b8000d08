"""FindCoordinator key type 2 (SHARE, KIP-932): the share coordinator of a share partition, i.e. the leader of the
``__share_group_state`` partition its key hashes to (Kafka's ``ShareCoordinatorService.partitionFor``:
``Utils.abs(key.hashCode()) % partitions`` of the key text ``"groupId:topicId:partition"``).

As Kafka's ``KafkaApis.getCoordinator``: FindCoordinator below v6 answers INVALID_REQUEST for this key type;
CLUSTER_ACTION on the cluster is required (CLUSTER_AUTHORIZATION_FAILED: the key type is used by brokers, not
clients); a missing ``__share_group_state`` is created and COORDINATOR_NOT_AVAILABLE answered until it has a
leader. A key that is not ``groupId:topicId:partition`` (a topic id in Kafka's base64 text, an int partition)
answers INVALID_REQUEST here (a difference: Kafka 3.9's ``getCoordinator`` hashes whatever text it gets; the
4.x check of the key's form was not verified in Kafka's source at hand).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from tidelog.broker.group.share_persister import share_coordinator
from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

NONE = 0
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
MIN_VERSION = 6


def parse_key(key: str) -> ShareKey | None:
    """``"groupId:topicId:partition"`` -> ShareKey (None if malformed). The group id is what precedes the last two
    colons."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    gid, tid_text, p_text = parts
    try:
        raw = base64.urlsafe_b64decode(tid_text + "=" * (-len(tid_text) % 4))
        partition = int(p_text)
    except (ValueError, TypeError):
        return None
    if len(raw) != 16 or partition < 0 or str(partition) != p_text:
        return None
    return ShareKey(gid, raw, partition)


async def find_share_coordinator(broker: Broker, key: str) -> tuple[int, str | None, tuple[int, str, int] | None]:
    """(error, message, (node id, host, port)) of the share coordinator of ``key``."""
    sk = parse_key(key)
    if sk is None:
        return INVALID_REQUEST, f"Invalid share coordinator key {key!r}: expected groupId:topicId:partition.", None
    unavailable = (COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None)
    coord = share_coordinator(broker)
    info = await coord.state_topic()
    if info is None or broker.stopping:
        return unavailable
    p = coord.partition_of(sk)
    if p in coord.owned:
        return NONE, None, (broker.node_id, broker.host, broker.port)
    md = broker.partition_metadata(STATE_TOPIC, p)
    leader = md.get("leader_id", -1) if md else -1
    for b in broker.metadata_brokers() or ():
        if b["node_id"] == leader >= 0:
            return NONE, None, (b["node_id"], b["host"], b["port"])
    return unavailable

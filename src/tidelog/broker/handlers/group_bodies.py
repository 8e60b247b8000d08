"""Typed views of the request bodies the group handlers read (``handlers/group.py``; issue 26, item 1).

As :mod:`tidelog.broker.handlers.bodies`: the codec decodes a request into plain dicts (snake_case keys, nullable
fields None); these TypedDicts name the fields a handler relies on, as Kafka's JSON specs do. Fields a version
range does not carry are ``NotRequired`` (the handlers read them with ``.get`` and a default, guarded by the
version). No run-time cost: a TypedDict is a plain ``dict``; ``_fitted`` hands the decoded body to the handler
typed as the handler declares it.
"""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict

# -- FindCoordinator (10) ------------------------------------------------------------------------------------------


class FindCoordinatorRequest(TypedDict):
    key: NotRequired[str]  # v0-3
    key_type: NotRequired[int]  # v1+
    coordinator_keys: NotRequired[list[str]]  # v4+


# -- JoinGroup (11) / SyncGroup (14) / Heartbeat (12) / LeaveGroup (13) ---------------------------------------------


class JoinGroupRequestProtocol(TypedDict):
    name: str
    metadata: bytes


class JoinGroupRequest(TypedDict):
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: NotRequired[int]  # v1+
    member_id: str
    group_instance_id: NotRequired[str | None]  # v5+
    protocol_type: str
    protocols: list[JoinGroupRequestProtocol]
    reason: NotRequired[str | None]  # v8+


class SyncGroupRequestAssignment(TypedDict):
    member_id: str
    assignment: bytes


class SyncGroupRequest(TypedDict):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: NotRequired[str | None]  # v3+
    protocol_type: NotRequired[str | None]  # v5+
    protocol_name: NotRequired[str | None]  # v5+
    assignments: list[SyncGroupRequestAssignment]


class HeartbeatRequest(TypedDict):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: NotRequired[str | None]  # v3+


class MemberIdentity(TypedDict):
    """LeaveGroupRequest v3+ ``members`` entry."""

    member_id: str
    group_instance_id: str | None
    reason: NotRequired[str | None]  # v5+


class LeaveGroupRequest(TypedDict):
    group_id: str
    member_id: NotRequired[str]  # v0-2
    members: NotRequired[list[MemberIdentity]]  # v3+


# -- OffsetCommit (8) / TxnOffsetCommit (28) -----------------------------------------------------------------------


class OffsetCommitRequestPartition(TypedDict):
    """OffsetCommit's and TxnOffsetCommit's partition entry."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: NotRequired[int]  # OffsetCommit v6+, TxnOffsetCommit v2+
    commit_timestamp: NotRequired[int]  # OffsetCommit v1 only
    committed_metadata: str | None


class OffsetCommitRequestTopic(TypedDict):
    name: NotRequired[str]  # v0-9
    topic_id: NotRequired[uuid.UUID]  # v10+
    partitions: list[OffsetCommitRequestPartition]


class TxnOffsetCommitRequestTopic(TypedDict):
    name: str
    partitions: list[OffsetCommitRequestPartition]


class OffsetCommitRequest(TypedDict):
    group_id: str
    generation_id_or_member_epoch: NotRequired[int]  # v1+
    member_id: NotRequired[str]  # v1+
    group_instance_id: NotRequired[str | None]  # v7+
    retention_time_ms: NotRequired[int]  # v2-4
    topics: list[OffsetCommitRequestTopic]


class TxnOffsetCommitRequest(TypedDict):
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: NotRequired[int]  # v3+
    member_id: NotRequired[str]  # v3+
    group_instance_id: NotRequired[str | None]  # v3+
    topics: list[TxnOffsetCommitRequestTopic]


# -- OffsetFetch (9) / OffsetDelete (47) ---------------------------------------------------------------------------


class OffsetFetchRequestTopic(TypedDict):
    name: NotRequired[str]  # v0-9
    topic_id: NotRequired[uuid.UUID]  # v10+
    partition_indexes: list[int]


class OffsetFetchRequestGroup(TypedDict):
    """OffsetFetchRequest v8+ ``groups`` entry."""

    group_id: str
    member_id: NotRequired[str | None]  # v9+
    member_epoch: NotRequired[int]  # v9+
    topics: list[OffsetFetchRequestTopic] | None


class OffsetFetchRequest(TypedDict):
    group_id: NotRequired[str]  # v0-7
    topics: NotRequired[list[OffsetFetchRequestTopic] | None]  # v0-7 (null: all, v2+)
    groups: NotRequired[list[OffsetFetchRequestGroup]]  # v8+
    require_stable: NotRequired[bool]  # v7+


class OffsetDeleteRequestPartition(TypedDict):
    partition_index: int


class OffsetDeleteRequestTopic(TypedDict):
    name: str
    partitions: list[OffsetDeleteRequestPartition]


class OffsetDeleteRequest(TypedDict):
    group_id: str
    topics: list[OffsetDeleteRequestTopic]


# -- DescribeGroups (15) / ListGroups (16) / DeleteGroups (42) -----------------------------------------------------


class DescribeGroupsRequest(TypedDict):
    groups: list[str]
    include_authorized_operations: NotRequired[bool]  # v3+


class ListGroupsRequest(TypedDict):
    states_filter: NotRequired[list[str]]  # v4+
    types_filter: NotRequired[list[str]]  # v5+


class DeleteGroupsRequest(TypedDict):
    groups_names: list[str]

"""Typed views of the request and response bodies the admin and quota handlers read and build (issue 26, item 1).

The codec decodes a request into plain dicts (snake_case keys, every field of the version present, nullable fields
None); these TypedDicts state the fields a handler relies on, as Kafka's JSON specs name them, so mypy checks the
handlers against the wire layout. They cost nothing at run time: a TypedDict is a plain ``dict``.

Hand-written for the APIs of ``handlers/admin.py``, ``handlers/quotas.py`` and ``cluster/handlers.py`` until the
bodies are generated from the specs (issue 26, "Typed protocol bodies generated from Kafka's JSON specs").
"""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict

# -- CreateTopics (19) ---------------------------------------------------------------------------------------------


class CreatableReplicaAssignment(TypedDict):
    partition_index: int
    broker_ids: list[int]


class CreatableTopicConfig(TypedDict):
    name: str
    value: str | None


class CreatableTopic(TypedDict):
    """CreateTopicsRequest's ``topics`` entry (every version)."""

    name: str
    num_partitions: int
    replication_factor: int
    assignments: list[CreatableReplicaAssignment]
    configs: list[CreatableTopicConfig]


# -- DescribeClientQuotas (48) / AlterClientQuotas (49), KIP-546 -------------------------------------------------------


class EntityData(TypedDict):
    """An entity component (AlterClientQuotas request and response; DescribeClientQuotas response):
    ``entity_name`` None is the default entity."""

    entity_type: str
    entity_name: str | None


class ComponentData(TypedDict):
    """DescribeClientQuotasRequest's filter component: ``match_type`` 0 exact (``match``), 1 default, 2 any
    specified name."""

    entity_type: str
    match_type: int
    match: str | None


class OpData(TypedDict):
    """AlterClientQuotasRequest's op: set ``key`` to ``value``, or remove it."""

    key: str
    value: float
    remove: bool


class AlterEntryData(TypedDict):
    entity: list[EntityData]
    ops: list[OpData]


class AlterEntryResult(TypedDict):
    """AlterClientQuotasResponse's entry."""

    error_code: int
    error_message: str | None
    entity: list[EntityData]


class ValueData(TypedDict):
    key: str
    value: float


class DescribeEntryData(TypedDict):
    """DescribeClientQuotasResponse's entry."""

    entity: list[EntityData]
    values: list[ValueData]


# -- OffsetForLeaderEpoch (23) ------------------------------------------------------------------------------------------


class EpochEndOffset(TypedDict):
    """OffsetForLeaderEpochResponse's partition (v0-v4 fields the broker answers)."""

    error_code: int
    partition: int
    leader_epoch: int
    end_offset: int


class OffsetForLeaderTopicResult(TypedDict):
    topic: str
    partitions: list[EpochEndOffset]


# -- DeleteTopics (20), CreatePartitions (37), DeleteRecords (21) ----------------------------------------------------


class DeletableTopicResult(TypedDict):
    """DeleteTopicsResponse's entry: ``topic_id`` from v6 on (then ``name`` may be None: not disclosed)."""

    name: str | None
    error_code: int
    error_message: str | None
    topic_id: NotRequired[uuid.UUID]


class CreatePartitionsTopicResult(TypedDict):
    name: str
    error_code: int
    error_message: str | None


class DeleteRecordsPartitionResult(TypedDict):
    partition_index: int
    low_watermark: int
    error_code: int


class DeleteRecordsTopicResult(TypedDict):
    name: str
    partitions: list[DeleteRecordsPartitionResult]


# -- DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) -------------------------------------------


class DescribeConfigsResult(TypedDict):
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str
    configs: list[dict[str, object]]


class AlterConfigsResourceResponse(TypedDict):
    error_code: int
    error_message: str | None
    resource_type: int
    resource_name: str


# -- AlterPartitionReassignments (45), ListPartitionReassignments (46), ElectLeaders (43): cluster mode -----------------


class ReassignablePartitionResponse(TypedDict):
    partition_index: int
    error_code: int
    error_message: str | None


class ReassignableTopicResponse(TypedDict):
    name: str
    partitions: list[ReassignablePartitionResponse]


class OngoingPartitionReassignment(TypedDict):
    partition_index: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class OngoingTopicReassignment(TypedDict):
    name: str
    partitions: list[OngoingPartitionReassignment]


class PartitionResult(TypedDict):
    """ElectLeadersResponse's partition result."""

    partition_id: int
    error_code: int
    error_message: str | None


class ReplicaElectionResult(TypedDict):
    topic: str
    partition_result: list[PartitionResult]

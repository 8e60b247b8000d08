"""Core APIs: ApiVersions, Metadata, Produce, Fetch, ListOffsets.

Kafka behaviours reproduced (sources: Kafka ``KafkaApis``, ``ReplicaManager``, ``Partition``, ``UnifiedLog``):

* ApiVersions advertises Produce with min version 0 although v0-2 are rejected (KAFKA-18659: librdkafka
  < 2.11.1 silently disables compression otherwise). An unsupported ApiVersions version is answered by the
  server in v0 (KIP-511).
* Metadata: ``topics`` null = all topics (v0: empty list = all). An unknown topic with
  ``allow_auto_topic_creation`` and ``auto.create.topics.enable`` is created at once with broker defaults and
  returned in the same response (creation is synchronous here, so there is no window in which Kafka would
  answer LEADER_NOT_AVAILABLE). Invalid names: INVALID_TOPIC_EXCEPTION.
* Produce: ``acks`` 0 (no response; on error the connection is closed, as Kafka does so the producer
  notices), 1, -1 (through :class:`DelayedProduce`: completes once the HW covers the batch; with one node at
  once). Other acks: INVALID_REQUIRED_ACKS. ``min.insync.replicas`` above the ISR size with acks=-1:
  NOT_ENOUGH_REPLICAS and nothing is appended. Duplicates (idempotent retries) answer the original offsets.
* Fetch: parsed here, read by the read service (:mod:`tidelog.broker.fetch`, Kafka's ``readFromLog``), the one
  read path for consumers (up to the HW, or the LSO for read_committed) and followers (up to the LEO; without
  replication, i.e. on a single node, answered NOT_LEADER_OR_FOLLOWER); KIP-74: the first batch of the
  response is returned whole even if larger than the limits; long poll through :class:`DelayedFetch`.
  Incremental fetch sessions (KIP-227, :mod:`tidelog.broker.fetch_session`) for consumers: epoch 0 opens one,
  later epochs list only changed partitions and get only partitions with news; sessionless requests (epoch -1)
  as before.
* ListOffsets: -1 latest (HW), -2 earliest (log start), -3 max timestamp, -4 earliest local (= log start),
  -5 latest tiered and -6 earliest pending upload (-1: no tiered storage); by timestamp only offsets below the HW
  are returned. A sentinel sent in a version older than its own (-3: v7, -4: v8, -5: v9, -6: v11) and an unknown
  negative timestamp are UNSUPPORTED_VERSION for that partition, as Kafka's ReplicaManager answers.

All storage/record exceptions become error codes in one place, :func:`tidelog.broker.errors.error_of`.

The core APIs live in one module each (issue 26): ``api_versions``, ``metadata``, ``produce``, ``fetch_handler`` and
``list_offsets``, with what they share in ``core_shared``. Importing this module registers their handlers, and
the names callers, tests and bench/ used from it stay importable here (the very objects of their new homes).
"""

from __future__ import annotations

from tidelog.broker.handlers.api_versions import (  # noqa: F401
    _API_LISTS,
    _supported_versions,
    api_versions,
    api_versions_list,
)
from tidelog.broker.handlers.core_shared import (  # noqa: F401
    _CLUSTER,
    _TOPIC,
    API_VERSIONS,
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    FENCED_LEADER_EPOCH,
    FETCH,
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    LEADER_EPOCH,
    LEADER_NOT_AVAILABLE,
    LIST_OFFSETS,
    METADATA,
    NO_LEADER,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    PRODUCE,
    TOPIC_AUTHORIZATION_FAILED,
    TOPIC_OPERATIONS,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    ZERO_UUID,
    _leader_epoch_error,
    _resolve_topic,
    _uuid_bytes,
)
from tidelog.broker.handlers.fetch_handler import (  # noqa: F401
    _leader_hints,
    _session_error,
    fetch,
)
from tidelog.broker.handlers.list_offsets import (  # noqa: F401
    _SENTINEL_MIN_VERSION,
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    UNSUPPORTED_VERSION,
    _list_offset,
    list_offsets,
)
from tidelog.broker.handlers.metadata import (  # noqa: F401
    _topic_error,
    _topic_metadata,
    metadata,
    partition_entries,
    topic_operations,
)
from tidelog.broker.handlers.produce import (  # noqa: F401
    _MAX_RATIO,
    _NEEDS_HEAVY_SLOT,
    _NOT_VERIFIED,
    _NS_PER_OUTPUT_BYTE,
    _VERIFY_RETRIABLE,
    INLINE_VALIDATION_NS,
    CloseConnection,
    _acked,
    _append_all,
    _append_one,
    _checked_partition,
    _detached,
    _has_transactional_batch,
    _partition_response,
    _produce_error,
    _produce_refused,
    _ProducePartition,
    _record_produce_bytes,
    _replicated,
    _validate_all,
    _validation_cost,
    _verification_error,
    _verify_transactional,
    _wait_for_acks,
    produce,
    produce_one,
    produce_one_body,
    validation_cost_ns,
)

"""Request/response codec: frames <-> (header, dict body), for every API and version in Kafka's specs.

Bodies are plain dicts keyed by Kafka's field names in snake_case (``"PartitionIndex"`` ->
``"partition_index"``); nested structs are dicts, arrays are lists, ``uuid`` fields are ``uuid.UUID``,
``bytes`` fields are ``bytes`` and ``records`` fields are memoryview slices of the frame (zero copy).

Decoders/encoders are generated per (api_key, version, request|response) from Kafka's JSON message
specs (see ``schema`` and ``compiler``) on first use and cached.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.compiler import ZERO_COPY, CompiledMessage, FileRegionLike, RecordsChunks, _uvar_rest
from tidelog.protocol.exceptions import (
    EncodeError,
    InvalidRequestError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from tidelog.protocol.schema import MessageSpec, load_spec, spec_index

__all__ = [
    "ACCEPTED_MIN",
    "ACCEPTED_VERSIONS",
    "GROUP_API_VERSIONS",
    "SUPPORTED_VERSIONS",
    "EncodeError",
    "FileRegionLike",
    "InvalidRequestError",
    "ProtocolError",
    "RecordsChunks",
    "RequestHeader",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "accepted_versions",
    "decode_data",
    "decode_request",
    "decode_response",
    "encode_data",
    "encode_request",
    "encode_response",
    "request_header_version",
    "response_header_version",
]

# --------------------------------------------------------------------------------- version policy

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    # advertised from 0 (KAFKA-18659, librdkafka < 2.11.1); v0-2 rejected. v12 is v11 on the wire; it lets a
    # transactional producer skip AddPartitionsToTxn when transaction.version >= 2 is finalized (KIP-890 part 2,
    # broker/txn/tv2.py: the leader adds the partition); with a lower level a transactional v12 produce is verified
    # as v11 (its partitions must have been added). v13 (KIP-516): topics by TopicId, resolved to the name at the
    # handler's entry (UNKNOWN_TOPIC_ID before any ACL check); responses carry the id. The C fast lane parses v13 as
    # well (the id resolved at its entry, broker/produce_lane.py).
    ApiKey.PRODUCE: (0, 13),
    # v13: topics by id (UNKNOWN_TOPIC_ID); v14: OFFSET_MOVED_TO_TIERED_STORAGE possible (never: no tiered storage);
    # v15: ReplicaState (KIP-903); v16: KIP-951 CurrentLeader + NodeEndpoints on NOT_LEADER / FENCED_LEADER_EPOCH;
    # v17: ReplicaDirectoryId (KIP-853, KRaft: ignored). v18: the fetching replica's HighWatermark (KIP-1166,
    # tagged, default int64 max): accepted and ignored. Kafka reads it only in the KRaft client (faster HWM
    # propagation of the metadata log, KAFKA-14145); its ReplicaManager (partition replication) does not.
    ApiKey.FETCH: (4, 18),
    # v8: timestamp -4 (earliest local) == earliest without tiered storage; v9: -5 (latest tiered) answers offset
    # -1 (no tiered storage); v10 adds TimeoutMs for remote lookups (KIP-1075): nothing is remote, nothing waits;
    # v11: -6 (earliest pending upload, KIP-1023) answers offset -1 as well (Kafka 4.2 without tiered storage)
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),  # v13: a top-level ErrorCode (KIP-1102, REBOOTSTRAP_REQUIRED): always 0 here
    ApiKey.API_VERSIONS: (0, 4),  # v3+: features (broker/features.py); v4: features whose minimum is 0 listed too
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),  # KIP-1142 (v0: KIP-714's ListClientMetricsResources); handlers/configs.py
    ApiKey.DESCRIBE_CLUSTER: (0, 2),  # v1 EndpointType (KIP-919); v2 IncludeFencedBrokers / IsFenced (KIP-1073)
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),  # KIP-966, paginated (broker/handlers/describe_topics.py)
    ApiKey.UPDATE_FEATURES: (0, 2),  # broker/handlers/features.py: only the current levels are valid
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),  # v4+ batched, from brokers (KIP-890 verify_only)
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),  # v2: TransactionVersion of the marker (KIP-890 part 2, broker/txn/tv2.py)
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # ZooKeeper mode: served by the controller; one node too
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),  # ZooKeeper mode: served by the controller; one node: ELECTION_NOT_NEEDED
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # moves a replica between log.dirs (storage/log_move.py)
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),  # v5: IsCordoned (KIP-1066): always false, no log dir is ever cordoned here
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # on SASL listeners before authentication; elsewhere ILLEGAL_SASL_STATE
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # KIP-546 (client quotas, broker/quotas.py)
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_ACLS: (1, 3),  # answered SECURITY_DISABLED without an authorizer, as Kafka
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),  # KIP-714, no receiver: nothing subscribed (handlers/telemetry.py)
    ApiKey.PUSH_TELEMETRY: (0, 0),
}
"""What the broker advertises in ApiVersions (api_key -> (min, max))."""

ACCEPTED_MIN: dict[int, int] = {
    ApiKey.PRODUCE: 3,  # Produce v0-2 (message format v0/v1) are advertised but answered UNSUPPORTED_VERSION
}
"""Per-API minimum actually accepted when it differs from the advertised minimum."""

GROUP_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.FIND_COORDINATOR: (0, 6),  # v4+ batched keys; v5 only adds TRANSACTION_ABORTABLE, v6 share keys (group/share_find.py)
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    # v9: member id + member epoch of KIP-848 groups; v10: topics by TopicId (UNKNOWN_TOPIC_ID per partition for
    # an id no topic has, before topic ACLs); responses carry the id (handlers/group_topic_ids.py)
    ApiKey.OFFSET_COMMIT: (2, 10),
    # v10 as OffsetCommit; an unknown id answers UNKNOWN_TOPIC_ID (offset -1) per partition, and a fetch of "all
    # topics" leaves out offsets of topics that no longer exist (they have no id)
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.DESCRIBE_GROUPS: (0, 6),  # v6: error message; GROUP_ID_NOT_FOUND for unknown and KIP-848 groups
    ApiKey.LIST_GROUPS: (0, 5),  # v5: types filter / group type (classic, consumer)
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848 (broker/group/consumer_group.py)
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),  # KIP-932 share groups, v1 (broker/group/share_group.py)
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    # v2 (Kafka 4.2/4.3): ShareAcquireMode (KIP-1206) and IsRenewAck + the RENEW type (KIP-1222,
    # broker/group/share_renew.py)
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),  # v2: IsRenewAck; the answer carries AcquisitionLockTimeoutMs
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
    # the share coordinator's inter-broker APIs (broker/group/share_coordinator.py, handlers/share_state.py)
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),  # handlers/share_offsets.py
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),  # v3+ member fields (KIP-447), v5 only adds TRANSACTION_ABORTABLE (KIP-890)
}
"""Classic group-protocol APIs: codecs exist; the broker adds these to SUPPORTED_VERSIONS once served."""


def accepted_versions(advertised: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The ranges decode_request accepts for an advertised table (ACCEPTED_MIN applied)."""
    return {k: (max(lo, ACCEPTED_MIN.get(k, lo)), hi) for k, (lo, hi) in advertised.items()}


ACCEPTED_VERSIONS: dict[int, tuple[int, int]] = accepted_versions(SUPPORTED_VERSIONS)
"""Default ranges decode_request accepts."""

# --------------------------------------------------------------------------------- compiled cache

_REQ: dict[tuple[int, int], CompiledMessage] = {}
_RESP: dict[tuple[int, int], CompiledMessage] = {}
_DATA: dict[tuple[str, int], CompiledMessage] = {}


def _spec(api_key: int, kind: str) -> MessageSpec | None:
    return spec_index().get((api_key, kind))


def _compiled(api_key: int, version: int, kind: str) -> CompiledMessage:
    cache = _REQ if kind == "request" else _RESP
    cm = cache.get((api_key, version))
    if cm is None:
        spec = _spec(api_key, kind)
        if spec is None:
            raise KeyError(f"no {kind} spec for api_key {api_key}")
        if version < 0 or version > spec.valid_versions[1]:
            raise KeyError(f"{spec.name} has no version {version}")
        cm = cache[(api_key, version)] = CompiledMessage(spec, version)
    return cm


def known_api_keys() -> list[int]:
    """Every api key that has both a request and a response spec."""
    idx = spec_index()
    return sorted(k for (k, kind) in idx if kind == "request" and (k, "response") in idx)


def spec_versions(api_key: int) -> tuple[int, int]:
    """Kafka's validVersions for an API, as shipped in the spec files."""
    spec = _spec(api_key, "request")
    if spec is None:
        raise KeyError(api_key)
    return spec.valid_versions


def warm(table: Mapping[int, tuple[int, int]] | None = None) -> None:
    """Compile every request decoder and response encoder of ``table`` (default: SUPPORTED+GROUP) now."""
    table = table if table is not None else {**SUPPORTED_VERSIONS, **GROUP_API_VERSIONS}
    for k, (lo, hi) in table.items():
        for v in range(max(lo, ACCEPTED_MIN.get(k, lo)), hi + 1):
            _compiled(k, v, "request")
            _compiled(k, v, "response")


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, else 1 (header v0 is only ControlledShutdown v0)."""
    spec = _spec(api_key, "request")
    if spec is None:
        raise KeyError(api_key)
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if spec.flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible response versions, else 0; ApiVersions responses always use v0 (KIP-511)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    spec = _spec(api_key, "response")
    if spec is None:
        raise KeyError(api_key)
    return 1 if spec.flexible(api_version) else 0


# ------------------------------------------------------------------------------------------ headers


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


_HDR = struct.Struct(">hhi")
_HDR_CID = struct.Struct(">hhih")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_ZERO = b"\x00\x00\x00\x00"
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError)

# Per-(api_key, version) request decode entries: (body decoder, flexible)
_REQ_FAST: dict[tuple[int, int], tuple[Any, bool]] = {}


def _uvar(buf: memoryview, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if not b & 0x80:
        return b, pos + 1
    return _uvar_rest(buf, pos + 1, b)


def _skip_tags(buf: memoryview, pos: int) -> int:
    n, pos = _uvar(buf, pos)
    if n > len(buf) - pos:
        raise InvalidRequestError("tagged field count exceeds the remaining bytes")
    for _ in range(n):
        _, pos = _uvar(buf, pos)
        size, pos = _uvar(buf, pos)
        pos += size
        if pos > len(buf):
            raise InvalidRequestError("tagged field size exceeds the remaining bytes")
    return pos


def _as_view(frame: bytes | bytearray | memoryview) -> memoryview:
    if isinstance(frame, memoryview):
        if frame.format != "B" or frame.ndim != 1:
            return frame.cast("B")
        return frame
    return memoryview(frame)


def decode_request(
    frame: bytes | bytearray | memoryview,
    accepted: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[RequestHeader, dict[str, Any]]:
    """Decode a request payload (the bytes after the 4-byte size prefix) into (header, body).

    ``accepted`` maps api_key -> (min, max) accepted (default ACCEPTED_VERSIONS). Raises only
    UnknownApiKeyError (key not accepted), UnsupportedVersionError (version outside the range) and
    InvalidRequestError (truncated or malformed). Records fields are memoryview slices of ``frame``.
    """
    buf = _as_view(frame)
    try:
        api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    except struct.error:
        raise InvalidRequestError(f"request header truncated ({len(buf)} bytes)") from None
    table = ACCEPTED_VERSIONS if accepted is None else accepted
    rng = table.get(api_key)
    if rng is None:
        raise UnknownApiKeyError(api_key, api_version, correlation_id)
    if not rng[0] <= api_version <= rng[1]:
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    entry = _REQ_FAST.get((api_key, api_version))
    if entry is None:
        try:
            cm = _compiled(api_key, api_version, "request")
        except KeyError:
            raise UnsupportedVersionError(api_key, api_version, correlation_id) from None
        entry = _REQ_FAST[(api_key, api_version)] = (cm.decode, cm.flexible)
    decode, flexible = entry
    try:
        n = _I16.unpack_from(buf, 8)[0]
        pos = 10
        if n < 0:
            client_id = None
        else:
            end = pos + n
            if end > len(buf):
                raise InvalidRequestError("client_id length exceeds the frame")
            client_id = str(buf[pos:end], "utf-8")
            pos = end
        if flexible:
            if buf[pos]:
                pos = _skip_tags(buf, pos)
            else:
                pos += 1
        body, pos = decode(buf, pos)
    except InvalidRequestError as e:
        e.correlation_id = correlation_id
        raise
    except _DECODE_ERRORS as e:
        raise InvalidRequestError(f"malformed request api_key={api_key} v{api_version}: {e}", correlation_id) from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id, 2 if flexible else 1)
    return header, body


def _assemble(parts: list[Any]) -> list[Any]:
    """Join an encoder's parts into chunks; parts[0] is a placeholder for the int32 size."""
    if ZERO_COPY not in parts:
        parts[0] = _I32.pack(sum(map(len, parts)) - 0)
        return [b"".join(parts)]
    out: list[Any] = []
    total = 0
    start = 1
    n = len(parts)
    first = True
    while start <= n:
        try:
            i = parts.index(ZERO_COPY, start)
        except ValueError:
            i = n
        run = b"".join(parts[start:i])
        total += len(run)
        if first:
            out.append(run)  # size gets prepended below
            first = False
        elif run:
            out.append(run)
        if i == n:
            break
        chunks, size = parts[i + 1], parts[i + 2]
        out.extend(chunks)
        total += size
        start = i + 3
    out[0] = _I32.pack(total) + out[0]
    return out


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]) -> list[Any]:
    """Encode a response frame INCLUDING its int32 size prefix, as a list of chunks.

    Chunks are bytes, except where a records field held a RecordsChunks (its chunks are passed through
    untouched, e.g. file regions for os.sendfile) or a bytes-like value of at least 32 KiB (passed
    through without copying). Missing fields take their schema defaults. Raises EncodeError.
    """
    cm = _RESP.get((api_key, api_version)) or _compiled(api_key, api_version, "response")
    if cm.flexible and api_key != ApiKey.API_VERSIONS:
        parts: list[Any] = [b"", _I32.pack(correlation_id), b"\x00"]
    else:
        parts = [b"", _I32.pack(correlation_id)]
    try:
        cm.encode(body, parts)
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError, OverflowError) as e:
        raise EncodeError(f"cannot encode {cm.spec.name} v{api_version}: {e}") from e
    return _assemble(parts)


def _join_chunks(chunks: list[Any]) -> bytes:
    for c in chunks:
        if not isinstance(c, bytes | bytearray | memoryview):
            raise EncodeError("request records must be bytes-like, not file regions")
    return b"".join(chunks)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Encode a whole request frame (int32 size prefix, header v1/v2, body) as one bytes object."""
    cm = _REQ.get((api_key, api_version)) or _compiled(api_key, api_version, "request")
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        cid = _I16.pack(len(raw)) + raw
    parts: list[Any] = [b"", _HDR.pack(api_key, api_version, correlation_id), cid]
    if cm.flexible:
        parts.append(b"\x00")
    try:
        cm.encode(body, parts)
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError, OverflowError) as e:
        raise EncodeError(f"cannot encode {cm.spec.name} v{api_version}: {e}") from e
    return _join_chunks(_assemble(parts))


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """Decode a response payload (after the size prefix) into (correlation_id, body).

    Raises InvalidRequestError for truncated/malformed input.
    """
    cm = _RESP.get((api_key, api_version)) or _compiled(api_key, api_version, "response")
    buf = _as_view(frame)
    correlation_id = None
    try:
        (correlation_id,) = _I32.unpack_from(buf, 0)
        pos = 4
        if cm.flexible and api_key != ApiKey.API_VERSIONS:
            pos = _skip_tags(buf, pos)
        body, pos = cm.decode(buf, pos)
    except InvalidRequestError as e:
        e.correlation_id = correlation_id
        raise
    except _DECODE_ERRORS as e:
        raise InvalidRequestError(f"malformed {cm.spec.name} v{api_version}: {e}", correlation_id) from None
    return correlation_id, body


# -------------------------------------------------------------------------- non-API message types


def _data(name: str, version: int) -> CompiledMessage:
    cm = _DATA.get((name, version))
    if cm is None:
        spec = load_spec(name)
        cm = _DATA[(name, version)] = CompiledMessage(spec, version)
    return cm


def encode_data(name: str, version: int, body: Mapping[str, Any]) -> bytes:
    """Encode a non-API message such as ``ConsumerProtocolSubscription`` (no header, no size prefix)."""
    cm = _data(name, version)
    parts: list[Any] = [b""]
    try:
        cm.encode(body, parts)
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError, OverflowError) as e:
        raise EncodeError(f"cannot encode {name} v{version}: {e}") from e
    return _join_chunks(_assemble(parts))[4:]


def decode_data(name: str, version: int, data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode a non-API message such as ``ConsumerProtocolAssignment``; InvalidRequestError if malformed."""
    cm = _data(name, version)
    try:
        body, _ = cm.decode(_as_view(data), 0)
    except InvalidRequestError:
        raise
    except _DECODE_ERRORS as e:
        raise InvalidRequestError(f"malformed {name} v{version}: {e}") from None
    return body

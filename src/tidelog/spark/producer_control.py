"""The raw producer's control plane (:mod:`tidelog.spark.producer`): connections, metadata, coordinators,
producer ids and transactions.

Everything a task's producer asks a broker besides Produce: Metadata (the partition leaders), FindCoordinator,
InitProducerId (idempotent or transactional, fencing earlier producers of a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn + TxnOffsetCommit and OffsetFetch (the exactly-once sink's batch-id markers), each retried on
coordinator moves, CONCURRENT_TRANSACTIONS and broken connections until ``delivery.timeout.ms``. The data plane
(partitioning, encoding, pipelined Produce requests, retries and epoch bumps) is :class:`tidelog.spark.producer.
RawProducer`, which builds on :class:`ProducerControl`; the atomic sink's driver (:mod:`tidelog.spark.atomic`)
uses the same requests through it.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.client.security import SaslClientError, client_security
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code
from tidelog.spark.fetcher import Connection, _split_hostport
from tidelog.spark.options import OptionError

MAX_PRODUCE_VERSION = 9  # v3+ carry the transactional id; v12 would mean transactions version 2
MIN_PRODUCE_VERSION = 3  # v2 record batches
MAX_METADATA_VERSION = 9
MAX_INIT_PRODUCER_ID_VERSION = 4  # v5+: transactions version 2
MAX_FIND_COORDINATOR_VERSION = 3  # v4+ batch the keys
MAX_ADD_PARTITIONS_VERSION = 3  # v4+ are for brokers
MAX_ADD_OFFSETS_VERSION = 3
MAX_TXN_OFFSET_COMMIT_VERSION = 3
MAX_END_TXN_VERSION = 3
MAX_OFFSET_FETCH_VERSION = 7  # v7: require_stable; v8+ batch the groups
MAX_IN_FLIGHT = 5  # Kafka's limit for an idempotent producer
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_BATCH_BYTES = 1_000_000  # librdkafka's batch.size and message.max.bytes; Kafka's max.message.bytes is 1 MiB
REQUEST_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_TXN_TIMEOUT_MS = 60_000  # librdkafka's transaction.timeout.ms

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
DUPLICATE_SEQUENCE_NUMBER = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
CONCURRENT_TRANSACTIONS = ErrorCode.CONCURRENT_TRANSACTIONS
UNKNOWN_PRODUCER_ID = ErrorCode.UNKNOWN_PRODUCER_ID
SEQUENCE_LOST = (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID)
"""The broker's producer state no longer matches this producer's sequence numbers (records it had were lost, e.g.
by an unclean leader election or a truncation): idempotent, the producer takes a new id and resends; transactional,
the transaction fails (aborted, the task retried)."""
GROUP_ID_NOT_FOUND = ErrorCode.GROUP_ID_NOT_FOUND
UNSTABLE_OFFSET_COMMIT = ErrorCode.UNSTABLE_OFFSET_COMMIT
COORDINATOR_RETRY = (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS)
NETWORK_EXCEPTION = ErrorCode.NETWORK_EXCEPTION
FATAL_CONNECTION_ERRORS = (SaslClientError, ssl.SSLCertVerificationError)
"""Connection errors no retry can cure (wrong credentials, an untrusted certificate): raised at once."""

class DeliveryError(RuntimeError):
    """The broker rejected a record (the task fails with the broker's error)."""


def _name(code: int) -> str:
    return error_for_code(code).name


def _retriable(code: int) -> bool:
    return code == OUT_OF_ORDER_SEQUENCE_NUMBER or error_for_code(code).retriable


def _lower(conf: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in conf.items()}



@dataclass
class _Topic:
    name: str
    index: int
    base: int
    leaders: list[int]
    sticky: int = -1

    @property
    def count(self) -> int:
        return len(self.leaders)

    def next_sticky(self) -> int:
        self.sticky = random.randrange(self.count) if self.sticky < 0 else (self.sticky + 1) % self.count
        return self.sticky




class ProducerControl:
    """Connections, metadata and coordinator requests of one task's producer (see the module docstring)."""

    def __init__(self, conf: Mapping[str, Any], transactional_id: str | None = None) -> None:
        low = _lower(conf)
        self.bootstrap = [_split_hostport(s) for s in (low.get("bootstrap.servers") or "").split(",") if s.strip()]
        if not self.bootstrap:
            raise OptionError("Option 'kafka.bootstrap.servers' must be specified")
        self.security = client_security(conf)
        self.tid = transactional_id
        self.request_timeout_ms = int(low.get("request.timeout.ms", low.get("socket.timeout.ms",
                                                                             DEFAULT_REQUEST_TIMEOUT_MS)))
        self.timeout_s = self.request_timeout_ms / 1000.0
        self.delivery_timeout_s = int(low.get("delivery.timeout.ms", low.get("message.timeout.ms",
                                                                              DEFAULT_DELIVERY_TIMEOUT_MS))) / 1000.0
        self.backoff_s = int(low.get("retry.backoff.ms", 100)) / 1000.0
        self.txn_timeout_ms = int(low.get("transaction.timeout.ms", DEFAULT_TXN_TIMEOUT_MS))
        self.conns: dict[int, Connection] = {}
        """Produce connections (requests pipelined); metadata and coordinator requests use ``control``."""
        self.control: dict[int, Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, _Topic] = {}
        self.slot_tp: list[tuple[_Topic, int]] = []
        self.seq: list[int] = []
        self.producer_id, self.epoch = -1, -1
        self.txn_slots: set[int] = set()
        self.in_txn = False
        self.coordinator: int | None = None

    # -- connections and metadata ----------------------------------------------------------------------

    def close(self) -> None:
        for c in [*self.conns.values(), *self.control.values()]:
            c.close()
        self.conns.clear()
        self.control.clear()

    def _drop(self, node: int, control: bool = False) -> None:
        c = (self.control if control else self.conns).pop(node, None)
        if c is not None:
            c.close()

    def _conn(self, node: int, control: bool = False) -> Connection:
        conns = self.control if control else self.conns
        c = conns.get(node)
        if c is None:
            host, port = self.brokers[node] if node >= 0 else self.bootstrap[-node - 1]
            c = conns[node] = Connection(host, port, self.timeout_s, self.security)
        return c

    def _any(self) -> tuple[int, Connection]:
        """A control connection to some broker: one already open, else a known broker, else a bootstrap
        server."""
        for node, c in self.control.items():
            return node, c
        last: Exception | None = None
        candidates = list(self.brokers) + [-(i + 1) for i in range(len(self.bootstrap))]
        for node in candidates:
            try:
                return node, self._conn(node, control=True)
            except FATAL_CONNECTION_ERRORS:
                raise
            except OSError as exc:
                last = exc
        raise ConnectionError(f"cannot reach any bootstrap server {self.bootstrap}: {last}")

    def _request(self, node: int | None, api: int, highest: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request/response on ``node``'s connection (None: any broker); a broken connection is dropped and
        the error raised."""
        if node is None:
            node, conn = self._any()
        else:
            conn = self._conn(node, control=True)
        try:
            return conn.request(api, conn.version(api, highest), body)
        except FATAL_CONNECTION_ERRORS:
            raise
        except OSError:
            self._drop(node, control=True)
            raise

    def refresh_metadata(self, names: list[str] | None = None) -> dict[str, Any]:
        names = names if names is not None else list(self.topics)
        body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": True,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        md = self._request(None, ApiKey.METADATA, MAX_METADATA_VERSION, body)
        for b in md["brokers"]:
            addr = (b["host"], b["port"])
            if self.brokers.get(b["node_id"]) not in (None, addr):
                self._drop(b["node_id"])
                self._drop(b["node_id"], control=True)
            self.brokers[b["node_id"]] = addr
        out = {}
        for t in md["topics"]:
            out[t["name"]] = t
            known = self.topics.get(t["name"])
            if known is not None and t["error_code"] == NONE:
                for p in t["partitions"]:
                    if p["partition_index"] < known.count:
                        leader = p["leader_id"] if p["error_code"] in (NONE, ErrorCode.REPLICA_NOT_AVAILABLE) else -1
                        known.leaders[p["partition_index"]] = leader if leader in self.brokers else -1
        return out

    def topic(self, name: str) -> _Topic:
        t = self.topics.get(name)
        if t is not None:
            return t
        deadline = time.monotonic() + self.delivery_timeout_s
        attempt = 0
        err: OSError | None
        while True:
            try:
                md = self.refresh_metadata([name]).get(name)
            except FATAL_CONNECTION_ERRORS:
                raise
            except OSError as exc:
                md, err = None, exc
            else:
                err = None
            if md is not None and md["error_code"] == NONE and md["partitions"]:
                parts = sorted(md["partitions"], key=lambda p: p["partition_index"])
                leaders = [p["leader_id"] if p["error_code"] in (NONE, ErrorCode.REPLICA_NOT_AVAILABLE) and p["leader_id"] in self.brokers else -1
                           for p in parts]
                t = _Topic(name, len(self.topics), len(self.slot_tp), leaders)
                self.topics[name] = t
                for p in range(t.count):
                    self.slot_tp.append((t, p))
                    self.seq.append(0)
                return t
            code = md["error_code"] if md is not None else NETWORK_EXCEPTION
            if md is not None and code != NONE and not _retriable(code):
                raise DeliveryError(f"Failed to send records to topic {name}: {_name(code)} (metadata)")
            attempt += 1
            if time.monotonic() > deadline:
                raise DeliveryError(f"Failed to send records to topic {name}: "
                                    f"{_name(code) if err is None else err} (metadata, {attempt} attempts)")
            time.sleep(min(self.backoff_s * 2 ** attempt, 1.0))

    # -- producer id and transactions --------------------------------------------------------------------

    def _find_coordinator(self, key_type: int, key: str, deadline: float | None = None) -> int:
        """The coordinator's node id, FindCoordinator retried until ``deadline`` (monotonic; default
        ``delivery.timeout.ms`` from now): a caller's bound holds while no broker answers."""
        if deadline is None:
            deadline = time.monotonic() + self.delivery_timeout_s
        attempt = 0
        while True:
            try:
                r = self._request(None, ApiKey.FIND_COORDINATOR, MAX_FIND_COORDINATOR_VERSION,
                                  {"key": key, "key_type": key_type})
                code = r["error_code"]
            except FATAL_CONNECTION_ERRORS:
                raise
            except OSError:
                code = NETWORK_EXCEPTION
            if code == NONE:
                node = r["node_id"]
                addr = (r["host"], r["port"])
                if self.brokers.get(node) not in (None, addr):
                    self._drop(node)
                    self._drop(node, control=True)
                self.brokers[node] = addr
                return int(node)
            if not _retriable(code) or time.monotonic() > deadline:
                raise DeliveryError(f"FindCoordinator({key!r}) failed: {_name(code)}")
            attempt += 1
            time.sleep(min(self.backoff_s * 2 ** attempt, 1.0))

    def _coordinated(self, what: str, api: int, highest: int, body: dict[str, Any], codes: Any,
                     key: tuple[int, str] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
        """A request to the transaction coordinator (or, with ``key``, the coordinator of that key), retried on
        coordinator moves and CONCURRENT_TRANSACTIONS; ``codes(response)`` lists its error codes."""
        deadline = time.monotonic() + (self.delivery_timeout_s if timeout_s is None else timeout_s)
        attempt = 0
        node = self.coordinator if key is None else None
        while True:
            if node is None:
                if key is not None:
                    node = self._find_coordinator(*key, deadline=deadline)
                elif self.tid is not None:
                    node = self.coordinator = self._find_coordinator(1, self.tid, deadline=deadline)
                else:  # only transactional requests go without a key: a bug, not a broker error
                    raise RuntimeError(f"{what} needs a transactional producer (no transactional.id)")
            try:
                r = self._request(node, api, highest, body)
                errs = [c for c in codes(r) if c != NONE]
            except FATAL_CONNECTION_ERRORS:
                raise
            except OSError:
                errs = [NETWORK_EXCEPTION]
            if not errs:
                return r
            bad = [c for c in errs if c not in COORDINATOR_RETRY and c != NETWORK_EXCEPTION]
            if bad or time.monotonic() > deadline:
                code = (bad or errs)[0]
                raise DeliveryError(f"{what} failed: {_name(code)} (error code {code})")
            if any(c in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, NETWORK_EXCEPTION) for c in errs):
                node = None
            attempt += 1
            time.sleep(min(self.backoff_s * 2 ** attempt, 1.0))

    def init_producer_id(self) -> None:
        """InitProducerId: an idempotent producer id, or (transactional) the id's, fencing earlier producers."""
        body = {"transactional_id": self.tid, "transaction_timeout_ms": self.txn_timeout_ms if self.tid else -1,
                "producer_id": -1, "producer_epoch": -1}
        if self.tid is None:
            deadline = time.monotonic() + self.delivery_timeout_s
            attempt = 0
            while True:
                try:
                    r = self._request(None, ApiKey.INIT_PRODUCER_ID, MAX_INIT_PRODUCER_ID_VERSION, body)
                    code = r["error_code"]
                except FATAL_CONNECTION_ERRORS:
                    raise
                except OSError:
                    code = NETWORK_EXCEPTION
                if code == NONE:
                    break
                if not _retriable(code) or time.monotonic() > deadline:
                    raise DeliveryError(f"InitProducerId failed: {_name(code)} (error code {code})")
                attempt += 1
                time.sleep(min(self.backoff_s * 2 ** attempt, 1.0))
        else:
            r = self._coordinated(f"InitProducerId({self.tid!r})", ApiKey.INIT_PRODUCER_ID,
                                  MAX_INIT_PRODUCER_ID_VERSION, body, lambda r: [r["error_code"]])
        self.producer_id, self.epoch = int(r["producer_id"]), int(r["producer_epoch"])

    def begin(self) -> None:
        assert self.tid is not None and self.producer_id >= 0
        self.in_txn = True
        self.txn_slots = set()

    def _add_partitions(self, slots: set[int]) -> None:
        by_topic: dict[str, list[int]] = {}
        for s in sorted(slots):
            t, p = self.slot_tp[s]
            by_topic.setdefault(t.name, []).append(p)
        body = {"v3_and_below_transactional_id": self.tid, "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

        def codes(r: dict[str, Any]) -> list[int]:
            return [r.get("error_code", NONE)] + [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"]
                                                  for p in t["results_by_partition"]]

        self._coordinated("AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, MAX_ADD_PARTITIONS_VERSION, body, codes)
        self.txn_slots |= slots

    def send_offsets(self, group: str, topic: str, partition: int, offset: int, metadata: str) -> None:
        """AddOffsetsToTxn + TxnOffsetCommit: ``offset`` becomes ``group``'s offset of ``topic``-``partition``
        when the transaction commits."""
        self._coordinated("AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, MAX_ADD_OFFSETS_VERSION,
                          {"transactional_id": self.tid, "producer_id": self.producer_id,
                           "producer_epoch": self.epoch, "group_id": group}, lambda r: [r["error_code"]])
        body = {"transactional_id": self.tid, "group_id": group, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                           "committed_leader_epoch": -1,
                                                           "committed_metadata": metadata}]}]}
        self._coordinated("TxnOffsetCommit", ApiKey.TXN_OFFSET_COMMIT, MAX_TXN_OFFSET_COMMIT_VERSION, body,
                          lambda r: [p["error_code"] for t in r["topics"] for p in t["partitions"]],
                          key=(0, group))

    def committed_offset(self, group: str, topic: str, partition: int,
                         timeout_s: float | None = None) -> tuple[int, str] | None:
        """``group``'s committed offset and metadata of ``topic``-``partition``, stable offsets only (OffsetFetch
        v7 ``require_stable``: waits out a transaction that is completing), or None; DeliveryError after
        ``timeout_s`` (default ``delivery.timeout.ms``)."""
        body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [partition]}],
                "require_stable": True}

        def codes(r: dict[str, Any]) -> list[int]:
            errs = [r.get("error_code", NONE)] + [p["error_code"] for t in r["topics"] for p in t["partitions"]]
            return [c for c in errs if c != GROUP_ID_NOT_FOUND]

        deadline = time.monotonic() + (self.delivery_timeout_s if timeout_s is None else timeout_s)
        while True:
            try:
                r = self._coordinated("OffsetFetch", ApiKey.OFFSET_FETCH, MAX_OFFSET_FETCH_VERSION, body, codes,
                                      key=(0, group), timeout_s=max(0.0, deadline - time.monotonic()))
                break
            except DeliveryError as exc:
                if "UNSTABLE_OFFSET_COMMIT" in str(exc) and time.monotonic() < deadline:
                    time.sleep(self.backoff_s)
                    continue
                raise
        if r.get("error_code", NONE) == GROUP_ID_NOT_FOUND:
            return None
        for t in r["topics"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition and p["error_code"] == NONE and p["committed_offset"] >= 0:
                    return int(p["committed_offset"]), p["metadata"] or ""
        return None


    def _end_txn(self, commit: bool, timeout_s: float | None) -> None:
        """The EndTxn request itself (:meth:`RawProducer.end_transaction` first settles what is in flight)."""
        self.in_txn = False
        self._coordinated("EndTxn", ApiKey.END_TXN, MAX_END_TXN_VERSION,
                          {"transactional_id": self.tid, "producer_id": self.producer_id,
                           "producer_epoch": self.epoch, "committed": commit}, lambda r: [r["error_code"]],
                          timeout_s=timeout_s)

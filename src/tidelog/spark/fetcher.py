"""The ``tidelog`` source's raw-fetch executor path: Kafka Fetch requests straight into Arrow columns.

For one offset range an executor opens one plain TCP connection to the partition leader (found with a
Metadata request on the bootstrap servers), negotiates versions with ApiVersions and sends Fetch requests
(the highest version both sides support, at most 12; no fetch session) encoded with
:mod:`tidelog.protocol.codec`, each asking for about the bytes the rest of the range holds (:class:`FetchSizer`),
so that a range ending before the partition's end does not make the broker send what follows it. The partition's records bytes are cut into whole v2 batches (a trailing partial
batch is dropped and fetched again), control batches are skipped, and each batch's records are decoded by
the columnar builder (:mod:`tidelog.client.columnar`) straight into Arrow buffers, keeping only the offsets of
the range. No Python object per record: this is several times faster than one confluent-kafka ``Message`` per
record.

read_committed (``kafka.isolation.level``): Fetch with isolation level 1, so the broker answers up to the last
stable offset with the aborted transactions of the range; the batches of aborted transactions are dropped as
Kafka's consumer drops them (``CompletedFetch``): per producer id, from each aborted transaction's first offset
until that producer's ABORT marker. The offsets skipped (aborted data, markers) are gaps, not data loss.

Security: the connections speak TLS and SASL (PLAIN, SCRAM-SHA-256/512) from the same ``kafka.*`` options the
librdkafka path takes (``security.protocol``, ``sasl.mechanism``, ``sasl.username``/``sasl.password`` or
``sasl.jaas.config``, ``ssl.ca.location``, ``ssl.certificate.location``/``ssl.key.location``,
``ssl.keystore.location`` (PKCS12), ``ssl.endpoint.identification.algorithm``), through
:mod:`tidelog.client.security`. Records with headers, or a security setting this client cannot honour
(another SASL mechanism, say), go through confluent-kafka instead: :func:`raw_fetch_allowed` decides.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

from tidelog.client.columnar import new_builder
from tidelog.client.security import (
    ClientConfigError,
    ClientSecurity,
    authenticate_blocking,
    client_security,
)
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code
from tidelog.protocol.exceptions import CorrelationIdMismatchError
from tidelog.protocol.framing import ClientConnection
from tidelog.records.batch import (
    DEFAULT_MAX_DECOMPRESSED,
    ControlRecordType,
    decode_batch,
    parse_control_record,
)
from tidelog.records.compression import decompress
from tidelog.records.header import (
    BASE_OFFSET_FIELD,
    BASE_OFFSET_OFFSET,
    BATCH_LENGTH_FIELD,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LAST_OFFSET_DELTA_FIELD,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    validate_batch,
)
from tidelog.spark.arrow import COLUMNAR_BATCH_ROWS, columns_batch, record_batch
from tidelog.spark.options import report_data_loss
from tidelog.spark.trace import TRACING, trace

CLIENT_ID = "tidelog-spark-executor"
MAX_FETCH_VERSION = 12
MIN_READ_COMMITTED_FETCH_VERSION = 4  # isolation_level and aborted_transactions came with Fetch v4
MAX_METADATA_VERSION = 9  # v10+ address topics by id as well; nothing here needs it
MAX_LIST_OFFSETS_VERSION = 7
FETCH_MAX_BYTES = 64 * 1024 * 1024
PARTITION_MAX_BYTES = 16 * 1024 * 1024
FETCH_WAIT_MS = 500
LEADER_RETRIES = 10
MAX_CHUNK_BYTES = 256 * 1024 * 1024
"""Key + value bytes per Arrow batch at most (binary offsets are int32)."""
PROBE_BYTES = 1024 * 1024
"""The first Fetch of a range asks for at most this many bytes (the range's bytes per offset are not known yet)."""
PROBE_BYTES_PER_OFFSET = 32
"""...and at most this many per offset of the range: a small v2 record (few-byte key and value) takes about that."""

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
RETRY_LEADER = (LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, 3, 9, 74)  # + UNKNOWN_TOPIC_OR_PARTITION,
# REPLICA_NOT_AVAILABLE, FENCED_LEADER_EPOCH: metadata moved



class KafkaFetchError(RuntimeError):
    """An error code from the broker the raw path does not handle (message starts with the Kafka name)."""

    def __init__(self, code: int, what: str) -> None:
        self.code = code
        self.name = error_for_code(code).name
        super().__init__(f"{self.name} (error code {code}): {what}")


def _conf(client: Mapping[str, str], name: str) -> str | None:
    for k, v in client.items():
        if k.lower() == name:
            return str(v)
    return None


def raw_fetch_allowed(client: Mapping[str, str], include_headers: bool, fetch_client: str) -> bool:
    """Whether an executor may read with :func:`read_range_raw` instead of confluent-kafka."""
    if fetch_client != "raw" or include_headers:
        return False
    try:
        client_security(client)
    except ClientConfigError:
        return False  # e.g. GSSAPI or OAUTHBEARER: librdkafka may know how
    return True


def _split_hostport(s: str) -> tuple[str, int]:
    s = s.strip()
    if "://" in s:  # PLAINTEXT://host:port, SASL_SSL://host:port
        s = s.split("://", 1)[1]
    host, _, port = s.rpartition(":")
    return host.strip("[]") or "localhost", int(port or 9092)


class Connection:
    """One blocking connection to one broker with versions negotiated by ApiVersions."""

    def __init__(self, host: str, port: int, timeout_s: float, security: ClientSecurity | None = None) -> None:
        self.timeout_s = timeout_s
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        except OSError:
            pass
        self._conn = ClientConnection(CLIENT_ID)
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            if security is not None and security.ssl_context is not None:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
            body = self.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "tidelog-spark",
                                                         "client_software_version": "1"})
            if body["error_code"] != NONE:
                body = self.request(ApiKey.API_VERSIONS, 0, {})
            if body["error_code"] != NONE:
                raise KafkaFetchError(body["error_code"], f"ApiVersions to {host}:{port}")
            self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
            if security is not None and security.mechanism is not None:
                authenticate_blocking(self.request, security)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def version(self, api_key: int, highest: int) -> int:
        lo, hi = self.versions.get(api_key, (-1, -1))
        v = min(hi, highest)
        if v < lo or v < 0:
            raise KafkaFetchError(35, f"broker supports API {api_key} versions {lo}..{hi}, need <= {highest}")
        return v

    def send(self, api_key: int, version: int, body: Mapping[str, Any]) -> int:
        cid, data = self._conn.send(api_key, version, body)
        self.sock.sendall(data)
        return cid

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        recv_into = self.sock.recv_into
        while got < n:
            k = recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("connection closed by the broker")
            got += k
        return buf

    def receive(self, api_key: int, version: int, cid: int) -> dict[str, Any]:
        """The response to request ``cid``, which must be the oldest in flight (responses come in order)."""
        conn = self._conn
        # the size prefix, then exactly the payload it announced, received straight into one buffer
        while (response := conn.next_response()) is None:
            conn.feed(self._recv_exact(conn.missing))
        if (response.correlation_id, response.api_key, response.api_version) != (cid, api_key, version):
            raise CorrelationIdMismatchError(cid, response.correlation_id)
        return response.body

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.receive(api_key, version, self.send(api_key, version, body))


class ConnectionPool:
    """The broker connections of one Spark task's reads (issue 29): the ranges of a packed partition
    (:mod:`tidelog.spark.packing`) are read one after the other; without a pool each range paid a Metadata request on
    a new bootstrap connection and a new leader connection with its ApiVersions (and TLS and SASL handshakes). With
    one, a topic's leaders come from one Metadata response and each leader's connection passes from one range to the
    next. Bounded: at most one idle connection per broker, all closed by :meth:`close` at the end of the task. A
    connection is only handed back after a clean read (no request in flight); after an error it is closed and the
    partition's leader looked up again."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], tuple[str, int]] = {}
        self.idle: dict[tuple[str, int], Connection] = {}

    def learn(self, topic: str, md: Mapping[str, Any], brokers: Mapping[int, tuple[str, int]]) -> None:
        """Keep the leader of every partition of ``topic`` that a Metadata response names without error."""
        for t in md["topics"]:
            if t["name"] == topic and t["error_code"] == NONE:
                for p in t["partitions"]:
                    if p["error_code"] in (NONE, ErrorCode.REPLICA_NOT_AVAILABLE) and p["leader_id"] in brokers:
                        self.leaders[(topic, p["partition_index"])] = brokers[p["leader_id"]]

    def take(self, addr: tuple[str, int]) -> Connection | None:
        return self.idle.pop(addr, None)

    def give(self, addr: tuple[str, int], conn: Connection) -> None:
        old = self.idle.pop(addr, None)
        if old is not None and old is not conn:
            old.close()
        self.idle[addr] = conn

    def close(self) -> None:
        for conn in self.idle.values():
            conn.close()
        self.idle.clear()
        self.leaders.clear()


class PartitionFetcher:
    """Leader lookup, Fetch and ListOffsets for one topic partition (one leader connection at a time)."""

    def __init__(self, client: Mapping[str, str], topic: str, partition: int, timeout_s: float,
                 read_committed: bool = False, pool: ConnectionPool | None = None) -> None:
        self.bootstrap = [_split_hostport(s) for s in (_conf(client, "bootstrap.servers") or "").split(",")
                          if s.strip()]
        self.topic = topic
        self.partition = partition
        self.timeout_s = timeout_s
        self.conn: Connection | None = None
        self.fetch_version = 0
        mb = _conf(client, "fetch.max.bytes")
        pmb = _conf(client, "max.partition.fetch.bytes")
        self.max_bytes = int(mb) if mb else FETCH_MAX_BYTES
        self.partition_max_bytes = int(pmb) if pmb else PARTITION_MAX_BYTES
        self.check_crcs = (_conf(client, "check.crcs") or "false").strip().lower() == "true"
        self.isolation_level = 1 if read_committed else 0
        self.security = client_security(client)
        self.pool = pool
        self.addr: tuple[str, int] | None = None

    def close(self) -> None:
        """Close the connection (after an error, or at the end without a pool): with a pool, the leader is looked
        up again by the next fetcher of this partition."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.pool is not None:
            self.pool.leaders.pop((self.topic, self.partition), None)

    def release(self) -> None:
        """The end of a clean read (no request in flight): the connection goes back to the pool, if any."""
        if self.pool is not None and self.conn is not None and self.addr is not None:
            self.pool.give(self.addr, self.conn)  # the leader stays known to the pool
            self.conn = None
        elif self.conn is not None:
            self.conn.close()
            self.conn = None

    def _leader(self) -> tuple[str, int]:
        """The leader's host and port: from the pool's last Metadata response for the topic, else from a Metadata
        request to the first bootstrap server that answers (with a pool, its answer for every partition of the
        topic is kept, and the bootstrap connection too when it is the leader's)."""
        pool = self.pool
        if pool is not None and (self.topic, self.partition) in pool.leaders:
            return pool.leaders[(self.topic, self.partition)]
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                c = Connection(host, port, self.timeout_s, self.security)
            except OSError as exc:
                last = exc
                continue
            try:
                v = c.version(ApiKey.METADATA, MAX_METADATA_VERSION)
                body: dict[str, Any] = {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False}
                md = c.request(ApiKey.METADATA, v, body)
            except OSError as exc:
                c.close()
                last = exc
                continue
            except BaseException:
                c.close()
                raise
            brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
            if pool is not None:
                pool.learn(self.topic, md, brokers)
                if (host, port) in pool.leaders.values():
                    pool.give((host, port), c)  # the bootstrap server leads partitions: keep its connection
                else:
                    c.close()
            else:
                c.close()
            for t in md["topics"]:
                if t["name"] != self.topic:
                    continue
                if t["error_code"] != NONE:
                    raise _Retry(KafkaFetchError(t["error_code"], f"Metadata for topic {self.topic}"))
                for p in t["partitions"]:
                    if p["partition_index"] == self.partition:
                        if p["error_code"] not in (NONE, ErrorCode.REPLICA_NOT_AVAILABLE) or p["leader_id"] not in brokers:
                            raise _Retry(KafkaFetchError(p["error_code"] or LEADER_NOT_AVAILABLE,
                                                         f"Metadata for {self.topic}-{self.partition}"))
                        return brokers[p["leader_id"]]
            raise _Retry(KafkaFetchError(3, f"Metadata for {self.topic}-{self.partition}"))
        raise ConnectionError(f"cannot reach any bootstrap server {self.bootstrap}: {last}")

    def connect(self) -> Connection:
        """The leader connection, looking the leader up (retrying a bounded number of times) when needed."""
        if self.conn is not None:
            return self.conn
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                host, port = self._leader()
                self.addr = (host, port)
                pooled = self.pool.take(self.addr) if self.pool is not None else None
                self.conn = pooled or Connection(host, port, self.timeout_s, self.security)
                self.fetch_version = self.conn.version(ApiKey.FETCH, MAX_FETCH_VERSION)
                if self.isolation_level and self.fetch_version < MIN_READ_COMMITTED_FETCH_VERSION:
                    raise KafkaFetchError(35, f"read_committed needs Fetch v{MIN_READ_COMMITTED_FETCH_VERSION}+, "
                                              f"the broker supports up to v{self.fetch_version}")
                return self.conn
            except _Retry as r:
                attempt += 1
                if attempt >= LEADER_RETRIES or time.monotonic() > deadline:
                    raise r.error from None
                time.sleep(min(0.05 * 2 ** attempt, 1.0))

    def send_fetch(self, offset: int, wait_ms: int, max_bytes: int | None = None) -> int:
        """Send a Fetch from ``offset`` asking for at most ``max_bytes`` (default ``partition_max_bytes``)."""
        conn = self.connect()
        body = {
            "replica_id": -1, "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": self.max_bytes,
            "isolation_level": self.isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": self.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": self.partition_max_bytes if max_bytes is None else max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        return conn.send(ApiKey.FETCH, self.fetch_version, body)

    def receive_fetch(self, cid: int) -> dict[str, Any]:
        """The partition's part of the Fetch response (error_code, high_watermark, log_start_offset, records)."""
        assert self.conn is not None
        body = self.conn.receive(ApiKey.FETCH, self.fetch_version, cid)
        if body.get("error_code", NONE) != NONE:
            raise KafkaFetchError(body["error_code"], f"Fetch {self.topic}-{self.partition}")
        for t in body["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == self.partition:
                    return p
        raise KafkaFetchError(3, f"Fetch response without {self.topic}-{self.partition}")

    def watermarks(self) -> tuple[int, int]:
        """(log start offset, high watermark) by ListOffsets to the leader."""
        conn = self.connect()
        v = conn.version(ApiKey.LIST_OFFSETS, MAX_LIST_OFFSETS_VERSION)
        out = []
        for ts in (-2, -1):
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": self.partition, "current_leader_epoch": -1, "timestamp": ts,
                 "max_num_offsets": 1}]}]}
            res = conn.request(ApiKey.LIST_OFFSETS, v, body)
            p = res["topics"][0]["partitions"][0]
            if p["error_code"] != NONE:
                raise KafkaFetchError(p["error_code"], f"ListOffsets {self.topic}-{self.partition}")
            out.append(int(p["offset"]) if v >= 1 else int(p["old_style_offsets"][0]))
        return out[0], out[1]


class AbortedTxns:
    """Kafka consumer's ``CompletedFetch`` bookkeeping of one read_committed Fetch response: the response's
    aborted transactions by first offset, and the producer ids whose aborted transaction is in progress at the
    batch being read."""

    __slots__ = ("_next", "_pending", "producers")

    def __init__(self, aborted: Any) -> None:
        self._pending = sorted((int(a["first_offset"]), int(a["producer_id"])) for a in aborted)
        self._next = 0
        self.producers: set[int] = set()

    def skip(self, view: memoryview, h: BatchHeader) -> bool:
        """Whether the batch ``h`` (``view``) is dropped: a batch of an aborted transaction, or a control batch.
        Call for every batch of the response in order."""
        pid = h.producer_id
        control = h.attributes & CONTROL_MASK
        if pid >= 0:
            # the aborted transactions begun by this batch's last offset: their producers are now aborting
            pending = self._pending
            last = h.base_offset + h.last_offset_delta
            while self._next < len(pending) and pending[self._next][0] <= last:
                self.producers.add(pending[self._next][1])
                self._next += 1
            if control:
                if pid in self.producers and is_abort_marker(view):
                    self.producers.discard(pid)
            elif h.attributes & TRANSACTIONAL_MASK and pid in self.producers:
                return True
        return bool(control)


def is_abort_marker(view: memoryview) -> bool:
    """Whether a control batch holds an ABORT marker (Kafka's ``containsAbortMarker``: its first record)."""
    _, recs = decode_batch(view, verify_crc=False)
    return bool(recs) and parse_control_record(recs[0]).type == ControlRecordType.ABORT


class FetchSizer:
    """How many bytes a Fetch for the rest of one offset range asks for (``partition_max_bytes``).

    A Fetch has no end offset: the broker returns whole batches from the fetch offset until the byte limit. Asking
    every time for the configured ``max.partition.fetch.bytes`` (16 MiB) made a range read up to 16 MiB past its
    end, which the reader then dropped: with Spark partitions smaller than that (``minPartitions``,
    ``maxRecordsPerPartition``, a topic being appended to) the broker sent many times the range's bytes. The size
    is therefore the range's remaining offsets times the bytes per offset seen so far in this range's responses,
    plus one average batch (the batch holding the range's last offset extends past it), capped by
    ``partition_max_bytes``. The first Fetch knows nothing yet and asks for at most :data:`PROBE_BYTES` and
    :data:`PROBE_BYTES_PER_OFFSET` per offset; a too small limit costs a round trip, never records: the broker
    returns the first batch whole whatever the limit (KIP-74)."""

    __slots__ = ("batches", "bytes", "end", "max_bytes", "offsets")

    def __init__(self, end: int, max_bytes: int) -> None:
        self.end = end
        self.max_bytes = max_bytes
        self.bytes = 0
        self.offsets = 0
        self.batches = 0

    def observe(self, batches: list[tuple[memoryview, int, int]]) -> None:
        """Learn from the whole batches of a response (offset spans, so compaction gaps count as offsets)."""
        for view, base, last in batches:
            self.bytes += len(view)
            self.offsets += last - base + 1
            self.batches += 1

    def bytes_for(self, offset: int) -> int:
        """The ``partition_max_bytes`` of a Fetch from ``offset`` for the offsets [offset, end)."""
        remaining = max(1, self.end - offset)
        if not self.offsets:
            want = min(PROBE_BYTES, remaining * PROBE_BYTES_PER_OFFSET)
        else:
            want = -(-remaining * self.bytes // self.offsets) + self.bytes // self.batches
        return max(RECORD_BATCH_OVERHEAD, min(self.max_bytes, want))


class _Retry(Exception):
    def __init__(self, error: KafkaFetchError) -> None:
        super().__init__(str(error))
        self.error = error


def whole_batches(records: Any) -> list[tuple[memoryview, int, int]]:
    """``(batch view, base offset, last offset)`` of each whole batch of a Fetch response's records bytes
    (a trailing partial batch is left out)."""
    if not records:
        return []
    view = records if isinstance(records, memoryview) else memoryview(records)
    n = len(view)
    pos = 0
    out = []
    unpack_len = BATCH_LENGTH_FIELD.unpack_from
    unpack_base = BASE_OFFSET_FIELD.unpack_from
    unpack_delta = LAST_OFFSET_DELTA_FIELD.unpack_from
    while n - pos >= RECORD_BATCH_OVERHEAD:
        (length,) = unpack_len(view, pos + LENGTH_OFFSET)
        end = pos + LOG_OVERHEAD + length
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or end > n:
            break
        (base,) = unpack_base(view, pos + BASE_OFFSET_OFFSET)
        (last_delta,) = unpack_delta(view, pos + LAST_OFFSET_DELTA_OFFSET)
        out.append((view[pos:end], base, base + last_delta))
        pos = end
    return out


def read_range_raw(
    client: Mapping[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    read_committed: bool = False,
    pool: ConnectionPool | None = None,
) -> Iterator[Any]:
    """Yield Arrow batches with the records [start, end) of one partition over raw Fetch requests (with
    ``read_committed``, only the committed ones: see the module docstring). With ``pool``, the connection comes
    from it and goes back to it after a clean read (:class:`ConnectionPool`)."""
    if end <= start:
        return
    tp_name = f"{topic}-{partition}"
    timeout_s = poll_timeout_ms / 1000.0
    f = PartitionFetcher(client, topic, partition, timeout_s, read_committed, pool)
    clean = False
    builder = new_builder()
    expected = start
    leader_retries = 0
    deadline = time.monotonic() + timeout_s
    pending: int | None = None  # correlation id of a Fetch in flight for ``expected``
    sizer = FetchSizer(end, f.partition_max_bytes)
    try:
        while expected < end:
            try:
                cid = pending if pending is not None else f.send_fetch(expected, FETCH_WAIT_MS,
                                                                       sizer.bytes_for(expected))
                pending = None
                p = f.receive_fetch(cid)
            except (OSError, ConnectionError) as exc:
                # a broken connection: reconnect (bounded like the leader retries)
                f.close()
                pending = None
                leader_retries += 1
                if leader_retries > LEADER_RETRIES or time.monotonic() > deadline:
                    raise ConnectionError(f"Fetch {tp_name} at offset {expected} failed: {exc}") from exc
                time.sleep(min(0.05 * 2 ** leader_retries, 1.0))
                continue
            code = p["error_code"]
            if code != NONE:
                if code in RETRY_LEADER:
                    f.close()
                    leader_retries += 1
                    if leader_retries > LEADER_RETRIES or time.monotonic() > deadline:
                        raise KafkaFetchError(code, f"Fetch {tp_name} at offset {expected}")
                    time.sleep(min(0.05 * 2 ** leader_retries, 1.0))
                    continue
                if code == OFFSET_OUT_OF_RANGE:
                    lo, hi = f.watermarks()
                    report_data_loss(
                        fail_on_data_loss,
                        f"Cannot fetch offset {expected} (TopicPartition: {tp_name}); the partition holds "
                        f"offsets [{lo}, {hi}).",
                    )
                    if lo >= end or lo <= expected:
                        break
                    expected = lo
                    continue
                raise KafkaFetchError(code, f"Fetch {tp_name} at offset {expected}")
            leader_retries = 0
            batches = whole_batches(p["records"])
            if TRACING:
                trace(f"fetch {expected}: {len(p['records'] or b'')} B")
            if not batches:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Cannot fetch record for offset {expected} in {poll_timeout_ms} milliseconds "
                        f"(TopicPartition: {tp_name})"
                    )
                continue  # the high watermark may still move up to ``end``
            deadline = time.monotonic() + timeout_s
            sizer.observe(batches)
            first_base = batches[0][1]
            next_offset = batches[-1][2] + 1
            if next_offset < end:
                # pipelining: the broker reads the next chunk while this one is decoded
                pending = f.send_fetch(next_offset, FETCH_WAIT_MS, sizer.bytes_for(next_offset))
            if first_base > expected:
                # a gap: compaction or transaction markers (fine) or records deleted under us (data loss)
                lso = p.get("log_start_offset", -1)
                if lso is not None and lso > expected:
                    report_data_loss(
                        fail_on_data_loss,
                        f"Cannot fetch offset {expected} (TopicPartition: {tp_name}); the earliest available "
                        f"offset is now {lso}.",
                    )
            aborted = AbortedTxns(p["aborted_transactions"]) if read_committed and p.get("aborted_transactions") \
                else None
            for view, base, last in batches:
                if aborted is not None:
                    # every batch in order, also those before ``expected``: an ABORT marker ends its producer's run
                    h = BatchHeader.parse(view)
                    if aborted.skip(view, h) or last < expected or base >= end:
                        continue
                else:
                    if last < expected or base >= end:
                        continue
                    h = BatchHeader.parse(view)
                    if h.attributes & CONTROL_MASK:
                        continue
                if f.check_crcs:
                    h = validate_batch(view)
                else:
                    h.check_sizes(len(view))
                payload = view[RECORD_BATCH_OVERHEAD: h.size]
                codec = h.attributes & COMPRESSION_MASK
                data = decompress(codec, payload, DEFAULT_MAX_DECOMPRESSED) if codec else payload
                lat = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
                ts_type = 1 if lat is not None else 0
                filtering = base < expected or last >= end
                if builder.rows and builder.nbytes + len(data) > MAX_CHUNK_BYTES:
                    yield columns_batch(topic, partition, builder.finish())
                added = builder.add(data, h.records_count, h.base_offset, h.base_timestamp, lat, ts_type,
                                    filtering, expected, end, None, None)
                if added < 0:
                    if builder.rows:
                        yield columns_batch(topic, partition, builder.finish())
                    _, recs = decode_batch(view, verify_crc=False)  # raises the exact RecordError
                    recs = [r for r in recs if expected <= r.offset < end]
                    if recs:
                        yield record_batch(topic, partition, [r.key for r in recs], [r.value for r in recs],
                                           [r.offset for r in recs], [r.timestamp for r in recs], ts_type, None)
                elif builder.rows >= COLUMNAR_BATCH_ROWS:
                    yield columns_batch(topic, partition, builder.finish())
            expected = max(expected, next_offset)
        clean = pending is None  # nothing in flight: the connection can serve the next range
        if builder.rows:
            yield columns_batch(topic, partition, builder.finish())
    finally:
        if clean:
            f.release()
        else:
            f.close()

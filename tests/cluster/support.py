"""Helpers shared by the cluster tests (``from support import ...``: tests/conftest.py puts tests/cluster on
``sys.path``). Plain functions, no fixtures: the fixtures stay in tests/cluster/conftest.py.

* ``until``: poll a condition with a deadline; ``kazoo``, ``state``, ``topic_assignment``: ZooKeeper reads;
* ``start_zookeeper``, ``ZooKeeper``, ``Cluster``: conftest.py's classes, for tests that start their own;
* ``create_topic``, ``all_up``, ``request``, ``replica_dirs``: a topic led with a full ISR, every broker up, a raw
  request, a broker's partition directories;
* ``Ledger`` / ``Load`` and ``read_all``: acknowledged records, a producer under load, reading everything back,
  and the checker (0 lost, 0 duplicates, acked offsets hold their values, send order kept);
* ``log_bytes``, ``converged``: replicas byte-identical up to the high watermark.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


def _conftest() -> Any:
    """tests/cluster/conftest.py as a module (loaded once; pytest's own copy of it is not importable)."""
    name = "tidelog_test_cluster_conftest"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("conftest.py"))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


ZK_SERVER: Path = _conftest().ZK_SERVER
ZooKeeper: Any = _conftest().ZooKeeper
Cluster: Any = _conftest().Cluster
#: ``yield from zk_cluster(overrides, per_broker, prefix)`` in a fixture: conftest.py's fresh ZooKeeper and 3 brokers
zk_cluster: Any = _conftest()._cluster


def until(what: str, fn: Callable[[], Any], timeout: float = 90.0, interval: float = 0.2) -> Any:
    """Poll ``fn()`` until it returns something truthy and return that (a condition with a deadline, not a fixed
    sleep); exceptions count as "not yet" (brokers and ZooKeeper coming and going)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(interval)  # polling interval of the condition
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


# -- ZooKeeper ----------------------------------------------------------------------------------------------------


def start_zookeeper(root: Path) -> Any:
    """A started standalone ZooKeeper in ``root`` (conftest.py's ``ZooKeeper``); skips when it is not installed."""
    if not ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip("ZooKeeper is not installed")
    zk = ZooKeeper(root)
    zk.start()
    return zk


@contextmanager
def kazoo(connect: str) -> Iterator[Any]:
    """A connected kazoo client (``connect`` may end in a chroot), stopped and closed at the end."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def state(zk: Any, topic: str, p: int = 0) -> Any:
    """The partition state znode (leader, leader epoch, ISR) of ``topic``-``p``."""
    from tidelog.cluster import zkdata as zd

    data, stat = zk.get(zd.state_path(topic, p))
    return zd.decode_state(data, stat.version)


def topic_assignment(zk: Any, topic: str) -> Any:
    """The topic znode (replica assignment, adding/removing replicas, topic id)."""
    from tidelog.cluster import zkdata as zd

    return zd.decode_topic(zk.get(zd.topic_path(topic))[0])


# -- brokers and topics -------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 3, *,
                 assignment: list[list[int]] | None = None, timeout: float = 60.0) -> None:
    """Create ``topic`` (``partitions`` x ``rf``, or the manual ``assignment``) and wait until metadata shows every
    partition with a leader and all its replicas in the ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its future completes
    if assignment is None:
        new = NewTopic(topic, partitions, rf)
        sizes = [rf] * partitions
    else:
        new = NewTopic(topic, len(assignment), replica_assignment=assignment)
        sizes = [len(a) for a in assignment]
    admin.create_topics([new])[topic].result(30)

    def led() -> bool:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        return t is not None and t.error is None and len(t.partitions) == len(sizes) and all(
            (q := t.partitions.get(p)) is not None and q.leader >= 0 and len(q.isrs) == n  # a single node is id 0
            for p, n in enumerate(sizes))

    until(f"{topic} led with a full ISR", led, timeout=timeout)


def all_up(cluster: Any) -> None:
    """Start every broker that is down and wait until all are registered."""
    for b in cluster.brokers.values():
        if not b.running:
            b.start()
    n = len(cluster.brokers)
    cluster.wait_for(f"{n} registered brokers", lambda md: len(md.brokers) == n)


def request(broker: Any, api_key: int, version: int, body: dict, *, timeout: float = 60.0,
            client_id: str = "tidelog-tests") -> dict:
    """One request to ``broker`` through the project's codec (``tidelog.cluster.peer.Peer``); the decoded body."""
    from tidelog.cluster.peer import Peer

    async def go() -> dict:
        peer = Peer("127.0.0.1", broker.port, client_id)
        try:
            return await peer.request(api_key, version, body, timeout=timeout)
        finally:
            peer.close()

    return asyncio.run(go())


# -- producing under load and checking what was acknowledged -------------------------------------------------------


class Ledger:
    """What an idempotent producer was told: value -> (partition, offset) of every acknowledged record, the send
    order per partition, and every delivery error."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.errors: list[Any] = []
        self.lock = threading.Lock()

    def callback(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err:
                self.errors.append(err)
            else:
                self.acked[msg.value()] = (msg.partition(), msg.offset())

    def produce(self, p: Producer, topic: str, i: int) -> None:
        """Send the ``i``-th value (unique) to partition ``i % partitions``."""
        part = i % self.partitions
        value = f"v{i:07d}".encode()
        self.sent[part].append(value)
        p.produce(topic, value, partition=part, on_delivery=self.callback)

    def acked_ends(self) -> dict[int, int]:
        """Partition -> one past the highest acknowledged offset: where a reader's high watermark must reach."""
        with self.lock:
            ends: dict[int, int] = {}
            for part, offset in self.acked.values():
                if offset is not None and offset >= 0:
                    ends[part] = max(ends.get(part, 0), offset + 1)
            return ends

    def count(self, partition: int | None = None) -> int:
        """Acknowledged records (on one partition)."""
        with self.lock:
            if partition is None:
                return len(self.acked)
            return sum(1 for part, _o in self.acked.values() if part == partition)

    def check(self, records: dict[int, list[tuple[int, bytes]]], *, exact: bool) -> None:
        """0 duplicates, offsets strictly increasing, 0 out of send order, 0 acked records lost, each acked offset
        holds its value; with ``exact``, each partition holds exactly the values sent to it, in send order."""
        position: dict[bytes, tuple[int, int]] = {}
        dups: list[bytes] = []
        for p, recs in records.items():
            offsets = [o for o, _v in recs]
            assert all(a < b for a, b in itertools.pairwise(offsets)), f"partition {p}: offsets not strictly increasing"
            for o, v in recs:
                if v in position:
                    dups.append(v)
                position[v] = (p, o)
            rank = {v: k for k, v in enumerate(self.sent[p])}
            ours = [rank[v] for _o, v in recs if v in rank]
            disorder = [(a, b) for a, b in itertools.pairwise(ours) if a >= b]
            assert disorder == [], f"partition {p}: {len(disorder)} records out of send order, e.g. {disorder[:5]}"
            if exact:
                got = [v for _o, v in recs]
                if got != self.sent[p]:
                    have, sent = set(got), set(self.sent[p])
                    missing = [v for v in self.sent[p] if v not in have]
                    extra = [v for v in got if v not in sent]
                    unacked = [v for v in missing if v not in self.acked]
                    raise AssertionError(f"partition {p}: not exactly the values sent: {len(missing)} missing "
                                         f"({len(unacked)} of them never acknowledged, e.g. {missing[:5]}), "
                                         f"{len(extra)} extra (e.g. {extra[:5]}), {len(got)} read, "
                                         f"{len(self.sent[p])} sent")
        lost = [v for v in self.acked if v not in position]
        # an ack without an offset (None) is librdkafka's implicit ack: a request failed with an uncertain outcome
        # (e.g. REQUEST_TIMED_OUT) and a later one of the same idempotent producer succeeded, so the earlier
        # records are reported delivered with no offset (rdkafka_request.c, rd_kafka_dr_implicit_ack); such a
        # record must be in the log (lost) exactly once (dups) in send order (disorder), its offset is unknown
        moved = [(v, at, position[v]) for v, at in self.acked.items()
                 if v in position and at[1] is not None and position[v] != at]
        assert dups == [], f"{len(dups)} duplicates, e.g. {dups[:5]}"
        assert lost == [], f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
        assert moved == [], f"{len(moved)} acked offsets hold other data, e.g. {moved[:5]}"


class Load(Ledger):
    """A producer thread (``conf`` on top of ``bootstrap.servers``) writing unique values round robin over the
    partitions until ``stop()``: ``batch`` records, then ``poll(pause)`` (a pace that leaves the 2 cores to the
    brokers). With ``errors_ok`` delivery errors are only recorded, else ``wait_progress``/``stop`` fail on them."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, conf: dict[str, Any], *, batch: int = 10,
                 pause: float = 0.01, flush_timeout: float = 180.0, progress_timeout: float = 90.0,
                 errors_ok: bool = False) -> None:
        super().__init__(partitions)
        self.bootstrap, self.topic, self.conf = bootstrap, topic, conf
        self.batch, self.pause, self.flush_timeout = batch, pause, flush_timeout
        self.progress_timeout, self.errors_ok = progress_timeout, errors_ok
        self.left = -1  # records not delivered by the final flush
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, **self.conf})
        i = 0
        while not self._stop.is_set():
            for _ in range(self.batch):
                self.produce(p, self.topic, i)
                i += 1
            p.poll(self.pause)
        self.left = p.flush(self.flush_timeout)

    def wait_progress(self, n: int = 200, partition: int | None = None, timeout: float | None = None) -> None:
        """Wait for ``n`` more acknowledgements (on one partition)."""
        before = self.count(partition)
        until(f"{n} more acks" + ("" if partition is None else f" on partition {partition}"),
              lambda: self.count(partition) >= before + n or (self.errors and not self.errors_ok),
              timeout=self.progress_timeout if timeout is None else timeout, interval=0.05)
        assert self.errors_ok or self.errors == [], self.errors[:5]

    def stop(self) -> Load:
        """Stop producing, flush, and check every record was delivered (and without errors unless ``errors_ok``)."""
        self._stop.set()
        self._thread.join(self.flush_timeout + 60)
        assert not self._thread.is_alive(), "the producer did not flush"
        assert self.left == 0, f"{self.left} records never delivered"
        assert self.errors_ok or self.errors == [], f"{len(self.errors)} delivery errors: {self.errors[:5]}"
        return self


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0,
             at_least: dict[int, int] | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition up to the high watermark, with its offset, in consumption order (within
    ``timeout`` per partition; fails when a partition was not read up to its high watermark). ``at_least``:
    partition -> an end the high watermark must reach first (a new leader's high watermark passes the records
    acknowledged by the old one only once its followers fetched from it, as in Kafka)."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        for p in range(partitions):
            # a client's metadata may still name a leader that just lost the partition: retry the query
            want = (at_least or {}).get(p, 0)

            def marks(p: int = p, want: int = want) -> tuple[int, int] | None:
                got = cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                return got if got is not None and got[1] >= want else None

            _low, end = until(f"the watermarks of {topic}-{p} (high watermark at least {want})", marks, timeout=30)
            cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            got: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + timeout
            while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
                m = cons.poll(0.2)
                if m is None or m.error():
                    continue
                got.append((m.offset(), m.value()))
            assert not got or got[-1][0] == end - 1, f"partition {p}: read up to {got[-1][0]}, HW {end}"
            assert end == 0 or got, f"partition {p}: nothing read below HW {end}"
            out[p] = got
            cons.unassign()
    finally:
        cons.close()
    return out


def replica_dirs(data_dir: Path, topic: str) -> list[str]:
    """Every directory of ``topic`` in a broker's log dir, ``-delete`` ones included."""
    return sorted(d.name for d in Path(data_dir).iterdir() if d.is_dir() and d.name.startswith(f"{topic}-"))


# -- replicas byte-identical --------------------------------------------------------------------------------------


def log_bytes(data_dir: Path, topic: str, p: int = 0, upto: int | None = None) -> bytes:
    """One replica's ``.log`` bytes (segments concatenated); with ``upto``, cut before the first batch whose base
    offset is at or past it."""
    import struct

    d = Path(data_dir) / f"{topic}-{p}"
    data = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
    if upto is None:
        return data
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= upto:
            break
        pos += 12 + length
    return data[:pos]


def _epochs(data_dir: Path, topic: str, p: int) -> list[str]:
    return (Path(data_dir) / f"{topic}-{p}" / "leader-epoch-checkpoint").read_text().split("\n")[2:]


def converged(c: Any, topic: str, partitions: int, *, isr_timeout: float = 120.0) -> None:
    """Every replica in every ISR, then on all brokers identical (non-empty) ``.log`` bytes up to the high
    watermark and identical leader-epoch checkpoints."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    n = len(c.brokers)

    def full_isr() -> bool:
        t = admin.list_topics(topic, timeout=10).topics[topic]
        return len(t.partitions) == partitions and all(len(q.isrs) == n for q in t.partitions.values())

    until("all replicas in every ISR", full_isr, timeout=isr_timeout, interval=0.1)
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "converged-hw"})
    try:
        hws = {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        cons.close()
    for p, hw in hws.items():
        assert hw > 0

        def same(p: int = p, hw: int = hw) -> bool:
            copies = {log_bytes(b.data_dir, topic, p, upto=hw) for b in c.brokers.values()}
            return len(copies) == 1 and len(next(iter(copies))) > 0

        # followers may be a fetch behind the leader's HW when it is read: wait for the same bytes
        until(f"identical replicas of {topic}-{p} up to HW {hw}", same, timeout=60, interval=0.1)
        until(f"identical leader epochs of {topic}-{p}", lambda p=p: len(
            {tuple(_epochs(b.data_dir, topic, p)) for b in c.brokers.values()}) == 1, timeout=60, interval=0.1)


def find_coordinator(broker: Any, key: str, key_type: int = 0) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v3 for a group (key_type 0) or a transactional id (1)."""
    r = request(broker, 10, 3, {"key": key, "key_type": key_type}, timeout=15)
    return r["error_code"], r["node_id"]


def agreed_coordinator(cluster: Any, key: str, key_type: int = 0, timeout: float = 90.0) -> int:
    """Poll FindCoordinator on every running broker until all name the same live coordinator of ``key``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            answers = {i: find_coordinator(b, key, key_type) for i, b in cluster.brokers.items() if b.running}
            last = answers
            nodes = {node for err, node in answers.values() if err == 0}
            if all(err == 0 for err, _ in answers.values()) and len(nodes) == 1:
                node = nodes.pop()
                if cluster.brokers[node].running:
                    return node
        except (TimeoutError, OSError) as exc:
            last = exc
        time.sleep(0.2)  # polling interval of a bounded wait (the topic is being created / elected)
    raise AssertionError(f"brokers never agreed on a coordinator for {key}: {last!r}")

"""Durability of a real ``tidelog serve`` across restarts: clean stop, kill -9 (idle and under load), torn tails.

Every test checks what clients were told against what they can read afterwards: every acknowledged message is
read back at the offset it was acknowledged with, in order, offsets contiguous, no corrupt reads (confluent-kafka
raises on any corrupt batch, and the segment files are decoded batch by batch with ``tidelog.records``).

The default flush policy leaves unflushed data in the OS page cache, which survives a process kill (not a power
loss): so after kill -9 every acknowledged message must survive. Brokers here use tiny segments (several
segments per partition) and a small index interval (many index entries), so recovery and index rebuilds have
real work to do.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import helpers as h
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.records import build_batch, decode_batches

pytestmark = pytest.mark.integration

SMALL = {"tidelog.min.segment.bytes": "1024", "log.segment.bytes": "8192", "log.index.interval.bytes": "256",
         "num.partitions": "2"}
SEED = 20240611


def _produce_acked(bootstrap: str, topic: str, n: int, *, start: int = 0, acks: str = "all",
                   partitions: int = 2, **conf: Any) -> dict[int, list[tuple[int, bytes]]]:
    """Produce n messages in small batches; returns partition -> [(offset, value)] as acknowledged."""
    msgs = [{"value": f"m-{start + i:05d}-".encode() + b"p" * 80, "key": f"k{i}".encode(), "partition": i % partitions,
             "timestamp": 1_700_000_000_000 + start + i} for i in range(n)]
    delivered = h.confluent_produce(bootstrap, topic, msgs, acks=acks, **{"linger.ms": 0, "batch.num.messages": 7,
                                                                            **conf})
    out: dict[int, list[tuple[int, bytes]]] = {}
    for m in delivered:
        out.setdefault(m.partition(), []).append((m.offset(), m.value()))
    for p in out:
        out[p].sort()
    return out


def _read_partition(broker: Any, topic: str, partition: int) -> list[tuple[int, bytes]]:
    end = h.log_end_offset(broker.port, topic, partition)
    msgs = h.confluent_consume(broker.bootstrap, topic, end, partition=partition) if end else []
    got = [(m.offset(), m.value()) for m in msgs]
    assert [o for o, _ in got] == list(range(end)), "offsets not contiguous from 0"
    return got


def _assert_all_acked_present(broker: Any, topic: str, acked: dict[int, list[tuple[int, bytes]]]) -> None:
    for p, want in acked.items():
        got = _read_partition(broker, topic, p)
        # exactly what was acknowledged, in order, nothing more (everything produced here was acknowledged)
        assert got == want, f"partition {p}: read back differs from what was acknowledged"
        # and the files decode cleanly, batch after batch, to the same records
        assert [(r.offset, r.value) for _, r in h.records_on_disk(broker.data_dir, topic, p)] == want


def _snapshot(pdir: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(pdir.iterdir()) if p.is_file()}


def _segment_bases(pdir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in pdir.glob("*.log"))


# ---------------------------------------------------------------------------------------------- clean restart


def test_clean_restart_keeps_data_and_offsets_without_recovery(broker_factory: Any) -> None:
    b = broker_factory(SMALL)
    topic = h.new_topic("clean")
    acked = _produce_acked(b.bootstrap, topic, 400)
    assert sorted(acked) == [0, 1]
    leo = {p: h.log_end_offset(b.port, topic, p) for p in acked}
    assert leo == {p: len(v) for p, v in acked.items()}
    pdirs = {p: h.partition_dir(b.data_dir, topic, p) for p in acked}
    assert all(len(_segment_bases(d)) >= 3 for d in pdirs.values()), "expected several segments per partition"

    assert b.stop() == 0
    marker = b.data_dir / ".kafka_cleanshutdown"
    assert marker.exists()
    assert json.loads(marker.read_text())["version"] == 0
    lines = (b.data_dir / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert lines[0] == "0"
    points = {(t, int(p)): int(o) for t, p, o in (ln.split() for ln in lines[2:] if ln.strip())}
    assert {p: points[(topic, p)] for p in acked} == leo  # everything flushed by the clean shutdown
    # Make any recovery visible: pretend the recovery points were stale. With the clean-shutdown marker the
    # broker must not recover anyway (Kafka's LogLoader skips recovery), so no inactive segment's index may
    # be rebuilt. (After kill -9, the same files do get rebuilt: see the kill test.)
    (b.data_dir / "recovery-point-offset-checkpoint").write_text(
        "0\n{}\n{}".format(len(points), "".join(f"{t} {p} 0\n" for t, p in points)))
    before = {p: _snapshot(d) for p, d in pdirs.items()}
    time.sleep(0.01)  # let a rewrite get a visibly different mtime (filesystem timestamp granularity)
    b.start()
    assert not marker.exists(), "the marker must be removed at startup (a later crash must recover)"
    for p, d in pdirs.items():
        after = _snapshot(d)
        active = f"{_segment_bases(d)[-1]:020d}"
        changed = sorted(k for k in before[p] if before[p][k] != after.get(k) and not k.startswith(active)
                         and k != "leader-epoch-checkpoint")
        assert changed == [], f"files of inactive segments were rewritten after a clean shutdown: {changed}"
    assert {p: h.log_end_offset(b.port, topic, p) for p in acked} == leo
    _assert_all_acked_present(b, topic, acked)
    # producing continues at the old log end, not at 0
    more = _produce_acked(b.bootstrap, topic, 20, start=400)
    assert {p: v[0][0] for p, v in more.items()} == leo


# ----------------------------------------------------------------------------------------------- kill -9 idle


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill9_keeps_every_acknowledged_message(broker_factory: Any, acks: str) -> None:
    b = broker_factory(SMALL)
    topic = h.new_topic(f"kill-acks{acks}")
    acked = _produce_acked(b.bootstrap, topic, 300, acks=acks)
    b.stop()  # a clean stop first, so the recovery point is on disk...
    b.start()
    more = _produce_acked(b.bootstrap, topic, 300, start=300, acks=acks)  # ...and these are past it, unflushed
    for p, v in more.items():
        acked[p] += v
    pdirs = {p: h.partition_dir(b.data_dir, topic, p) for p in acked}
    before = {p: _snapshot(d) for p, d in pdirs.items()}
    b.kill()
    assert not (b.data_dir / ".kafka_cleanshutdown").exists()
    time.sleep(0.01)  # filesystem timestamp granularity, see the clean-restart test
    b.start()
    # recovery ran: the indexes of the segments past the old recovery point were rebuilt
    for p, d in pdirs.items():
        rebuilt = [k for k in before[p] if k.endswith(".index") and before[p][k] != _snapshot(d).get(k)]
        assert len(rebuilt) >= 2, f"partition {p}: expected recovery to rebuild indexes, rebuilt {rebuilt}"
    _assert_all_acked_present(b, topic, acked)
    leo = {p: len(v) for p, v in acked.items()}
    more = _produce_acked(b.bootstrap, topic, 10, start=600, acks=acks)
    assert {p: v[0][0] for p, v in more.items()} == leo


# ----------------------------------------------------------------------------------------- kill -9 under load


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "acks-all"])
def test_kill9_while_producing(broker_factory: Any, idempotent: bool) -> None:
    """A producer keeps sending while the broker is killed and restarted on the same port. Every acknowledged
    message is present at its acknowledged offset; offsets are contiguous; the idempotent producer leaves no
    duplicates and every one of its messages is delivered exactly once."""
    b = broker_factory(SMALL)
    topic = h.new_topic("load")
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    conf = {"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2, "batch.num.messages": 10,
            "message.timeout.ms": 60_000, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 20, "enable.idempotence": idempotent}
    p = Producer(conf)
    sent = 0
    phase = "before"
    t0 = time.monotonic()
    deadline = t0 + 60
    while time.monotonic() < deadline and sent < 20_000:
        for _ in range(20):
            p.produce(topic, f"load-{sent:06d}".encode(), partition=sent % 2, on_delivery=cb)
            sent += 1
        p.poll(0.001)
        if phase == "before" and len(acked) >= 500:
            b.kill()  # with produce requests in flight: we just queued 20 more and keep going
            phase = "down"
            in_flight_at_kill = sent - len(acked) - len(failed)
        elif phase == "down" and sent % 200 == 0:
            b.start()
            phase = "after"
            acked_at_restart = len(acked)
        elif phase == "after" and len(acked) >= acked_at_restart + 500:
            break
    assert phase == "after", f"did not get through kill and restart in time (phase {phase}, acked {len(acked)})"
    assert in_flight_at_kill > 0
    assert p.flush(60) == 0
    assert failed == [], failed[:5]
    assert len(acked) == sent  # nothing failed: every message was acknowledged eventually

    for part in (0, 1):
        got = _read_partition(b, topic, part)
        values = [v for _, v in got]
        for value, (pp, offset) in acked.items():
            if pp == part:
                assert got[offset][1] == value, f"acked {value!r} at {part}/{offset}, found {got[offset][1]!r}"
        if idempotent:
            assert len(values) == len(set(values)), "duplicates despite idempotence"
            assert len(got) == sum(1 for pp, _ in acked.values() if pp == part)
        assert [r.offset for _, r in h.records_on_disk(b.data_dir, topic, part)] == list(range(len(got)))


# ------------------------------------------------------------------------------------------------- torn tails


def _prepare_torn(broker_factory: Any, prefix: str) -> tuple[Any, str, list[tuple[int, bytes]], Path]:
    b = broker_factory({**SMALL, "num.partitions": "1"})
    topic = h.new_topic(prefix)
    acked = _produce_acked(b.bootstrap, topic, 200, partitions=1)[0]
    b.kill()
    pdir = h.partition_dir(b.data_dir, topic)
    return b, topic, acked, pdir


def _active_log(pdir: Path) -> Path:
    return pdir / f"{_segment_bases(pdir)[-1]:020d}.log"


def _batches(path: Path) -> list[tuple[int, Any]]:
    return [(pos, hdr) for pos, hdr, _ in decode_batches(path.read_bytes())]


def _check_after_recovery(b: Any, topic: str, survivors: list[tuple[int, bytes]]) -> None:
    """The valid prefix is intact and readable from every offset (index lookups), by time (time index), and the
    partition takes new writes right after it."""
    assert h.log_end_offset(b.port, topic) == len(survivors)
    assert _read_partition(b, topic, 0) == survivors
    assert [(r.offset, r.value) for _, r in h.records_on_disk(b.data_dir, topic)] == survivors
    rnd = random.Random(SEED)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    try:
        for offset in sorted(rnd.sample(range(len(survivors)), 8)) + [len(survivors) - 1]:
            c.assign([TopicPartition(topic, 0, offset)])
            m = None
            deadline = time.monotonic() + 10
            while m is None and time.monotonic() < deadline:
                m = c.poll(0.2)
            assert m is not None and not m.error() and m.offset() == offset and m.value() == survivors[offset][1]
            ts = 1_700_000_000_000 + offset
            assert c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset == offset
    finally:
        c.close()
    more = _produce_acked(b.bootstrap, topic, 30, start=10_000, partitions=1)[0]
    assert [o for o, _ in more] == list(range(len(survivors), len(survivors) + 30))
    assert _read_partition(b, topic, 0) == survivors + more


def test_garbage_appended_to_active_segment_is_truncated(broker_factory: Any) -> None:
    b, topic, acked, pdir = _prepare_torn(broker_factory, "garbage")
    log = _active_log(pdir)
    valid_size = log.stat().st_size
    rnd = random.Random(SEED)
    with open(log, "ab") as f:
        f.write(bytes(rnd.getrandbits(8) for _ in range(3000)))
    b.start()
    assert log.stat().st_size == valid_size
    _check_after_recovery(b, topic, acked)


def test_garbage_that_looks_like_a_batch_header_is_truncated(broker_factory: Any) -> None:
    b, topic, acked, pdir = _prepare_torn(broker_factory, "fakebatch")
    log = _active_log(pdir)
    valid_size = log.stat().st_size
    # a plausible next batch (right offset, sane length) whose CRC is wrong, then a partial one
    fake = bytearray(build_batch([(b"k", b"never acknowledged")], base_offset=len(acked)))
    fake[-1] ^= 0xFF
    with open(log, "ab") as f:
        f.write(bytes(fake) + build_batch([(b"k", b"x" * 50)], base_offset=len(acked) + 1)[:40])
    b.start()
    assert log.stat().st_size == valid_size
    _check_after_recovery(b, topic, acked)


def test_last_batch_cut_in_half_is_dropped(broker_factory: Any) -> None:
    b, topic, acked, pdir = _prepare_torn(broker_factory, "cut")
    log = _active_log(pdir)
    batches = _batches(log)
    pos, last = batches[-1]
    assert last.last_offset == len(acked) - 1
    os.truncate(log, pos + last.size // 2)
    b.start()
    assert log.stat().st_size == pos
    # the torn batch was never complete on disk: its records are gone, everything before it survives
    _check_after_recovery(b, topic, acked[: last.base_offset])


def test_corrupt_indexes_are_rebuilt(broker_factory: Any) -> None:
    b, topic, acked, pdir = _prepare_torn(broker_factory, "index")
    rnd = random.Random(SEED)
    for idx in sorted(pdir.glob("*.index")) + sorted(pdir.glob("*.timeindex")):
        data = bytearray(idx.read_bytes())
        for _ in range(min(16, len(data))):
            data[rnd.randrange(len(data))] = rnd.getrandbits(8)
        idx.write_bytes(bytes(data) + b"\x07\x07\x07")  # also not a whole number of entries
    (pdir / f"{_segment_bases(pdir)[0]:020d}.index").unlink()  # and one index missing altogether
    b.start()
    _check_after_recovery(b, topic, acked)


# ---------------------------------------------------------------------------------------------- garbled metadata


def test_garbled_epoch_checkpoint_and_partition_metadata_are_rebuilt(broker_factory: Any) -> None:
    """A garbled ``leader-epoch-checkpoint`` and ``partition.metadata`` do not keep the broker from starting:
    the epochs come back from the batches, the topic id from the registry, and every message is served."""
    b = broker_factory(SMALL)
    topic = h.new_topic("garbled")
    acked = _produce_acked(b.bootstrap, topic, 200)
    pdirs = {p: h.partition_dir(b.data_dir, topic, p) for p in acked}
    before = {p: ((d / "leader-epoch-checkpoint").read_text(), (d / "partition.metadata").read_text())
              for p, d in pdirs.items()}
    assert all(epochs.startswith("0\n1\n") and "topic_id: " in meta for epochs, meta in before.values())
    assert b.stop() == 0
    (pdirs[0] / "leader-epoch-checkpoint").write_bytes(b"0\n1\n\xff\xfe garbage")
    (pdirs[1] / "partition.metadata").write_text("version: 0\ntopic_id: not-a-uuid\n")
    b.start()
    _assert_all_acked_present(b, topic, acked)
    after = {p: ((d / "leader-epoch-checkpoint").read_text(), (d / "partition.metadata").read_text())
             for p, d in pdirs.items()}
    assert after == before

"""The transactional client of the ``txn`` workload and the final readers (see workloads.py for the others).

``TxnClient``: a transactional producer (``transactional.id`` ``jt-tx-<n>``, kept across replacements so that a
new instance fences the old one) and a read_committed consumer of group ``jt-g<n>`` assigned every partition.
Each ``txn`` op: begin, one or two polls from the group's position, one to four sends of new unique ints to random
partitions, ``send_offsets_to_transaction`` of what was polled, then commit, or abort on purpose. After an
abort or an unknown outcome the consumer is rewound to the group's committed offsets (an ``assign`` op).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from recorder import History
from workloads import CLIENT, Ctx, _err, common_conf, key


class _Abort(Exception):
    """The transaction must be aborted (the client said so)."""


class _Unknown(Exception):
    """Outcome unknown: the client is replaced."""


def bounded(what: str, fn: Callable[[], Any], limit: float) -> Any:
    """``fn()`` in a helper thread, given up after ``limit`` seconds (``_Hung``). librdkafka 2.16's
    ``send_offsets_to_transaction`` can block forever past its own timeout (confluentinc/librdkafka#5456, #5511:
    the coordinator request's timeout is never checked); the client is then abandoned and replaced."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["r"] = fn()
        except BaseException as exc:
            box["e"] = exc

    t = threading.Thread(target=go, name=f"bounded-{what}", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        raise _Hung(f"client call {what} still blocked after {limit:.0f}s (librdkafka#5456)")
    if "e" in box:
        raise box["e"]
    return box.get("r")


class _Hung(Exception):
    """A client call that never returned."""


class TxnClient:
    def __init__(self, ctx: Ctx, topic: str, n: int) -> None:
        self.ctx, self.topic, self.n = ctx, topic, n
        self.group = f"{topic}-g{n}"
        self.txn_id = f"{topic}-tx-{n}"
        self._abort_next = threading.Event()
        self.thread = threading.Thread(target=ctx.guard(f"txn-{n}", self._run), daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def abort_next(self) -> None:
        """The transaction in progress (or the next one) is aborted on purpose when it reaches its end: a
        scripted schedule (tests/jepsen/test_torn.py) decides it after the transaction has begun."""
        self._abort_next.set()

    def _run(self) -> None:
        while not self.ctx.stop.is_set():
            self._session()

    def _parts(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(self.ctx.partitions)]

    def _session(self) -> None:
        ctx = self.ctx
        pid = ctx.h.new_process()
        v = {"role": "producer", "client": CLIENT, "transactional": True, "isolation": "read_committed",
             "mode": "assign", "group": self.group}
        ctx.h.add(pid, "invoke", "open", v)
        p = Producer({**common_conf(ctx.bootstrap), "transactional.id": self.txn_id,
                      "transaction.timeout.ms": 30000, "message.timeout.ms": 30000, "linger.ms": 5})
        c = Consumer({**common_conf(ctx.bootstrap), "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "fetch.wait.max.ms": 200, "enable.partition.eof": False})
        try:
            while True:  # init_transactions fences a previous instance and resolves its open transaction
                try:
                    bounded("init_transactions", lambda: p.init_transactions(60), 120)
                    break
                except _Hung as exc:
                    ctx.hung.append(str(exc))
                    ctx.h.add(pid, "info", "open", v, str(exc))
                    return
                except KafkaException as exc:
                    e = exc.args[0]
                    if ctx.stop.is_set() or not e.retriable():
                        ctx.h.add(pid, "fail", "open", v, _err(e))
                        return
            ctx.h.add(pid, "ok", "open", v)
            if not self._rewind(c, pid):
                return
            while not ctx.stop.is_set():
                if not self._txn(p, c, pid):
                    return
        finally:
            # a replaced transactional producer is not destroyed now: rd_kafka_destroy of a fenced or failed
            # instance can block for long while brokers are unreachable; the runner drops them at the end
            ctx.graveyard.extend([p, c])

    def _rewind(self, c: Consumer, pid: int) -> bool:
        """Assign every partition at the group's committed offsets (the transactions' committed progress)."""
        try:
            got = c.committed(self._parts(), timeout=30)
        except KafkaException as exc:
            self.ctx.h.add(pid, "invoke", "assign", {"partitions": [], "positions": {}})
            self.ctx.h.add(pid, "info", "assign", {"partitions": [], "positions": {}}, _err(exc.args[0]))
            return False
        positions = {key(t.topic, t.partition): (t.offset if t.offset >= 0 else None) for t in got}
        c.assign([TopicPartition(t.topic, t.partition, t.offset if t.offset >= 0 else OFFSET_BEGINNING)
                  for t in got])
        val = {"partitions": sorted(positions), "positions": positions}
        self.ctx.h.add(pid, "invoke", "assign", val)
        self.ctx.h.add(pid, "ok", "assign", val)
        return True

    def _txn(self, p: Producer, c: Consumer, pid: int) -> bool:
        """One transaction; False when the client must be replaced."""
        ctx = self.ctx
        # consume-transform-produce: the polls come first, then the sends. (Sends before polls would let two
        # concurrent transactions form a dependency cycle that Kafka allows -- its transactions order writes per
        # partition only -- so a G1c found by the checker would not be a bug.)
        plan: list[list[Any]] = [["poll"] for _ in range(ctx.randint(1, 2))]
        for _ in range(ctx.randint(1, 4)):
            plan.append(["send", key(self.topic, ctx.randint(0, ctx.partitions - 1)), ctx.value()])
        abort = ctx.random() < ctx.abort_rate
        if self._abort_next.is_set():
            # the torn fault's N+1 writes one record: one Produce, which the late commit takes whole (a second
            # Produce, to a partition the late commit closed, is refused by KIP-890 verification with
            # INVALID_TXN_STATE, fatal to librdkafka: the history then shows nothing to check)
            plan = [m for m in plan if m[0] == "poll"] + [m for m in plan if m[0] == "send"][:1]
        done: list[list[Any]] = []
        reports: dict[int, tuple[Any, int]] = {}
        next_off: dict[str, int] = {}
        invoke = [list(m) for m in plan]
        offsets_op: list[Any] | None = None
        try:
            p.begin_transaction()
        except KafkaException as exc:
            ctx.h.add(pid, "invoke", "txn", invoke)
            ctx.h.add(pid, "info", "txn", invoke, _err(exc.args[0]))
            return False
        # the offsets micro-op's value is only known after the polls: the invoke names it without offsets
        invoke_full = [*invoke, ["offsets", self.group, None]]
        ctx.h.add(pid, "invoke", "txn", invoke_full)
        # a transaction to be aborted on purpose (the torn fault's N+1, decided before it began) polls until it has
        # records (bounded): it then sends offsets, which reopens a transaction at the coordinator after a late
        # commit, so that its abort succeeds and the history can show the torn commit (docs/RELIABILITY.md, "What
        # a version-1 history shows"); a single 0.2 s poll came back empty on a loaded machine
        poll_until = time.monotonic() + 5.0 if self._abort_next.is_set() else 0.0
        try:
            for m in plan:
                if m[0] == "poll":
                    recs: dict[str, list[list[int]]] = {}
                    while True:
                        for msg in c.consume(50, 0.2):
                            if msg.error():
                                continue
                            k = key(msg.topic(), msg.partition())
                            recs.setdefault(k, []).append([msg.offset(), int(msg.value())])
                            next_off[k] = msg.offset() + 1
                        if next_off or time.monotonic() >= poll_until or ctx.stop.is_set():
                            break
                    done.append(["poll", recs])
                else:
                    _s, k, value = m
                    i = len(done)

                    def cb(err: Any, msg: Any, i: int = i) -> None:
                        reports[i] = (err, msg.offset() if err is None else -1)

                    try:
                        p.produce(self.topic, str(value).encode(), key=str(value).encode(),
                                  partition=int(k.split("/")[1]), on_delivery=cb)
                    except BufferError as exc:
                        raise _Abort(repr(exc)) from exc
                    except KafkaException as exc:
                        raise self._classify(exc) from exc
                    done.append(["send", k, value])
            if self._abort_next.is_set():
                # the torn fault's N+1: its records reach the log before it sends offsets (the first Produce is
                # "N+1 wrote", on which the late commit lands; the AddOffsetsToTxn after it then reopens a
                # transaction that the abort ends). Sent the other way round, the late commit took the offsets
                # partition along and the TxnOffsetCommit was refused (INVALID_TXN_STATE, fatal to librdkafka);
                # aborted before its Produce went out, the next transaction's Produce became "N+1 wrote"
                p.flush(30)
            offsets_op = ["offsets", self.group, dict(next_off)]
            if next_off:
                tps = [TopicPartition(k.split("/")[0], int(k.split("/")[1]), o) for k, o in next_off.items()]
                self._retry(lambda: bounded("send_offsets_to_transaction",
                                            lambda: p.send_offsets_to_transaction(tps, c.consumer_group_metadata(), 30),
                                            60))
            done.append(offsets_op)
            if abort or self._abort_next.is_set():
                self._abort_next.clear()
                raise _Abort("aborted-on-purpose")
            self._retry(lambda: bounded("commit_transaction", lambda: p.commit_transaction(60), 120))
        except _Abort as why:
            return self._abort(p, c, pid, invoke_full, str(why))
        except _Unknown as why:
            ctx.h.add(pid, "info", "txn", invoke_full, str(why))
            return False
        out: list[list[Any]] = []
        for i, m in enumerate(done):
            if m[0] == "send":
                _e, off = reports.get(i, (None, -1))
                out.append(["send", m[1], [off if off >= 0 else None, m[2]]])
            else:
                out.append(m)
        ctx.h.add(pid, "ok", "txn", out)
        return True

    def _classify(self, exc: KafkaException) -> Exception:
        e = exc.args[0]
        if isinstance(e, KafkaError) and e.txn_requires_abort():
            return _Abort(_err(e))
        return _Unknown(_err(e) if isinstance(e, KafkaError) else repr(e))

    def _retry(self, fn: Any, tries: int = 5) -> None:
        for attempt in range(tries):
            try:
                fn()
                return
            except _Hung as exc:
                self.ctx.hung.append(str(exc))
                raise _Unknown(str(exc)) from exc
            except KafkaException as exc:
                e = exc.args[0]
                if isinstance(e, KafkaError) and e.retriable() and attempt < tries - 1 and not e.fatal():
                    time.sleep(0.5)  # the client's retry backoff for a retriable transactional call
                    continue
                raise self._classify(exc) from exc

    def _abort(self, p: Producer, c: Consumer, pid: int, invoke: list[Any], why: str) -> bool:
        try:
            self._retry(lambda: bounded("abort_transaction", lambda: p.abort_transaction(60), 120))
        except (_Abort, _Unknown) as exc:
            self.ctx.h.add(pid, "info", "txn", invoke, f"{why}; abort failed: {exc}")
            return False
        self.ctx.h.add(pid, "fail", "txn", invoke, why)
        return self._rewind(c, pid)


def final_read(h: History, bootstrap: str, topic: str, partitions: int, isolation: str,
               timeout: float = 180.0) -> bool:
    """Read every partition from its log start to its end (HW or LSO); emits polls then ``final-read``."""
    pid = h.new_process()
    v = {"role": "consumer", "client": CLIENT, "transactional": False, "isolation": isolation, "mode": "assign",
         "group": None}
    h.add(pid, "invoke", "open", v)
    c = Consumer({**common_conf(bootstrap), "group.id": f"final-{pid}", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100, "enable.partition.eof": False})
    h.add(pid, "ok", "open", v)
    try:
        lows: dict[str, int] = {}
        ends: dict[str, int] = {}
        for p in range(partitions):
            lo, hi = _retry_watermarks(c, TopicPartition(topic, p))
            lows[key(topic, p)], ends[key(topic, p)] = lo, hi
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        val = {"partitions": sorted(lows), "positions": dict(lows)}
        h.add(pid, "invoke", "assign", val)
        h.add(pid, "ok", "assign", val)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h.add(pid, "invoke", "poll", [["poll"]])
            recs: dict[str, list[list[int]]] = {}
            for m in c.consume(500, 0.5):
                if m.error():
                    continue
                recs.setdefault(key(m.topic(), m.partition()), []).append([m.offset(), int(m.value())])
            h.add(pid, "ok", "poll", [["poll", recs]])
            pos = {key(t.topic, t.partition): t.offset for t in c.position(c.assignment())}
            if all(pos.get(k, -1) >= e or e == lows[k] for k, e in ends.items()):
                h.add(pid, "invoke", "final-read", {"from": lows, "to": ends})
                h.add(pid, "ok", "final-read", {"from": lows, "to": ends})
                return True
        return False
    finally:
        c.close()


def _retry_watermarks(c: Consumer, tp: TopicPartition, timeout: float = 60.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            lo, hi = c.get_watermark_offsets(tp, timeout=10)
            return int(lo), int(hi)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # retry backoff: leadership may still be moving right after the heal

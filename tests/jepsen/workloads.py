"""The clients of the Jepsen-style runs (confluent-kafka), each recording its operations into a ``History``
(tests/jepsen/HISTORY.md).

* ``queue``: producer clients (one ``Producer`` shared by a few logical processes, each with one send in flight,
  acks=all + idempotence unless acks=1) send unique ints to random partitions of ``jq``; consumers poll with
  ``assign`` (group ``jq-a``) and with ``subscribe`` (group ``jq-s``, two members: rebalances), committing offsets.
* ``txn``: transactional consume-transform-produce clients on ``jt``: each transaction polls from its group's
  position, sends new unique ints to several partitions, sends the consumed offsets inside the transaction and
  commits (or aborts on purpose, ~15 %); plus read_committed consumers (assign and subscribe).
* ``final_read``: after the faults healed, a consumer reads every partition from the log start to the high
  watermark (read_uncommitted) or the LSO (read_committed) and emits ``final-read``.

Outcomes: ``ok`` when the client confirmed, ``fail`` only when the operation definitely did not take effect (an
abort that succeeded, a commit rejected by the group), ``info`` otherwise. After an ``info`` the client is
replaced: a producer process takes a new id, a consumer or transactional client is recreated with a new id.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from recorder import History

QUEUE_TOPIC, TXN_TOPIC = "jq", "jt"
CLIENT = "confluent-kafka"
# definite failures of a non-transactional commit (the group rejected it)
_COMMIT_REJECTED = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                    KafkaError._NO_OFFSET, KafkaError.FENCED_INSTANCE_ID}


def key(topic: str, p: int) -> str:
    return f"{topic}/{p}"


def common_conf(bootstrap: str) -> dict[str, Any]:
    """Generous timeouts: the machine is shared and slow; ``socket.timeout.ms`` bounds the client wait on a
    frozen broker (a request in flight to it is only given up after that long)."""
    return {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "request.timeout.ms": 10000,
            "metadata.max.age.ms": 5000, "topic.metadata.refresh.interval.ms": 2000,
            "reconnect.backoff.max.ms": 1000, "log_level": 3}


class Ctx:
    """What every client of a run shares: history, stop flag, value counter, configuration."""

    def __init__(self, history: History, bootstrap: str, partitions: int, *, acks: str = "all",
                 seed: int = 0, abort_rate: float = 0.15) -> None:
        self.h, self.bootstrap, self.partitions = history, bootstrap, partitions
        self.acks, self.abort_rate = acks, abort_rate
        self.stop = threading.Event()
        self._values = itertools.count(1)
        self._lock = threading.Lock()
        self.rng = random.Random(seed)
        self.errors: list[str] = []  # unexpected client exceptions (harness bugs), reported in the summary
        self.hung: list[str] = []  # client calls abandoned because they never returned (librdkafka bugs)
        self.graveyard: list[Any] = []  # replaced clients, destroyed at the end (see TxnClient)

    def bury(self) -> None:
        """Close the replaced clients in a daemon thread (a destroy may block on unreachable brokers)."""
        dead, self.graveyard = self.graveyard, []

        def close() -> None:
            for x in dead:
                try:
                    if isinstance(x, Consumer):
                        x.close()
                except Exception:
                    pass
            dead.clear()

        threading.Thread(target=close, name="graveyard", daemon=True).start()

    def value(self) -> int:
        with self._lock:
            return next(self._values)

    def randint(self, a: int, b: int) -> int:
        with self._lock:
            return self.rng.randint(a, b)

    def random(self) -> float:
        with self._lock:
            return self.rng.random()

    def guard(self, name: str, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # a harness bug: keep the run going, report it
                self.errors.append(f"{name}: {exc!r}")
        return run


def _err(e: Any) -> str:
    return f"{e.name()}: {e.str()}" if isinstance(e, KafkaError) else repr(e)


# -- producers ----------------------------------------------------------------------------------------------------

class ProducerClient:
    """One ``Producer`` (polled by its own thread) and ``workers`` logical processes, each one send at a time."""

    def __init__(self, ctx: Ctx, topic: str, workers: int = 3, op_timeout: float = 75.0) -> None:
        self.ctx, self.topic, self.workers, self.op_timeout = ctx, topic, workers, op_timeout
        conf = {**common_conf(ctx.bootstrap), "acks": ctx.acks, "message.timeout.ms": 60000,
                "linger.ms": 5, "retry.backoff.ms": 200}
        if ctx.acks == "all":
            conf["enable.idempotence"] = True
        self.conf = conf
        self.p = Producer(conf)
        self.fatal: list[str] = []  # fatal producer errors (e.g. a broker that lost the idempotence state)
        self.threads = [threading.Thread(target=ctx.guard("poller", self._poll), daemon=True)]
        self.threads += [threading.Thread(target=ctx.guard("producer", self._work), daemon=True)
                         for _ in range(workers)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float | None = None) -> None:
        for t in self.threads[1:]:
            t.join(timeout)
        self._done = True
        self.threads[0].join(timeout)

    _done = False

    def _poll(self) -> None:
        """Serves the delivery reports. A fatal error (an idempotent producer's sequence desynchronised: the
        broker lost its producer state) ends the ``Producer``: its queued and in-flight records are purged (their
        reports: errors, so ``info``) and a new one replaces it."""
        while not self._done:
            try:
                self.p.poll(0.1)
            except KafkaException as exc:
                e = exc.args[0]
                if not (isinstance(e, KafkaError) and e.fatal()):
                    raise
                self.fatal.append(_err(e))
                old, self.p = self.p, Producer(self.conf)
                old.purge()
                for _ in range(50):
                    try:
                        if old.poll(0.1) == 0 and len(old) == 0:
                            break
                    except KafkaException:
                        continue
                self.ctx.graveyard.append(old)

    def _open(self) -> int:
        pid = self.ctx.h.new_process()
        v = {"role": "producer", "client": CLIENT, "transactional": False, "isolation": "read_uncommitted",
             "mode": None, "group": None}
        self.ctx.h.add(pid, "invoke", "open", v)
        self.ctx.h.add(pid, "ok", "open", v)
        return pid

    def _work(self) -> None:
        ctx = self.ctx
        pid = self._open()
        while not ctx.stop.is_set():
            k = key(self.topic, ctx.randint(0, ctx.partitions - 1))
            value = ctx.value()
            op = [["send", k, value]]
            done = threading.Event()
            out: list[Any] = []

            def cb(err: Any, msg: Any, out: list[Any] = out, done: threading.Event = done) -> None:
                out.append((err, msg.offset() if err is None else None))
                done.set()

            ctx.h.add(pid, "invoke", "send", op)
            try:
                self.p.produce(self.topic, str(value).encode(), key=str(value).encode(),
                               partition=int(k.split("/")[1]), on_delivery=cb)
            except (BufferError, KafkaException) as exc:
                ctx.h.add(pid, "fail", "send", op, _err(exc))
                continue
            if not done.wait(self.op_timeout):
                ctx.h.add(pid, "info", "send", op, "no delivery report")
                pid = self._open()
                continue
            err, offset = out[0]
            if err is None:
                ctx.h.add(pid, "ok", "send", [["send", k, [offset if offset is not None and offset >= 0 else None,
                                                            value]]])
            else:
                ctx.h.add(pid, "info", "send", op, _err(err))
                pid = self._open()


# -- consumers ----------------------------------------------------------------------------------------------------

class ConsumerClient:
    """A consumer process (recreated with a new id after an ``info``): ``mode`` assign (every partition, from the
    group's committed offsets) or subscribe; polls and commits every few polls."""

    def __init__(self, ctx: Ctx, topic: str, group: str, mode: str, isolation: str = "read_uncommitted",
                 commit_every: int = 4) -> None:
        self.ctx, self.topic, self.group, self.mode, self.isolation = ctx, topic, group, mode, isolation
        self.commit_every = commit_every
        self.thread = threading.Thread(target=ctx.guard(f"consumer-{group}", self._run), daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _conf(self) -> dict[str, Any]:
        return {**common_conf(self.ctx.bootstrap), "group.id": self.group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "isolation.level": self.isolation, "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 120000, "fetch.wait.max.ms": 200,
                "enable.partition.eof": False}

    def _run(self) -> None:
        while not self.ctx.stop.is_set():
            self._session()

    def _session(self) -> None:
        ctx = self.ctx
        pid = ctx.h.new_process()
        v = {"role": "consumer", "client": CLIENT, "transactional": False, "isolation": self.isolation,
             "mode": self.mode, "group": self.group}
        ctx.h.add(pid, "invoke", "open", v)
        c = Consumer(self._conf())
        ctx.h.add(pid, "ok", "open", v)
        st: dict[str, Any] = {"open": False, "recs": {}}
        parts = [TopicPartition(self.topic, p) for p in range(ctx.partitions)]

        def assigned(positions: dict[str, int | None]) -> None:
            if st["open"]:
                ctx.h.add(pid, "ok", "poll", [["poll", st["recs"]]])
            ctx.h.add(pid, "invoke", "assign", {"partitions": sorted(positions), "positions": {}})
            ctx.h.add(pid, "ok", "assign", {"partitions": sorted(positions), "positions": positions})
            if st["open"]:
                st["recs"] = {}
                ctx.h.add(pid, "invoke", "poll", [["poll"]])

        def committed(tps: list[TopicPartition]) -> dict[str, int | None]:
            try:
                got = c.committed(tps, timeout=15)
                return {key(t.topic, t.partition): (t.offset if t.offset >= 0 else None) for t in got}
            except KafkaException:
                return {key(t.topic, t.partition): None for t in tps}

        def on_assign(_c: Any, tps: list[TopicPartition]) -> None:
            assigned(committed(tps))

        def on_revoke(_c: Any, _tps: list[TopicPartition]) -> None:
            assigned({})

        try:
            if self.mode == "assign":
                positions = committed(parts)
                c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING if positions[key(self.topic, p)] is None
                                         else positions[key(self.topic, p)]) for p in range(ctx.partitions)])
                assigned(positions)
            else:
                c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
            consumed: dict[str, int] = {}
            polls = 0
            while not ctx.stop.is_set():
                st["recs"], st["open"] = {}, True
                ctx.h.add(pid, "invoke", "poll", [["poll"]])
                deadline = time.monotonic() + 1.0
                n = 0
                while n < 100 and time.monotonic() < deadline:
                    m = c.poll(0.2)
                    if m is None or m.error():
                        continue
                    k = key(m.topic(), m.partition())
                    st["recs"].setdefault(k, []).append([m.offset(), int(m.value())])
                    consumed[k] = m.offset() + 1
                    n += 1
                st["open"] = False
                ctx.h.add(pid, "ok", "poll", [["poll", st["recs"]]])
                polls += 1
                if polls % self.commit_every == 0 and consumed:
                    mine = {key(t.topic, t.partition) for t in c.assignment()}
                    offs = {k: o for k, o in consumed.items() if k in mine}
                    if offs and not self._commit(c, pid, offs):
                        return  # info: a new process replaces this one
        finally:
            st["open"] = False
            c.close()

    def _commit(self, c: Consumer, pid: int, offs: dict[str, int]) -> bool:
        v = {"group": self.group, "offsets": offs}
        self.ctx.h.add(pid, "invoke", "commit-offsets", v)
        tps = [TopicPartition(k.split("/")[0], int(k.split("/")[1]), o) for k, o in offs.items()]
        try:
            res = c.commit(offsets=tps, asynchronous=False)
            bad = [t for t in res or [] if t.error is not None]
            if bad:
                self.ctx.h.add(pid, "info", "commit-offsets", v, _err(bad[0].error))
                return False
            self.ctx.h.add(pid, "ok", "commit-offsets", v)
            return True
        except KafkaException as exc:
            e = exc.args[0]
            if isinstance(e, KafkaError) and e.code() in _COMMIT_REJECTED:
                self.ctx.h.add(pid, "fail", "commit-offsets", v, _err(e))
                return True
            self.ctx.h.add(pid, "info", "commit-offsets", v, _err(e))
            return False

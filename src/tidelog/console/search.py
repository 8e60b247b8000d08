"""Server-side message search and browse: a cancellable job per search, run in a worker thread.

A search reads the whole requested range of a topic (all partitions or one, from the start, an offset, a
timestamp or the end, up to the high watermark seen when it started, or a record count) through a plain
consumer, and keeps what matches. The page polls the job for its progress count (records scanned, of how many)
and the matches found since its last poll; a cancel stops the read within one batch. Memory is bounded: at most
``max_results`` matches are kept (the count goes on), each value cut at ``max_value_bytes``; at most
``max_jobs`` jobs live at once (the oldest finished ones are dropped first, and a new search beyond the limit is
refused while all are running).
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tidelog.console.filters import FilterError, compile_filter
from tidelog.console.kafka import Cluster, ConsoleError

BATCH = 2000


@dataclass(frozen=True)
class Query:
    """What to read and what to keep. ``start``: earliest, latest, offset or timestamp (``start_value`` the offset
    or the time in ms); ``limit``: records to read per partition at most (0: up to the high watermark); ``field``:
    key, value, header or any; ``text``: the substring to find (empty: everything matches: a browse)."""

    topic: str
    partition: int | None = None
    start: str = "earliest"
    start_value: int = 0
    limit: int = 0
    field: str = "any"
    text: str = ""
    header: str = ""  # with field == "header": only this header's values (empty: any header)
    expression: str = ""  # a filter expression (filters.py), with field == "expression"

    def predicate(self) -> Callable[[dict[str, Any]], bool] | None:
        """The compiled filter expression (FilterError when it is not one), None for a substring search."""
        return compile_filter(self.expression) if self.field == "expression" else None

    def matches(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> bool:
        if not self.text or self.field == "expression":
            return True
        needle = self.text.encode()
        if self.field in ("key", "any") and key is not None and needle in key:
            return True
        if self.field in ("value", "any") and value is not None and needle in value:
            return True
        if self.field in ("header", "any"):
            for name, hv in headers:
                if (not self.header or name == self.header) and hv is not None and needle in hv:
                    return True
        return False


def decode(data: bytes | None, how: str, cut: int) -> str | None:
    """Bytes shown as text, pretty JSON, hex or base64 (at most ``cut`` bytes of them)."""
    if data is None:
        return None
    data = data[:cut]
    if how == "hex":
        return binascii.hexlify(data, " ").decode()
    if how == "base64":
        return base64.b64encode(data).decode()
    text = data.decode("utf-8", errors="replace")
    if how == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


@dataclass
class Job:
    id: str
    query: Query
    max_results: int
    max_value_bytes: int
    owner: str = ""  # the session that started it: no other may read, export or cancel it
    state: str = "running"  # running, done, cancelled, failed
    scanned: int = 0
    total: int = 0
    matched: int = 0
    error: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event)

    def snapshot(self, since: int, how: str) -> dict[str, Any]:
        new = self.results[since:since + 500]
        return {"id": self.id, "state": self.state, "scanned": self.scanned, "total": self.total,
                "matched": self.matched, "kept": len(self.results), "error": self.error,
                "seconds": round((self.finished or time.monotonic()) - self.started, 3),
                "results": [self._show(r, how) for r in new], "next": since + len(new)}

    def _show(self, r: dict[str, Any], how: str) -> dict[str, Any]:
        return {"partition": r["partition"], "offset": r["offset"], "timestamp": r["timestamp"],
                "key": decode(r["key"], how, self.max_value_bytes),
                "value": decode(r["value"], how, self.max_value_bytes),
                "headers": [[k, decode(v, "text", 256)] for k, v in r["headers"]]}

    def export(self, fmt: str) -> Iterator[str]:
        """The kept matches as JSON lines or CSV, keys and values as text (UTF-8, invalid bytes replaced)."""
        if fmt == "csv":
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["topic", "partition", "offset", "timestamp", "key", "value", "headers"])
            yield buf.getvalue()
            for r in self.results:
                buf.seek(0)
                buf.truncate()
                s = self._show(r, "text")
                w.writerow([self.query.topic, s["partition"], s["offset"], s["timestamp"], s["key"], s["value"],
                            json.dumps(dict(s["headers"]), ensure_ascii=False)])
                yield buf.getvalue()
            return
        for r in self.results:
            s = self._show(r, "text")
            yield json.dumps({"topic": self.query.topic, **s, "headers": dict(s["headers"])},
                             ensure_ascii=False) + "\n"


class SearchRunner:
    """The live search jobs of a console."""

    def __init__(self, cluster: Cluster, max_jobs: int = 8, max_results: int = 10_000,
                 max_value_bytes: int = 64 * 1024) -> None:
        self.cluster = cluster
        self.max_jobs = max_jobs
        self.max_results = max_results
        self.max_value_bytes = max_value_bytes
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, query: Query, max_results: int | None = None, owner: str = "") -> Job:
        try:
            query.predicate()  # a bad expression is refused now, with its reason, rather than in the job
        except FilterError as exc:
            raise ConsoleError(f"filter expression: {exc}", 400) from None
        with self._lock:
            if len(self._jobs) >= self.max_jobs:
                done = sorted((j for j in self._jobs.values() if j.state != "running"), key=lambda j: j.started)
                if not done:
                    raise ConsoleError(f"{self.max_jobs} searches are running: cancel one first", 429)
                del self._jobs[done[0].id]
            job = Job(f"s{next(self._ids)}", query, min(max_results or self.max_results, self.max_results),
                      self.max_value_bytes, owner)
            self._jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), name=f"console-search-{job.id}", daemon=True).start()
        return job

    def get(self, job_id: str, owner: str = "") -> Job:
        job = self._jobs.get(job_id)
        if job is None or job.owner != owner:
            raise ConsoleError(f"no search {job_id!r} (finished searches are dropped after {self.max_jobs} more)",
                               404)
        return job

    def cancel(self, job_id: str, owner: str = "") -> Job:
        job = self.get(job_id, owner)
        job.cancel_event.set()
        return job

    def _ranges(self, q: Query) -> dict[int, tuple[int, int]]:
        md = self.cluster.metadata(q.topic)
        t = md.topics.get(q.topic)
        if t is None or t.error is not None:
            raise ConsoleError(f"topic {q.topic}: {t.error if t is not None else 'does not exist'}", 404)
        parts = sorted(t.partitions) if q.partition is None else [q.partition]
        if q.partition is not None and q.partition not in t.partitions:
            raise ConsoleError(f"{q.topic}-{q.partition} does not exist", 404)
        marks = self.cluster.watermarks([(q.topic, p) for p in parts])
        times = (self.cluster.offsets_for_time([(q.topic, p) for p in parts], q.start_value)
                 if q.start == "timestamp" else {})
        out = {}
        for p in parts:
            low, high = marks[(q.topic, p)]
            if q.start == "latest":
                begin = max(low, high - q.limit) if q.limit else high
            elif q.start == "offset":
                begin = min(max(q.start_value, low), high)
            elif q.start == "timestamp":
                found = times.get((q.topic, p), -1)
                begin = high if found < 0 else found
            else:
                begin = low
            end = min(high, begin + q.limit) if q.limit else high
            if end > begin:
                out[p] = (begin, end)
        return out

    def _run(self, job: Job) -> None:
        from confluent_kafka import KafkaError, TopicPartition

        q = job.query
        consumer = None
        try:
            ranges = self._ranges(q)
            job.total = sum(e - b for b, e in ranges.values())
            if not ranges:
                job.state = "done"
                return
            consumer = self.cluster.consumer()
            consumer.assign([TopicPartition(q.topic, p, b) for p, (b, _) in ranges.items()])
            left = {p: e for p, (_, e) in ranges.items()}
            predicate = q.predicate()
            while left and not job.cancel_event.is_set():
                for msg in consumer.consume(BATCH, 0.2):
                    err = msg.error()
                    p = msg.partition()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if p in left and msg.offset() >= left[p]:
                                del left[p]
                            continue
                        raise ConsoleError(f"read {q.topic}-{p}: {err.name()}: {err.str()}",
                                           403 if "AUTHORIZATION" in err.name() else 502)
                    end = left.get(p)
                    if end is None or msg.offset() >= end:
                        continue
                    job.scanned += 1
                    if msg.offset() + 1 >= end:
                        del left[p]
                    headers = msg.headers() or []
                    if predicate is not None:
                        key, value = msg.key(), msg.value()
                        hit = predicate({"key": None if key is None else key.decode("utf-8", "replace"),
                                         "value": None if value is None else value.decode("utf-8", "replace"),
                                         "headers": {k: None if v is None else v.decode("utf-8", "replace")
                                                     for k, v in headers},
                                         "partition": p, "offset": msg.offset(), "timestamp": msg.timestamp()[1]})
                    else:
                        hit = q.matches(msg.key(), msg.value(), headers)
                    if hit:
                        job.matched += 1
                        if len(job.results) < job.max_results:
                            cut = job.max_value_bytes
                            key, value = msg.key(), msg.value()
                            job.results.append({"partition": p, "offset": msg.offset(),
                                                "timestamp": msg.timestamp()[1],
                                                "key": None if key is None else bytes(key[:cut]),
                                                "value": None if value is None else bytes(value[:cut]),
                                                "headers": [(k, v) for k, v in headers]})
            job.state = "cancelled" if left else "done"
        except ConsoleError as exc:
            job.state, job.error = "failed", exc.text
        except Exception as exc:  # a client error the page must show rather than a dead job
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.finished = time.monotonic()
            if consumer is not None:
                consumer.close()

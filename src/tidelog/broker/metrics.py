"""Prometheus metrics, served as ``/metrics`` over HTTP by a small asyncio handler on the broker's loop.

Why not ``prometheus_client.start_http_server``: its thread would read partition state (log sizes) while the loop
appends; the asyncio handler collects on the loop, between requests, so it sees a consistent picture.

Hot-path cost: the per-request and per-append counters (requests and latency per API, bytes and records in/out
per topic, errors per API and code) are plain Python numbers in dicts, updated with no lock (every update runs
on the event loop) and turned into Prometheus families only when scraped (:class:`_HotCollector`); a
``prometheus_client`` child costs a lock and several calls per update (measured: ~3 us of the ~60 us of CPU a
single-record Produce request cost, issue 18). Each series keeps the time it was created (its first update), which
the scrape exports as ``<name>_created``, as ``prometheus_client``'s children do (and, like them, not when
``PROMETHEUS_DISABLE_CREATED_SERIES`` is set). The rarer events (connections, closes, ISR changes) keep
``prometheus_client`` objects.
Names follow Kafka's JMX metrics where one exists (BytesInPerSec → ``tidelog_topic_bytes_in_total``, ...).
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Sample
from prometheus_client.registry import Collector

log = logging.getLogger("tidelog.broker.metrics")

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_NBUCKETS = len(LATENCY_BUCKETS)


class _PartitionCollector(Collector):
    """Log size / offsets per partition, collected at scrape time from ``source()``:
    an iterable of (topic, partition, size_bytes, log_start_offset, log_end_offset, high_watermark,
    last_stable_offset). The LSO lag of a partition (Kafka's transactions keep it behind the HW while open) is
    ``tidelog_high_watermark - tidelog_last_stable_offset``."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, int, int, int, int, int, int]]]) -> None:
        self._source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        size = GaugeMetricFamily("tidelog_log_size_bytes", "Bytes on disk per partition", labels=["topic", "partition"])
        start = GaugeMetricFamily("tidelog_log_start_offset", "Log start offset", labels=["topic", "partition"])
        end = GaugeMetricFamily("tidelog_log_end_offset", "Log end offset", labels=["topic", "partition"])
        hw = GaugeMetricFamily("tidelog_high_watermark", "High watermark", labels=["topic", "partition"])
        stable = GaugeMetricFamily("tidelog_last_stable_offset", "Last stable offset (read_committed reads stop here)",
                                   labels=["topic", "partition"])
        try:
            for topic, partition, nbytes, start_offset, leo, hwm, lso in self._source():
                labels = [topic, str(partition)]
                size.add_metric(labels, nbytes)
                start.add_metric(labels, start_offset)
                end.add_metric(labels, leo)
                hw.add_metric(labels, hwm)
                stable.add_metric(labels, lso)
        except Exception:  # a scrape must never break the broker
            log.exception("collecting partition metrics failed")
        return [size, start, end, hw, stable]


class _RowsCollector(Collector):
    """Gauges from ``source()``: rows of (name, help, labels, value), e.g. the log cleaner's state."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]) -> None:
        self._source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        try:
            for name, doc, labels, value in self._source():
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = GaugeMetricFamily(name, doc, labels=list(labels))
                fam.add_metric(list(labels.values()), value)
        except Exception:  # a scrape must never break the broker
            log.exception("collecting metrics rows failed")
        return list(families.values())


class _HotCollector(Collector):
    """The hot-path counters of :class:`BrokerMetrics`, as Prometheus families at scrape time (same names, help
    and labels as the ``prometheus_client`` objects they replace, ``_created`` samples included)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterable[Any]:
        m = self._m
        # prometheus_client's own switch (PROMETHEUS_DISABLE_CREATED_SERIES, disable_created_metrics())
        use_created = getattr(_prometheus_metrics, "_use_created", True)
        created = m.created
        out: list[Any] = []
        for name, doc, values, kind in (("tidelog_topic_bytes_in", "Bytes appended per topic", m.bytes_in, "bi"),
                                        ("tidelog_topic_bytes_out", "Bytes fetched per topic", m.bytes_out, "bo"),
                                        ("tidelog_topic_messages_in", "Records appended per topic", m.messages_in,
                                         "mi")):
            fam = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, v in list(values.items()):
                fam.add_metric([topic], float(v), created.get((kind, topic)) if use_created else None)
            out.append(fam)
        req = CounterMetricFamily("tidelog_requests", "Requests handled per API", labels=["api"])
        lat = HistogramMetricFamily("tidelog_request_latency_seconds",
                                    "Time from request decoded to response written, per API", labels=["api"])
        for api, h in list(m.requests.items()):
            at = created.get(("rq", api)) if use_created else None
            req.add_metric([api], float(h[0]), at)
            cumulative, buckets = 0, []
            for le, n in zip(LATENCY_BUCKETS, h[2:], strict=False):
                cumulative += n
                buckets.append((_float_label(le), float(cumulative)))
            buckets.append(("+Inf", float(h[0])))
            lat.add_metric([api], buckets, h[1])
            if at is not None:  # HistogramMetricFamily.add_metric takes no created time
                lat.samples.append(Sample(lat.name + "_created", {"api": api}, at))
        out += [req, lat]
        err = CounterMetricFamily("tidelog_errors", "Error codes returned per API and error", labels=["api", "error"])
        for key, v in list(m.errors.items()):
            err.add_metric(list(key), float(v), created.get(("er", key)) if use_created else None)
        out.append(err)
        return out


def _float_label(value: float) -> str:
    """A bucket bound as prometheus_client writes it (``0.0001``, ``1.0``)."""
    return repr(float(value))


class BrokerMetrics:
    """All broker metrics in one registry (a registry per broker, so tests can run several in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # hot path: plain numbers, exported by _HotCollector (see the module docstring)
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.messages_in: dict[str, int] = {}
        # api -> [count, sum of seconds, one count per latency bucket (+Inf is the count)]
        self.requests: dict[str, list[Any]] = {}
        self.errors: dict[tuple[str, str], int] = {}
        # (kind, label) -> the wall-clock time of the series' first update, exported as <name>_created; kinds:
        # "bi", "bo", "mi" (bytes in/out, messages in; label the topic), "rq" (requests and latency; the api),
        # "er" (errors; (api, error))
        self.created: dict[tuple[str, Any], float] = {}
        r.register(_HotCollector(self))
        # the process as Prometheus' own clients export it: process_resident_memory_bytes, process_cpu_seconds_total,
        # process_open_fds / process_max_fds, process_start_time_seconds; python_gc_* per generation
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        self.connections = Gauge("tidelog_connections", "Open client connections", registry=r)
        self._closed = Counter("tidelog_connections_closed", "Connections closed by reason", ["reason"], registry=r)
        # replication (ZooKeeper mode; Kafka's ReplicaManager IsrShrinksPerSec / IsrExpandsPerSec): ISR changes
        # this broker made as a leader and ZooKeeper accepted. The gauges (under-replicated partitions, follower
        # lag) are rows computed at scrape time by the cluster broker (add_rows_source).
        self.isr_shrinks = Counter("tidelog_replicamanager_isr_shrinks", "ISR shrinks written by this leader",
                                   registry=r)
        self.isr_expands = Counter("tidelog_replicamanager_isr_expands", "ISR expansions written by this leader",
                                   registry=r)
        # follower fetch answers whose records failed their check (CRC, batch format) and were fetched again
        self.replica_fetch_invalid_records = Counter(
            "tidelog_replica_fetcher_invalid_records",
            "Partition answers to this broker's replica fetchers rejected as corrupt (CRC, batch format) and fetched "
            "again", registry=r)
        # the controller (Kafka's ControllerStats UncleanLeaderElectionsPerSec): leaders elected from outside the
        # ISR (``unclean.leader.election.enable``), written by this broker while it was the controller
        self.unclean_leader_elections = Counter(
            "tidelog_controller_unclean_leader_elections",
            "Leaders elected from outside the ISR (unclean.leader.election.enable) by this broker as controller",
            registry=r)
        # transactions: from a commit/abort written (PrepareCommit/PrepareAbort) to every marker acknowledged and
        # CompleteCommit/CompleteAbort written (the open-transactions gauge is the coordinator's rows source)
        self.txn_marker_latency = Histogram(
            "tidelog_txn_marker_latency_seconds",
            "Time from PrepareCommit/PrepareAbort written to every marker written and the transaction complete",
            buckets=LATENCY_BUCKETS, registry=r)
        # event-loop lag: how late a 100 ms timer on the broker's loop fires (broker.Broker._loop_lag_monitor);
        # the gauge is the worst lag of the last 5 s, the histogram every sample
        self.loop_lag = Histogram("tidelog_event_loop_lag_seconds",
                                  "How late a periodic 100 ms timer on the broker's event loop fired",
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.loop_lag_max = Gauge("tidelog_event_loop_lag_max_seconds",
                                  "Worst event-loop lag over the last 5 seconds", registry=r)
        self._child_cache: dict[tuple[str, str], Any] = {}
        self._partition_source: Callable[[], Iterable[tuple[str, int, int, int, int, int, int]]] | None = None
        self._server: asyncio.AbstractServer | None = None
        self.port: int | None = None
        # /readyz: True once the broker serves (storage loaded, listeners bound), False again while it shuts down
        self.ready: Callable[[], bool] = lambda: False

    def _child(self, metric: Any, kind: str, label: str) -> Any:
        key = (kind, label)
        child = self._child_cache.get(key)
        if child is None:
            child = metric.labels(label)
            self._child_cache[key] = child
        return child

    # -- hot path ----------------------------------------------------------------------------------------------

    def record_produce(self, topic: str, nbytes: int, records: int) -> None:
        d = self.bytes_in
        v = d.get(topic)
        if v is None:
            v = self._create("bi", topic)
        d[topic] = v + nbytes
        if records:
            d = self.messages_in
            v = d.get(topic)
            if v is None:
                v = self._create("mi", topic)
            d[topic] = v + records

    def record_fetch(self, topic: str, nbytes: int) -> None:
        if nbytes:
            d = self.bytes_out
            v = d.get(topic)
            if v is None:
                v = self._create("bo", topic)
            d[topic] = v + nbytes

    def _create(self, kind: str, label: Any) -> int:
        """A new series: its creation time (``<name>_created``) is now. Returns its initial value, 0."""
        self.created[(kind, label)] = time.time()
        return 0

    def record_request(self, api: str, seconds: float) -> None:
        h = self.requests.get(api)
        if h is None:
            self._create("rq", api)
            h = self.requests[api] = [0, 0.0] + [0] * len(LATENCY_BUCKETS)
        h[0] += 1
        h[1] += seconds
        i = bisect_left(LATENCY_BUCKETS, seconds)
        if i < _NBUCKETS:
            h[i + 2] += 1

    def record_error(self, api: str, error: str, count: int = 1) -> None:
        key = (api, error)
        v = self.errors.get(key)
        if v is None:
            v = self._create("er", key)
        self.errors[key] = v + count

    def record_close(self, reason: str) -> None:
        self._child(self._closed, "cl", reason).inc()

    def forget_topic(self, topic: str) -> None:
        for d in (self.bytes_in, self.bytes_out, self.messages_in):
            d.pop(topic, None)
        for kind in ("bi", "bo", "mi"):
            self.created.pop((kind, topic), None)

    def set_partition_source(self, source: Callable[[], Iterable[tuple[str, int, int, int, int, int, int]]]) -> None:
        if self._partition_source is None:
            self.registry.register(_PartitionCollector(lambda: self._partition_source() if self._partition_source else ()))
        self._partition_source = source

    def add_rows_source(self, source: Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]) -> None:
        """Register gauges computed at scrape time (the log cleaner's metrics)."""
        self.registry.register(_RowsCollector(source))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- HTTP --------------------------------------------------------------------------------------------------

    async def start_http(self, host: str, port: int) -> int:
        """Serve ``GET /metrics``, ``/healthz`` and ``/readyz``. Returns the bound port; a port that cannot be
        bound is an error naming the address (an operator who configured metrics wants them, and a second broker on
        the same host must not silently run unobserved)."""
        try:
            self._server = await asyncio.start_server(self._handle_http, host, port)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"metrics listener {host}:{port} cannot be bound: {exc.strerror or exc} (set "
                "tidelog.metrics.listener to a free host:port, a port of 0 for any free port, or off)",
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics listening", extra={"kv": {"url": f"http://{host}:{self.port}/metrics"}})
        return self.port

    async def stop_http(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            path = request_line[1].split("?")[0] if len(request_line) >= 2 else ""
            if request_line[:1] not in (["GET"], ["HEAD"]):
                body, status, ctype = b"method not allowed\n", b"405 Method Not Allowed", b"text/plain"
            elif path in ("/metrics", "/"):
                body = self.render()
                status = b"200 OK"
                ctype = b"text/plain; version=0.0.4; charset=utf-8"
            elif path == "/healthz":  # liveness: the loop answers
                body, status, ctype = b"ok\n", b"200 OK", b"text/plain"
            elif path == "/readyz":  # readiness: storage loaded and listeners bound, not shutting down
                ready = self.ready()
                body = b"ready\n" if ready else b"not ready\n"
                status, ctype = (b"200 OK" if ready else b"503 Service Unavailable"), b"text/plain"
            else:
                body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                + (body if request_line[:1] != ["HEAD"] else b"")
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

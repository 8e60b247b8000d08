"""The cleaner threads of one broker (Kafka's ``LogCleaner``): each picks the filthiest log and cleans it;
checkpoints, per-log stats and metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidelog.storage.cleaner.clean import clean_log
from tidelog.storage.cleaner.config import CleanerConfig
from tidelog.storage.cleaner.context import CleanerAbortedError, CleanResult, Fault, TopicPartition
from tidelog.storage.cleaner.manager import LogToClean, plan_log
from tidelog.storage.cleaner.throttler import Throttler
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LogCleanerStats:
    """Per-log state shown in metrics and ``tidelog topics describe``."""

    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    dirty_ratio: float = 0.0
    cleanable_bytes: int = 0
    total_bytes: int = 0
    compaction_delay_ms: int = 0
    runs: int = 0
    last_clean_ms: int = -1
    last_seconds: float = 0.0
    last_recopy_percent: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    uncleanable: str | None = None


@dataclass
class _Totals:
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    max_buffer_utilization: float = 0.0
    max_clean_seconds: float = 0.0
    last_recopy_percent: float = 0.0
    dead_threads: int = 0
    last_run_ms: int = -1
    errors: int = 0
    horizons: dict[TopicPartition, int] = field(default_factory=dict)


class LogCleaner:
    """The cleaner threads of one broker (see the package docstring).

    ``logs()`` returns the current logs; ``checkpoints`` is the initial content of every log dir's
    ``cleaner-offset-checkpoint``; ``write_checkpoints(entries)`` persists the whole map (the LogManager
    splits it per log dir).
    """

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Mapping[TopicPartition, PartitionLog]],
        checkpoints: Mapping[TopicPartition, int] | None = None,
        write_checkpoints: Callable[[dict[TopicPartition, int]], None] | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self._logs = logs
        self._checkpoints: dict[TopicPartition, int] = dict(checkpoints or {})
        self._write_checkpoints = write_checkpoints
        self._clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._stats: dict[TopicPartition, LogCleanerStats] = {}
        self._totals = _Totals()
        self._stop = threading.Event()
        self._wakeup = threading.Condition(self._lock)
        self._wake_pending = False
        self._threads: list[threading.Thread] = []
        self.throttler = Throttler(config.io_max_bytes_per_second, self._stop)
        self.fault: Fault | None = None  # test hook, see FAULT_STEPS
        # the offset map of synchronous cleanings (clean_until_done), allocated on first use and reused (cleared
        # by clean_log) like each thread's own map; the lock keeps two synchronous callers from sharing it
        self._sync_map: OffsetMap | None = None
        self._sync_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if not self.config.enable:
            return
        for n in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self, timeout: float = 30.0) -> None:
        self._stop.set()
        with self._lock:
            self._wakeup.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def wakeup(self) -> None:
        """Run a check now instead of after the backoff (tests, topic config changes)."""
        with self._lock:
            self._wake_pending = True
            self._wakeup.notify_all()

    def _run(self) -> None:
        offset_map = OffsetMap(self.config.map_memory_per_thread(), self.config.io_buffer_load_factor)
        while not self._stop.is_set():
            try:
                result = self.clean_filthiest(offset_map)
            except Exception:
                log.exception("log cleaner iteration failed")
                with self._lock:
                    self._totals.errors += 1
                result = None
            if result is not None:
                continue
            with self._lock:
                if not self._wake_pending and not self._stop.is_set():
                    self._wakeup.wait(self.config.backoff_ms / 1000.0)
                self._wake_pending = False

    # ------------------------------------------------------------------ checkpoints
    def checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._checkpoints)

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted: stop an ongoing cleaning and drop its checkpoint."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)
            self._checkpoints.pop(tp, None)
            self._stats.pop(tp, None)
            self._totals.horizons.pop(tp, None)

    def abort(self, tp: TopicPartition) -> None:
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)

    def _persist(self) -> None:
        if self._write_checkpoints is None:
            return
        with self._lock:
            logs = self._logs()
            entries = {tp: off for tp, off in self._checkpoints.items() if tp in logs}
        self._write_checkpoints(entries)

    # ------------------------------------------------------------------ selection and cleaning
    def plans(self, now_ms: int | None = None) -> list[LogToClean]:
        now = self._clock() if now_ms is None else now_ms
        out = []
        for tp, plog in sorted(self._logs().items()):
            if not plog.config.compact:
                continue
            with self._lock:
                cp = self._checkpoints.get(tp)
                horizon = self._totals.horizons.get(tp)
            try:
                ltc = plan_log(tp, plog, cp, now, horizon)
            except (ValueError, OSError):  # closed or deleted concurrently
                continue
            out.append(ltc)
            with self._lock:
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.first_dirty_offset = ltc.first_dirty_offset
                st.first_uncleanable_offset = ltc.first_uncleanable_offset
                st.dirty_ratio = ltc.dirty_ratio
                st.cleanable_bytes = ltc.cleanable_bytes
                st.total_bytes = ltc.total_bytes
                st.compaction_delay_ms = ltc.compaction_delay_ms
        return out

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        candidates = []
        for ltc in self.plans(now_ms):
            ratio_ok = ltc.cleanable_bytes > 0 and ltc.dirty_ratio > ltc.plog.config.min_cleanable_dirty_ratio
            lag_ok = ltc.needs_compaction_now and ltc.cleanable_bytes > 0
            if ratio_ok or lag_ok or ltc.horizon_due:
                candidates.append(ltc)
        with self._lock:
            candidates = [c for c in candidates if c.tp not in self._in_progress]
            if not candidates:
                return None
            best = max(
                candidates,
                key=lambda c: (c.needs_compaction_now or c.cleanable_bytes > 0, c.dirty_ratio, c.compaction_delay_ms),
            )
            self._in_progress.add(best.tp)
            self._aborted.discard(best.tp)
        return best

    def clean_filthiest(self, offset_map: OffsetMap, now_ms: int | None = None) -> CleanResult | None:
        """Pick and clean one log (what each thread does in a loop; tests call it directly)."""
        ltc = self.grab_filthiest(now_ms)
        if ltc is None:
            with self._lock:
                self._totals.last_run_ms = self._clock()
            return None
        tp = ltc.tp
        try:
            result = clean_log(
                ltc,
                offset_map,
                now_ms=now_ms,
                throttler=self.throttler,
                should_abort=lambda: self._stop.is_set() or tp in self._aborted,
                fault=self.fault,
                io_buffer_size=self.config.io_buffer_size,
            )
        except CleanerAbortedError:
            result = CleanResult(tp, ltc.first_dirty_offset, ltc.first_dirty_offset, aborted=True)
        except Exception:
            with self._lock:
                self._in_progress.discard(tp)
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.uncleanable = "error"
            raise
        with self._lock:
            self._in_progress.discard(tp)
            done = not result.aborted and tp not in self._aborted
            if done:
                self._checkpoints[tp] = result.end_offset
                if result.min_delete_horizon is not None:
                    self._totals.horizons[tp] = result.min_delete_horizon
                else:
                    self._totals.horizons.pop(tp, None)
                st = self._stats.setdefault(tp, LogCleanerStats())
                st.runs += 1
                st.first_dirty_offset = result.end_offset
                st.last_clean_ms = self._clock()
                st.last_seconds = result.seconds
                st.last_recopy_percent = result.recopy_percent
                st.bytes_read += result.bytes_read
                st.bytes_written += result.bytes_written
                st.records_removed += result.records_read - result.records_retained
                st.uncleanable = None
                t = self._totals
                t.runs += 1
                t.bytes_read += result.bytes_read
                t.bytes_written += result.bytes_written
                t.max_buffer_utilization = max(t.max_buffer_utilization, result.map_utilization)
                t.max_clean_seconds = max(t.max_clean_seconds, result.seconds)
                t.last_recopy_percent = result.recopy_percent
                t.last_run_ms = st.last_clean_ms
        if done:
            if self.fault is not None:
                self.fault("checkpoint")
            self._persist()
            log.info(
                "cleaned %s-%s: offsets [%d, %d) read %d bytes wrote %d (%.1f%%) in %.3fs, %d groups",
                tp[0], tp[1], ltc.first_dirty_offset, result.end_offset, result.bytes_read,
                result.bytes_written, result.recopy_percent, result.seconds, result.groups,
            )
        return result

    def offset_map(self) -> OffsetMap:
        """The offset map of :meth:`clean_until_done`: allocated (``log.cleaner.dedupe.buffer.size`` / threads) on
        the first call, then the same map, as Kafka keeps one map per cleaner thread; each cleaning clears it."""
        if self._sync_map is None:
            self._sync_map = OffsetMap(self.config.map_memory_per_thread(), self.config.io_buffer_load_factor)
        return self._sync_map

    def clean_until_done(self, now_ms: int | None = None, max_rounds: int = 1000) -> list[CleanResult]:
        """Synchronously clean until no log is eligible (tests, benchmarks), with :meth:`offset_map`."""
        results = []
        with self._sync_lock:
            offset_map = self.offset_map()
            for _ in range(max_rounds):
                r = self.clean_filthiest(offset_map, now_ms)
                if r is None:
                    break
                results.append(r)
                if r.aborted:
                    break
        return results

    # ------------------------------------------------------------------ observability
    def stats(self, refresh: bool = False) -> dict[TopicPartition, LogCleanerStats]:
        """Per-log state as of the last check (``refresh`` recomputes ratios now; it reads segment headers)."""
        if refresh:
            self.plans()
        with self._lock:
            return {tp: LogCleanerStats(**{f: getattr(s, f) for f in s.__slots__}) for tp, s in self._stats.items()}

    def metrics(self) -> list[tuple[str, str, dict[str, str], float]]:
        """(name, help, labels, value) rows for the broker's Prometheus endpoint."""
        per_log = self.stats()
        with self._lock:
            t = self._totals
            dead = sum(1 for th in self._threads if not th.is_alive()) if not self._stop.is_set() else 0
            now = self._clock()
            rows: list[tuple[str, str, dict[str, str], float]] = [
                ("tidelog_cleaner_runs_total", "Completed cleaning rounds", {}, t.runs),
                ("tidelog_cleaner_bytes_read_total", "Bytes read by the cleaner", {}, t.bytes_read),
                ("tidelog_cleaner_bytes_written_total", "Bytes written by the cleaner", {}, t.bytes_written),
                ("tidelog_cleaner_recopy_percent", "Written/read of the last round", {}, t.last_recopy_percent),
                (
                    "tidelog_cleaner_max_buffer_utilization_percent",
                    "Largest offset-map fill seen",
                    {},
                    100.0 * t.max_buffer_utilization,
                ),
                ("tidelog_cleaner_max_clean_time_seconds", "Longest cleaning round", {}, t.max_clean_seconds),
                ("tidelog_cleaner_dead_threads", "Cleaner threads that died", {}, dead),
                ("tidelog_cleaner_errors_total", "Cleaning rounds that failed", {}, t.errors),
                (
                    "tidelog_cleaner_time_since_last_run_ms",
                    "Milliseconds since a cleaner thread last checked",
                    {},
                    now - t.last_run_ms if t.last_run_ms >= 0 else -1,
                ),
            ]
        max_dirty = 0.0
        for (topic, partition), s in per_log.items():
            labels = {"topic": topic, "partition": str(partition)}
            max_dirty = max(max_dirty, s.dirty_ratio)
            rows += [
                ("tidelog_cleaner_dirty_ratio", "Dirty bytes / cleanable bytes per log", labels, s.dirty_ratio),
                ("tidelog_cleaner_first_dirty_offset", "Where the next cleaning starts", labels, s.first_dirty_offset),
                ("tidelog_cleaner_cleanable_bytes", "Dirty bytes the cleaner may clean now", labels, s.cleanable_bytes),
                ("tidelog_cleaner_log_runs_total", "Cleaning rounds per log", labels, s.runs),
                ("tidelog_cleaner_last_clean_timestamp_ms", "When the log was last cleaned", labels, s.last_clean_ms),
                (
                    "tidelog_cleaner_max_compaction_delay_ms",
                    "How far past max.compaction.lag.ms the oldest dirty record is",
                    labels,
                    s.compaction_delay_ms,
                ),
            ]
        rows.append(("tidelog_cleaner_max_dirty_percent", "Highest dirty ratio of any log", {}, 100.0 * max_dirty))
        return rows

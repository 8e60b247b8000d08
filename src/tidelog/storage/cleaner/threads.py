"""The cleaner threads of one broker (Kafka's ``LogCleaner``): each asks the :class:`LogCleanerManager` for the
filthiest log and cleans it; cleaner-wide totals and metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.storage.cleaner.clean import clean_log
from tidelog.storage.cleaner.config import CleanerConfig
from tidelog.storage.cleaner.context import CleanerAbortedError, CleanResult, Fault, TopicPartition
from tidelog.storage.cleaner.manager import LogCleanerManager, LogCleanerStats, LogToClean
from tidelog.storage.cleaner.throttler import Throttler
from tidelog.storage.log import PartitionLog
from tidelog.storage.offset_map import OffsetMap

log = logging.getLogger(__name__)


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
        self._clock = clock_ms or (lambda: time.time_ns() // 1_000_000)
        #: which log is cleaned next, checkpoints, per-log stats; its lock is this cleaner's lock too
        self.manager = LogCleanerManager(logs, checkpoints, write_checkpoints, clock_ms=self._clock)
        self._lock = self.manager.lock
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

    def reconfigure(self, config: CleanerConfig) -> None:
        """A new config while running (dynamic ``log.cleaner.*``): the threads stop after their current cleaning
        and start again with it (Kafka's LogCleaner.reconfigure: shutdown, then startup with the new config)."""
        self.shutdown()
        self.config = config
        self._stop = threading.Event()
        self.throttler = Throttler(config.io_max_bytes_per_second, self._stop)
        self.start()

    @property
    def thread_count(self) -> int:
        """Cleaner threads alive now."""
        return sum(1 for t in self._threads if t.is_alive())

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

    # ------------------------------------------------------------------ checkpoints and selection (the manager)
    def checkpoints(self) -> dict[TopicPartition, int]:
        return self.manager.checkpoints()

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted: stop an ongoing cleaning and drop its checkpoint."""
        self.manager.forget(tp)

    def abort(self, tp: TopicPartition) -> None:
        self.manager.abort(tp)

    def plans(self, now_ms: int | None = None) -> list[LogToClean]:
        return self.manager.plans(now_ms)

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        return self.manager.grab_filthiest(now_ms)

    # ------------------------------------------------------------------ cleaning
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
                should_abort=lambda: self._stop.is_set() or self.manager.aborted(tp),
                fault=self.fault,
                io_buffer_size=self.config.io_buffer_size,
            )
        except CleanerAbortedError:
            result = CleanResult(tp, ltc.first_dirty_offset, ltc.first_dirty_offset, aborted=True)
        except Exception:
            self.manager.cleaning_failed(tp)
            raise
        with self._lock:
            st = self.manager.done_cleaning_locked(tp, result)
            done = st is not None
            if done:
                t = self._totals
                t.runs += 1
                t.bytes_read += result.bytes_read
                t.bytes_written += result.bytes_written
                t.max_buffer_utilization = max(t.max_buffer_utilization, result.map_utilization)
                t.max_clean_seconds = max(t.max_clean_seconds, result.seconds)
                t.last_recopy_percent = result.recopy_percent
                t.last_run_ms = st.last_clean_ms if st is not None else t.last_run_ms
        if done:
            if self.fault is not None:
                self.fault("checkpoint")
            self.manager.persist()
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
        return self.manager.stats(refresh)

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
                ("tidelog_cleaner_threads", "Cleaner threads running (log.cleaner.threads)", {},
                 0 if self._stop.is_set() else sum(1 for th in self._threads if th.is_alive())),
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

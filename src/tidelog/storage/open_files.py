"""The open-file budget: how many more partitions this process can open before it runs out of descriptors.

A partition costs one descriptor per segment ``.log`` (Kafka's cost: every segment's file stays open; the index
files are mapped without a descriptor, ``storage/index.py``). With the common ``ulimit -n`` of 1,024, a broker
that opened whatever it was asked would hit EMFILE in the middle of a creation, or at its next start. Kafka has no
such check (it expects the limit to be raised, as its documentation says); tidelog refuses up front instead: a
change that would open ``n`` more files is refused when the descriptors open now plus ``n`` exceed the soft
``RLIMIT_NOFILE`` minus a reserve kept for checkpoints, recovery threads, segment rolls and the transient files of
index writes. The reserve is ``tidelog.open.files.reserve``, by default a quarter of the limit (at least 64): 768
descriptors for partitions and connections under a limit of 1,024. Internal topics are held to it like any other
(issue 24). Connections share the same 768: the broker's default ``max.connections`` is what the files leave of
them (``broker/connection_limits.py``), and the descriptors open counted here include the connections.

Running out anyway (EMFILE, ENFILE: an explicit ``max.connections`` above that, another process's descriptors) is
not a disk failure: :data:`SHORTAGE` counts and logs it, and the storage operation is deferred or fails alone.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
import time

from tidelog.storage.errors import KafkaStorageError, StorageError

log = logging.getLogger("tidelog.storage.open_files")

#: errnos of a process (EMFILE) or system (ENFILE) out of file descriptors
FD_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})


def is_fd_exhaustion(exc: BaseException) -> bool:
    """Whether ``exc`` says the process or the system ran out of file descriptors (EMFILE, ENFILE): not a disk
    failure, the same operation succeeds once descriptors are free again."""
    return isinstance(exc, OSError) and exc.errno in FD_EXHAUSTED


class DescriptorsExhaustedError(KafkaStorageError):
    """A storage operation failed for want of a file descriptor (EMFILE/ENFILE). The client gets
    KAFKA_STORAGE_ERROR (retriable) for that request only: the log and its directory stay online, and what was
    not done (a checkpoint, a flush, a roll) is done again later (issue 24)."""


class DescriptorShortage:
    """The storage operations that met EMFILE/ENFILE, process-wide (descriptors are the process's): a count per
    operation for the metrics (``tidelog_fd_exhausted_total{operation}``) and a warning per operation at most
    every ``log_interval_s``."""

    def __init__(self, log_interval_s: float = 10.0) -> None:
        self.log_interval_s = log_interval_s
        self.counts: dict[str, int] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # operation -> (when last logged, count then)
        self._lock = threading.Lock()

    def note(self, operation: str, exc: OSError, where: object = None) -> DescriptorsExhaustedError:
        """Count and (rate-limited) log one failure; returns the error to raise to the caller."""
        now = time.monotonic()
        with self._lock:
            n = self.counts[operation] = self.counts.get(operation, 0) + 1
            last, seen = self._logged.get(operation, (float("-inf"), 0))
            emit = now - last >= self.log_interval_s
            if emit:
                self._logged[operation] = (now, n)
        if emit:
            log.warning("out of file descriptors: %s deferred, not a disk failure (the log directory stays online; "
                        "retried once descriptors are free)", operation,
                        extra={"kv": {"operation": operation, "where": where or exc.filename or "",
                                      "error": exc.strerror or str(exc), "limit": open_file_limit() or "unlimited",
                                      "open": open_file_count(), "since_last_warning": n - seen}})
        return DescriptorsExhaustedError(describe_os_error(exc))

    def rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        with self._lock:
            counts = dict(self.counts)
        return [("tidelog_fd_exhausted_total", "Storage operations that failed with EMFILE/ENFILE and were deferred "
                 "(not a log directory failure)", {"operation": op}, float(n)) for op, n in sorted(counts.items())]


#: the process's record (one per process: descriptors are per process)
SHORTAGE = DescriptorShortage()


class OpenFileLimitError(StorageError):
    """Opening the files asked for would exceed the open-file budget (nothing was opened).

    ``kafka_error`` is the storage layer's KAFKA_STORAGE_ERROR; the topic store answers a refused creation with
    POLICY_VIOLATION and the same message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def open_file_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def open_file_count() -> int | None:
    """Descriptors this process holds now (``/proc/self/fd``), or None where that is not readable."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # listdir's own descriptor
    except OSError:
        return None


def default_reserve(limit: int) -> int:
    return max(64, limit // 4)


class OpenFileBudget:
    """``check(n, what)`` raises :class:`OpenFileLimitError` when ``n`` more open files would pass the budget."""

    def __init__(self, reserve: int | None = None) -> None:
        self.reserve = reserve

    def headroom(self) -> int | None:
        """Files that may still be opened (may be negative), or None when there is no limit to keep to."""
        limit = open_file_limit()
        used = open_file_count()
        if limit is None or used is None:
            return None
        reserve = self.reserve if self.reserve is not None else default_reserve(limit)
        return limit - reserve - used

    def check(self, n: int, what: str) -> None:
        room = self.headroom()
        if room is None or n <= room:
            return
        limit = open_file_limit()
        used = open_file_count()
        reserve = self.reserve if self.reserve is not None else default_reserve(limit or 0)
        raise OpenFileLimitError(
            f"{what} needs {n} more open files (one per partition's .log), but the broker's open-file limit "
            f"(ulimit -n) is {limit}, {used} are open and {reserve} are kept in reserve "
            f"(tidelog.open.files.reserve): at most {max(room, 0)} more can be opened. Raise the limit "
            f"(ulimit -n / LimitNOFILE) or use fewer partitions."
        )


def describe_os_error(exc: OSError) -> str:
    """The message a client gets for an OSError of the storage layer (KAFKA_STORAGE_ERROR)."""
    if exc.errno in FD_EXHAUSTED:
        limit = open_file_limit()
        return (f"{exc.strerror or 'Too many open files'}: the broker reached its open-file limit (ulimit -n "
                f"{limit if limit is not None else 'unlimited'}){f' at {exc.filename}' if exc.filename else ''}")
    return f"I/O error in the log directory: {exc}"

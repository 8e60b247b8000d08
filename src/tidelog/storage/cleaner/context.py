"""What one cleaning round carries through both passes (the offset-map build and the recopy): its
:class:`CleanResult` (Kafka's ``CleanerStats``), the abort check and throttling (:class:`_Context`), the
fault-injection steps and the cleaner's errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidelog.storage.cleaner.throttler import Throttler

TopicPartition = tuple[str, int]
Fault = Callable[[str], None]

#: the fault-injection steps, in order (tests raise or exit at each)
FAULT_STEPS = ("map-built", "cleaned", "swap", "old-deleted", "swapped", "checkpoint")


class CleanerAbortedError(Exception):
    """Cleaning stopped because the cleaner is shutting down or the log went away."""


class DedupeBufferTooSmallError(Exception):
    """One batch has more records than the offset map can hold."""


@dataclass(slots=True)
class CleanResult:
    tp: TopicPartition
    first_dirty_offset: int
    end_offset: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    batches_rewritten: int = 0
    groups: int = 0
    map_entries: int = 0
    map_utilization: float = 0.0
    seconds: float = 0.0
    min_delete_horizon: int | None = None
    aborted: bool = False

    @property
    def recopy_percent(self) -> float:
        return 100.0 * self.bytes_written / self.bytes_read if self.bytes_read else 0.0


class _Context:
    def __init__(
        self,
        throttler: Throttler | None,
        should_abort: Callable[[], bool],
        fault: Fault | None,
        result: CleanResult,
        chunk: int = 512 * 1024,
    ) -> None:
        self.chunk = chunk  # bytes per segment read
        self.throttler = throttler
        self.should_abort = should_abort
        self.fault = fault
        self.result = result

    def io(self, nbytes: int) -> None:
        """Account ``nbytes`` read or written (throttling) and stop when the cleaning is aborted. The copy loops
        call it once per :data:`IO_CHECK_BYTES` (and at each segment's end), not per batch."""
        if self.should_abort():
            raise CleanerAbortedError("cleaning aborted")
        if self.throttler is not None:
            self.throttler.maybe_throttle(nbytes)

    def step(self, name: str) -> None:
        if self.fault is not None:
            self.fault(name)


#: the copy loops add up the bytes of their batches and call :meth:`_Context.io` (abort check, throttling) once
#: this many have passed, and at each segment's end
IO_CHECK_BYTES = 64 * 1024

"""How storage reports the progress of a log recovery, without knowing who shows it.

The :class:`~tidelog.storage.manager.LogManager` is given a :class:`RecoveryProgress` by whoever starts it (the
``tidelog serve`` command passes a progress bar when stderr is a terminal; a broker embedded in another program,
the tests and the tools pass none). Storage itself writes only log lines ("unclean shutdown of <dir>:
recovering N logs ...", "completed load of ...").
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

#: Report recovery progress only when at least this many log bytes must be scanned.
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


class RecoveryProgress(Protocol):
    """Called once, with the bytes the recovery will scan (from every log's recovery point), when that is at
    least :data:`PROGRESS_MIN_BYTES`; the context manager it returns is open for the whole recovery and yields
    ``advance(nbytes)``, which the recovery threads call (concurrently) as they scan."""

    def __call__(self, total_bytes: int) -> AbstractContextManager[Callable[[int], None]]: ...

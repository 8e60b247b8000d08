"""The recovery progress bar of ``tidelog serve``: a rich bar on stderr, for a person at a terminal. Storage
reports progress through :class:`tidelog.storage.progress.RecoveryProgress` and knows nothing of rich."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from tidelog.storage.progress import RecoveryProgress


@contextlib.contextmanager
def rich_recovery_progress(total_bytes: int) -> Iterator[Callable[[int], None]]:
    """A transient progress bar on stderr over ``total_bytes``; yields ``advance(nbytes)``. rich is imported
    here, when a recovery needs the bar (~80 ms that a normal start does not pay)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("recovering logs"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("recovery", total=total_bytes)

        def advance(nbytes: int) -> None:
            progress.advance(task, nbytes)

        yield advance


def terminal_recovery_progress() -> RecoveryProgress | None:
    """The bar when stderr is a terminal; None for a log file or a pipe (they get the per-log lines only)."""
    return rich_recovery_progress if sys.stderr.isatty() else None

"""``tidelog serve``'s recovery progress bar (``tidelog.cli.progress``): the RecoveryProgress storage is given."""

from __future__ import annotations

import io
import sys

import pytest
import rich.progress

from tidelog.cli import progress
from tidelog.storage.progress import RecoveryProgress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress.terminal_recovery_progress() is None  # a log file or a pipe: the log lines only
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert progress.terminal_recovery_progress() is progress.rich_recovery_progress


def test_the_bar_counts_the_scanned_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks: list[object] = []

    class Recording(rich.progress.Progress):
        def __exit__(self, *exc: object) -> None:
            tasks.extend(self.tasks)
            super().__exit__(*exc)  # type: ignore[arg-type]

    monkeypatch.setattr(rich.progress, "Progress", Recording)
    bar: RecoveryProgress = progress.rich_recovery_progress
    with bar(1000) as advance:
        advance(300)
        advance(700)
    (task,) = tasks
    assert task.total == 1000 and task.completed == 1000 and task.finished  # type: ignore[attr-defined]

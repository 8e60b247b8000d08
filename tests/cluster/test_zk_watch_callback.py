"""A watch callback or background step that meets an unreachable ZooKeeper logs one warning line (no traceback)
and keeps its watch; any other error still propagates / is logged with its traceback (``zk_bounded``)."""

from __future__ import annotations

import logging

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from tidelog.cluster.zk_async import ZooKeeperGone
from tidelog.cluster.zk_bounded import log_zk_failure, watch_callback

log = logging.getLogger("tidelog.tests.zk_watch_callback")


@pytest.mark.parametrize("exc", [ConnectionLoss(), SessionExpiredError(), ZooKeeperGone("gone")])
def test_an_outage_in_a_watch_callback_is_one_warning_and_keeps_the_watch(
        exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    @watch_callback("reading changes", log)
    def callback(children: list[str]) -> bool | None:
        raise exc

    with caplog.at_level(logging.WARNING, logger=log.name):
        assert callback(["a"]) is None  # None: kazoo keeps the watch (False would stop it)
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and rec.exc_info is None
    assert "reading changes: ZooKeeper unreachable" in rec.getMessage()


def test_any_other_error_in_a_watch_callback_propagates() -> None:
    @watch_callback("reading changes", log)
    def callback(children: list[str]) -> bool | None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        callback([])


def test_log_zk_failure_keeps_the_traceback_of_a_defect(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_zk_failure(log, "re-registration failed", ConnectionLoss())
        try:
            raise KeyError("x")
        except KeyError as bug:
            log_zk_failure(log, "re-registration failed", bug)
    outage, defect = caplog.records
    assert outage.levelno == logging.WARNING and outage.exc_info is None
    assert defect.levelno == logging.ERROR and defect.exc_info is not None and defect.exc_info[0] is KeyError

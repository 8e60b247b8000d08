"""The broker's event-loop lag metrics (``tidelog_event_loop_lag_seconds`` and ``..._max_seconds``): a stall of
the whole process (SIGSTOP for 0.6 s) shows up as a late timer in both."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from helpers import metric_value, wait_for


def test_a_stalled_loop_shows_in_the_lag_metrics(broker: Any) -> None:
    wait_for(lambda: metric_value(broker, "tidelog_event_loop_lag_seconds_count") >= 3, 30, "lag samples")
    assert metric_value(broker, "tidelog_event_loop_lag_max_seconds") < 0.5  # idle broker: no stall yet
    before = metric_value(broker, "tidelog_event_loop_lag_seconds_count")
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.6)  # the stall itself: the process is stopped for this long
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    wait_for(lambda: metric_value(broker, "tidelog_event_loop_lag_seconds_count") > before, 30, "a sample")
    assert metric_value(broker, "tidelog_event_loop_lag_max_seconds") >= 0.5

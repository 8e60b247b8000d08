"""An opt-in timestamp log of the sources' planning and reads (issue 29: where a pushed query's time goes).

Set ``TIDELOG_SPARK_TRACE`` to a file path in the environment of the driver before the SparkSession starts (local
mode: the Python workers inherit it; a cluster: ``spark.executorEnv.TIDELOG_SPARK_TRACE``); every planning call and
every task's read then appends one line per event: the wall clock (``time.time()``, comparable across the
processes of one machine), the process id and the event. Off (the default), :func:`trace` is one global lookup.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("TIDELOG_SPARK_TRACE") or None
TRACING = _PATH is not None
"""Whether events are written: guard the per-Fetch events with it, so that their text is not even formatted."""


def trace(event: str) -> None:
    """Append ``<time> <pid> <event>`` to the trace file when ``TIDELOG_SPARK_TRACE`` is set."""
    if _PATH is None:
        return
    with open(_PATH, "a") as f:  # one write per line: lines of concurrent workers do not interleave
        f.write(f"{time.time():.6f} {os.getpid()} {event}\n")


trace("tidelog.spark imported")

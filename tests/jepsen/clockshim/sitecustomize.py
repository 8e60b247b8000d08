"""Wall-clock steps for one broker (the ``clock`` nemesis): loaded at interpreter start because the harness puts
this directory on the broker's ``PYTHONPATH``; ``time.time``/``time.time_ns`` return the real time plus the offset
(seconds, e.g. ``-300``) written in the file ``$TIDELOG_CLOCK_FILE`` (re-read at most every 0.5 s). The monotonic
clock is untouched, as with an NTP step. (libfaketime 0.9.10 cannot do this for Python 3.11: with
``FAKETIME_DONT_FAKE_MONOTONIC`` every ``time.sleep`` fails with EINVAL -- its ``clock_nanosleep`` wrapper --
which killed kazoo's connection thread in the first runs.)"""

import os
import time

_FILE = os.environ.get("TIDELOG_CLOCK_FILE")
if _FILE:
    _real_time, _real_time_ns, _mono = time.time, time.time_ns, time.monotonic
    _state = {"offset": 0.0, "read": -1.0}

    def _offset() -> float:
        now = _mono()
        if now - _state["read"] >= 0.5:
            _state["read"] = now
            try:
                with open(_FILE) as f:
                    _state["offset"] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return _state["offset"]

    def _time() -> float:
        return _real_time() + _offset()

    def _time_ns() -> int:
        return _real_time_ns() + int(_offset() * 1e9)

    time.time = _time
    time.time_ns = _time_ns

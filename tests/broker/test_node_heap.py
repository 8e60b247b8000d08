"""``tidelog.node.settle_heap``: what the broker process does to its heap once started (run in a child
interpreter: ``gc.freeze`` would otherwise freeze this test process's own objects)."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import gc, json, weakref
from tidelog.protocol.schema import spec_index
from tidelog.node import settle_heap

class Node:
    pass

before = gc.get_freeze_count()
startup = Node(); startup.self = startup  # a cycle alive at startup: frozen, not collected
settle_heap()
frozen = gc.get_freeze_count()
info = spec_index.cache_info()
later = Node(); later.self = later  # a cycle made after startup: still collected
gone = []
ref = weakref.ref(later, lambda _r: gone.append(True))
del later
gc.collect()
print(json.dumps({"before": before, "frozen": frozen, "spec_cached": info.currsize, "later_collected": bool(gone),
                  "startup_alive": startup.self is startup}))
"""


def test_settle_heap_freezes_startup_objects_and_still_collects_later_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"] == 0
    assert result["frozen"] > 1000  # the startup heap (modules, specs): thousands of objects
    assert result["spec_cached"] == 1  # the spec index is loaded before the first request
    assert result["later_collected"] is True
    assert result["startup_alive"] is True

"""Shared by every test package (pytest runs in importlib import mode, so nothing here is importable by default).

* ``tests/integration``, ``tests/cluster``, ``tests/docs``, ``tests/broker/txn`` and ``tests/jepsen`` are put on ``sys.path``: ``from helpers
  import ...``, ``from support import ...`` (the cluster tests' shared helpers), ``from docrun import ...`` (the
  runner of the documents' console blocks) and ``from txnhelp import ...`` (the transaction suites' clients and
  readers) work in any test module.
* ``broker`` / ``broker_factory``: the fixtures of tests/integration/conftest.py, loaded
  once here so every package gets them (one implementation; see that file for what they do).
* tidelog's sources are byte-compiled once, before anything imports them (``_compile_tidelog``).
"""

from __future__ import annotations

import compileall
import importlib.util
import sys
from pathlib import Path


def _compile_tidelog() -> None:
    """Write tidelog's ``__pycache__`` once for the session. CI (and the helpers' shells) run with
    PYTHONDONTWRITEBYTECODE=1, so without this every ``tidelog serve`` / CLI subprocess a test starts compiled ~220
    modules from source again: about half of a broker's start-up CPU (bench/startup_bench.py), thousands of
    starts in the suite. Python still checks each .pyc against its source's mtime and size, so an edited module
    is recompiled, never run stale; a read-only checkout is simply not cached (as before)."""
    spec = importlib.util.find_spec("tidelog")
    if spec is None or not spec.submodule_search_locations:
        return
    for location in spec.submodule_search_locations:
        compileall.compile_dir(location, quiet=2, workers=1)


_compile_tidelog()

_INTEGRATION = Path(__file__).resolve().parent / "integration"
for _dir in (_INTEGRATION, _INTEGRATION.parent / "cluster", _INTEGRATION.parent / "docs", _INTEGRATION.parent / "broker" / "txn",
             _INTEGRATION.parent / "jepsen", _INTEGRATION.parent / "java"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

_spec = importlib.util.spec_from_file_location("tidelog_test_broker_fixtures", _INTEGRATION / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

broker_factory = _fixtures.broker_factory
broker = _fixtures.broker

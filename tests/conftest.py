"""Shared by every test package (pytest runs in importlib import mode, so nothing here is importable by default).

* ``tests/integration``, ``tests/cluster``, ``tests/docs``, ``tests/broker/txn`` and ``tests/jepsen`` are put on ``sys.path``: ``from helpers
  import ...``, ``from support import ...`` (the cluster tests' shared helpers), ``from docrun import ...`` (the
  runner of the documents' console blocks) and ``from txnhelp import ...`` (the transaction suites' clients and
  readers) work in any test module.
* ``broker`` / ``broker_factory``: the fixtures of tests/integration/conftest.py, loaded
  once here so every package gets them (one implementation; see that file for what they do).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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

"""Cleanup tests: make ``cleanup_helpers`` importable (importlib import mode) and share the broker fixtures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
if str(_here) not in sys.path:
    sys.path.insert(0, str(_here))

_path = _here.parent / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_cleanup_broker_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

BrokerProcess = _fixtures.BrokerProcess
broker_factory = _fixtures.broker_factory
broker = _fixtures.broker

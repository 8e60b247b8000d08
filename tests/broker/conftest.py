"""Broker test fixtures: the same ``broker`` / ``broker_factory`` as tests/integration (one implementation)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_spec = importlib.util.spec_from_file_location("tidelog_test_broker_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

BrokerProcess = _fixtures.BrokerProcess
broker_factory = _fixtures.broker_factory
broker = _fixtures.broker

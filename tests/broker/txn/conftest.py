"""Fixtures of the transaction suites (issue 14): a real ``tidelog serve`` set up for transactions.

* ``txnhelp`` (shared clients, readers, the ``txn_worker.py`` subprocess runner) is importable from every test
  module: tests/conftest.py puts ``tests/broker/txn`` on ``sys.path``.
* ``txn_broker`` (module scope): one broker with short group and transaction timers (see ``TXN_BROKER``).
"""

from __future__ import annotations

from typing import Any

import pytest
from txnhelp import TXN_BROKER


@pytest.fixture(scope="module")
def txn_broker(broker_factory: Any) -> Any:
    return broker_factory(TXN_BROKER)

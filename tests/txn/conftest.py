"""Fixtures of the transaction suites (issue 14): a real ``tidelog serve`` set up for transactions.

* ``tests/txn`` is put on ``sys.path`` so the test modules can ``from txnhelp import ...`` (shared clients and
  readers) and the fault tests can run ``txn_worker.py`` as a subprocess.
* ``txn_broker`` (module scope): one broker with short group and transaction timers (see ``TXN_BROKER``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

from txnhelp import TXN_BROKER  # noqa: E402


@pytest.fixture(scope="module")
def txn_broker(broker_factory: Any) -> Any:
    return broker_factory(TXN_BROKER)

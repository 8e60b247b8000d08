"""Cleanup tests: make ``cleanup_helpers`` importable (importlib import mode); broker fixtures: tests/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
if str(_here) not in sys.path:
    sys.path.insert(0, str(_here))

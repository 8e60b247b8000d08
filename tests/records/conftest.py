"""Make ``records_helpers`` importable under pytest's importlib import mode."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

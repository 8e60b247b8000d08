"""CRC-32C (Castagnoli).

With the C extension in use (built, and ``TIDELOG_PURE_PYTHON`` not set) every CRC in tidelog is
``tidelog.records._recwalk.crc32c``: carry-less-multiply folding (VPCLMULQDQ on AVX-512 CPUs, else PCLMULQDQ)
above a few hundred bytes, the SSE4.2 crc32 instruction below, slicing-by-8 without either. Otherwise the
``crc32c`` package (also hardware accelerated). Both are tested to agree bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from crc32c import crc32c as _package_crc32c


def _load() -> tuple[Callable[..., int], str]:
    if os.environ.get("TIDELOG_PURE_PYTHON", "").strip() not in ("", "0"):
        return _package_crc32c, "crc32c package"
    try:
        from tidelog.records._recwalk import CRC32C_PATH
        from tidelog.records._recwalk import crc32c as c_crc32c
    except ImportError:  # not built, or built before CRC32C_PATH existed
        return _package_crc32c, "crc32c package"
    return c_crc32c, f"tidelog C ({CRC32C_PATH})"


_crc32c, IMPLEMENTATION = _load()
"""``_crc32c(data, value=0) -> int``, the raw function (no Python frame), and which one it is."""


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` (optionally continuing from ``value``)."""
    return _crc32c(data, value)

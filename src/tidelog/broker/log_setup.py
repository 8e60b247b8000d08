"""Structured logging for the broker: JSON lines or ``key=value`` text, one line per event.

Use the standard ``logging`` module everywhere; pass structured fields with ``extra={"kv": {...}}``::

    log.info("connection closed", extra={"kv": {"peer": peer, "reason": "oversized frame"}})

The text format is ``2025-01-01T00:00:00.123Z INFO tidelog.broker.server connection closed peer=... reason=...``;
the JSON format is one object per line with ``ts``, ``level``, ``logger``, ``msg`` and the fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

_RESERVED = {"ts", "level", "logger", "msg"}


def _fmt_time(created: float) -> str:
    t = time.gmtime(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int((created % 1) * 1000):03d}Z"


def _kv_value(v: Any) -> str:
    """A field value for the text format: quoted (JSON string escapes) when it is empty or holds a space, a
    quote, ``=`` or any character that is not printable, so a client-chosen value (a client id with a newline, a
    carriage return or a terminal escape) can never start or rewrite a log line."""
    s = str(v)
    if s == "" or any(c in ' "=' or not c.isprintable() for c in s):
        return json.dumps(s)
    return s


def _printable(text: str) -> str:
    """The message with every non-printable character escaped (``\n`` -> ``\\n``): one event, one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_fmt_time(record.created), record.levelname, record.name, _printable(record.getMessage())]
        kv = getattr(record, "kv", None)
        if kv:
            parts.extend(f"{k}={_kv_value(v)}" for k, v in kv.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": _fmt_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        kv = getattr(record, "kv", None)
        if kv:
            for k, v in kv.items():
                obj[k if k not in _RESERVED else f"field_{k}"] = v if isinstance(v, (int, float, bool)) else str(v)
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, separators=(",", ":"))


def setup_logging(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Configure the root logger once (idempotent: replaces handlers installed by a previous call)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r} (text or json)")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_tidelog", False):
            root.removeHandler(h)
    handler._tidelog = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())

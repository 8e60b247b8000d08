"""The cleaner's broker-level settings (Kafka's ``CleanerConfig``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DOUBLE_MAX = 1.7976931348623157e308


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's ``CleanerConfig`` names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15000

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> CleanerConfig:
        """From broker properties (``log.cleaner.*``); a bad value raises ValueError naming the key."""
        d = cls()

        def get(name: str, default: Any, parse: Callable[[str], Any], ok: Callable[[Any], bool], why: str) -> Any:
            raw = props.get(name)
            if raw is None:
                return default
            try:
                value = parse(str(raw).strip())
            except ValueError:
                raise ValueError(f"Invalid value {raw!r} for configuration {name}: {why}") from None
            if not ok(value):
                raise ValueError(f"Invalid value {raw!r} for configuration {name}: {why}")
            return value

        def boolean(s: str) -> bool:
            if s.lower() not in ("true", "false"):
                raise ValueError(s)
            return s.lower() == "true"

        return cls(
            enable=get("log.cleaner.enable", d.enable, boolean, lambda _v: True, "expected true or false"),
            threads=get("log.cleaner.threads", d.threads, int, lambda v: v >= 0, "must be >= 0"),
            dedupe_buffer_size=get(
                "log.cleaner.dedupe.buffer.size", d.dedupe_buffer_size, int, lambda v: v >= 24, "must be >= 24"
            ),
            io_buffer_load_factor=get(
                "log.cleaner.io.buffer.load.factor",
                d.io_buffer_load_factor,
                float,
                lambda v: 0 < v <= 1,
                "must be in (0, 1]",
            ),
            io_buffer_size=get("log.cleaner.io.buffer.size", d.io_buffer_size, int, lambda v: v >= 0, "must be >= 0"),
            io_max_bytes_per_second=get(
                "log.cleaner.io.max.bytes.per.second",
                d.io_max_bytes_per_second,
                float,
                lambda v: v > 0,
                "must be > 0",
            ),
            backoff_ms=get("log.cleaner.backoff.ms", d.backoff_ms, int, lambda v: v >= 0, "must be >= 0"),
        )

    def map_memory_per_thread(self) -> int:
        return max(24, self.dedupe_buffer_size // max(1, self.threads))

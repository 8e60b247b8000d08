"""Segment file names, as Kafka's ``LogFileUtils``: ``<base offset, 20 digits><suffix>``."""

from __future__ import annotations

from pathlib import Path

from tidelog.storage.format import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX


def filename_prefix(offset: int) -> str:
    """The base offset padded to 20 digits, as Kafka's ``LogFileUtils.filenamePrefixFromOffset``."""
    if offset < 0:
        raise ValueError(f"negative base offset {offset}")
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{LOG_SUFFIX}{suffix}"


def index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(offset)}{TXN_INDEX_SUFFIX}{suffix}"


def offset_from_filename(name: str) -> int:
    """Base offset from a segment file name such as ``00000000000000000042.log`` (suffixes allowed)."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not a segment file name (20-digit base offset expected)")
    return int(prefix)

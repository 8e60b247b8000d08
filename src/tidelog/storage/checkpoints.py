"""Kafka's small state files: offset checkpoints, leader-epoch checkpoint, partition.metadata,
meta.properties and the clean-shutdown marker.

Every writer goes through :func:`atomic_write` (``<file>.tmp`` + fsync + ``os.replace`` + fsync of the
directory), so a crash leaves either the old file or the new one, never a torn one. Every reader is
strict: anything Kafka itself would refuse (wrong version, count mismatch, malformed line) raises
:class:`CorruptCheckpointError` naming the file and the problem.

Formats (Kafka sources ``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``,
``CheckpointFile``, ``PartitionMetadata``, ``MetaProperties``, ``CleanShutdownFileHandler``)::

    recovery-point-offset-checkpoint      0\\n N\\n  "topic partition offset\\n" x N
    leader-epoch-checkpoint               0\\n N\\n  "epoch startOffset\\n" x N
    partition.metadata                    "version: 0\\ntopic_id: <22-char base64url>"   (no trailing newline)
    meta.properties                       Java properties, "#\\n#<date>\\n" then key=value lines
    .kafka_cleanshutdown                  {"version":0,"brokerEpoch":N}
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tidelog.storage.errors import CorruptCheckpointError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

OFFSET_CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
CLEAN_SHUTDOWN_VERSION = 0

_INT = re.compile(r"-?[0-9]+\Z")
_WS = re.compile(r"\s+")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

TopicPartition = tuple[str, int]


# --------------------------------------------------------------------------------------------- atomic write


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename or create inside it is durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Replace ``path`` with ``data`` atomically: write ``<path>.tmp``, fsync, rename over, fsync the dir.
    ``mode``: the new file's permissions (before the umask; 0o600 for a secret).

    If anything fails the ``.tmp`` file is removed and the old ``path`` (if any) is left untouched.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text ({e})") from None


def _parse_int(path: Path, text: str, what: str, lo: int, hi: int) -> int:
    if not _INT.match(text):
        raise CorruptCheckpointError(f"{path}: malformed {what} {text!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise CorruptCheckpointError(f"{path}: {what} {value} out of range")
    return value


# ------------------------------------------------------------------------------- versioned text checkpoints


def _read_checkpoint_lines(path: Path, version: int, fields: int) -> list[list[str]] | None:
    """Kafka's CheckpointFile framing: version line, count line, then exactly ``count`` entry lines.

    Returns None for a missing file; an empty file reads as no entries (as in Kafka).
    """
    text = _read_text(path)
    if text is None:
        return None
    if text == "":
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    else:
        raise CorruptCheckpointError(f"{path}: truncated (last line has no newline)")
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: truncated: missing the entry count line")
    found_version = _parse_int(path, lines[0].strip(), "version line", _INT32_MIN, _INT32_MAX)
    if found_version != version:
        raise CorruptCheckpointError(f"{path}: unrecognised version {found_version} (expected {version})")
    count = _parse_int(path, lines[1].strip(), "entry count", 0, _INT32_MAX)
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries but found {len(body)}")
    entries = []
    for line in body:
        parts = _WS.split(line.strip())
        if len(parts) != fields:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r} (expected {fields} fields)")
        entries.append(parts)
    return entries


def _write_checkpoint_lines(path: Path, version: int, lines: list[str]) -> None:
    text = f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    atomic_write(path, text.encode("utf-8"))


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Read an offset checkpoint (recovery point, log start, replication, cleaner). Missing file -> {}."""
    path = Path(path)
    rows = _read_checkpoint_lines(path, OFFSET_CHECKPOINT_VERSION, 3)
    result: dict[TopicPartition, int] = {}
    for topic, partition, offset in rows or []:
        key = (topic, _parse_int(path, partition, "partition", 0, _INT32_MAX))
        if key in result:
            raise CorruptCheckpointError(f"{path}: duplicate entry for {key[0]}-{key[1]}")
        result[key] = _parse_int(path, offset, "offset", _INT64_MIN, _INT64_MAX)
    return result


def write_offset_checkpoint(path: Path, entries: Mapping[TopicPartition, int]) -> None:
    """Write ``{(topic, partition): offset}`` atomically, in (topic, partition) order."""
    lines = []
    for (topic, partition), offset in sorted(entries.items()):
        if not topic or _WS.search(topic):
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    _write_checkpoint_lines(Path(path), OFFSET_CHECKPOINT_VERSION, lines)


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """Read ``leader-epoch-checkpoint`` as ``[(epoch, start_offset)]`` in file order. Missing file -> []."""
    path = Path(path)
    rows = _read_checkpoint_lines(path, LEADER_EPOCH_CHECKPOINT_VERSION, 2)
    return [
        (
            _parse_int(path, epoch, "epoch", _INT32_MIN, _INT32_MAX),
            _parse_int(path, offset, "start offset", _INT64_MIN, _INT64_MAX),
        )
        for epoch, offset in rows or []
    ]


def write_leader_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    _write_checkpoint_lines(
        Path(path), LEADER_EPOCH_CHECKPOINT_VERSION, [f"{int(e)} {int(o)}" for e, o in entries]
    )


# --------------------------------------------------------------------------------------------------- Uuid

ZERO_UUID = bytes(16)
METADATA_TOPIC_ID = (1).to_bytes(16, "big")  # Kafka's Uuid(0, 1)
_UUID_CHARS = re.compile(r"[A-Za-z0-9_-]{22}\Z")


def uuid_to_str(value: bytes) -> str:
    """Kafka's ``Uuid.toString``: 16 bytes in URL-safe base64 without padding (22 chars)."""
    if len(value) != 16:
        raise ValueError(f"a Uuid is 16 bytes, got {len(value)}")
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> bytes:
    """Inverse of :func:`uuid_to_str`; raises ValueError unless ``text`` is a canonical 22-char Uuid."""
    if not _UUID_CHARS.match(text):
        raise ValueError(f"invalid Uuid string {text!r}: expected 22 URL-safe base64 characters")
    try:
        value = base64.urlsafe_b64decode(text + "==")
    except binascii.Error as e:  # pragma: no cover - the regex admits only valid characters
        raise ValueError(f"invalid Uuid string {text!r}: {e}") from None
    if len(value) != 16 or uuid_to_str(value) != text:
        raise ValueError(f"invalid Uuid string {text!r}: not the canonical encoding of 16 bytes")
    return value


def new_uuid() -> bytes:
    """A random (type 4) Uuid as Kafka's ``Uuid.randomUuid`` makes them: never the zero Uuid, never the
    metadata topic id, and never one whose string form contains '-' (newer Kafka avoids '-' anywhere, a
    superset of the older "does not start with '-'" rule, so the ids also suit command-line use)."""
    while True:
        value = uuid.uuid4().bytes
        if value in (ZERO_UUID, METADATA_TOPIC_ID) or "-" in uuid_to_str(value):
            continue
        return value


# ------------------------------------------------------------------------------------- partition.metadata


def write_partition_metadata(path: Path, topic_id: bytes) -> None:
    """Write ``partition.metadata`` (``path`` is the file). Exactly Kafka's text: no trailing newline."""
    if topic_id == ZERO_UUID:
        raise ValueError("the zero Uuid is not a valid topic id")
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_str(topic_id)}"
    atomic_write(Path(path), text.encode("utf-8"))


def read_partition_metadata(path: Path) -> bytes | None:
    """Return the topic id stored in ``partition.metadata`` or None when the file does not exist."""
    path = Path(path)
    text = _read_text(path)
    if text is None:
        return None
    lines = text.split("\n")
    if len(lines) == 3 and lines[2] == "":
        lines.pop()  # tolerate one trailing newline (Kafka's reader does too)
    if len(lines) != 2:
        raise CorruptCheckpointError(f"{path}: expected 2 lines (version, topic_id), found {len(lines)}")
    version_text = _key_value(path, lines[0], "version")
    version = _parse_int(path, version_text, "version", _INT32_MIN, _INT32_MAX)
    if version != PARTITION_METADATA_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {version}")
    try:
        topic_id = uuid_from_str(_key_value(path, lines[1], "topic_id"))
    except ValueError as e:
        raise CorruptCheckpointError(f"{path}: {e}") from None
    if topic_id == ZERO_UUID:
        raise CorruptCheckpointError(f"{path}: the zero Uuid is not a valid topic id")
    return topic_id


def _key_value(path: Path, line: str, key: str) -> str:
    parts = re.split(r":\s+", line, maxsplit=1)
    if len(parts) != 2 or parts[0] != key:
        raise CorruptCheckpointError(f"{path}: malformed line {line!r} (expected '{key}: ...')")
    return parts[1].strip()


# ----------------------------------------------------------------------------------------- meta.properties


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """Contents of ``meta.properties``. Version 0 (ZooKeeper mode) names the node ``broker.id``,
    version 1 (KRaft) names it ``node.id``. ``directory_id`` is a 16-byte Uuid or None."""

    version: int
    node_id: int
    cluster_id: str | None
    directory_id: bytes | None = None

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.directory_id is not None:
            props["directory.id"] = uuid_to_str(self.directory_id)
        return props


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(now: datetime) -> str:
    """``java.util.Date.toString`` in UTC, e.g. ``Tue Oct 29 12:04:05 UTC 2024`` (locale independent)."""
    return (
        f"{_DAYS[now.weekday()]} {_MONTHS[now.month - 1]} {now.day:02d} "
        f"{now.hour:02d}:{now.minute:02d}:{now.second:02d} UTC {now.year}"
    )


def _escape_property(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def format_properties(props: Mapping[str, str], now: datetime | None = None) -> str:
    """Java ``Properties.store(writer, "")`` output: an empty comment line, the date line, key=value lines."""
    now = now or datetime.now(UTC)
    lines = ["#", "#" + _java_date(now)]
    lines += [f"{_escape_property(k, True)}={_escape_property(v, False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text (comments, ``=``/``:``/whitespace separators, continuations, escapes)."""
    props: dict[str, str] = {}
    raw_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(raw_lines):
        line = raw_lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line) and i < len(raw_lines):
            line = line[:-1] + raw_lines[i].lstrip(" \t\f")
            i += 1
        if _ends_with_continuation(line):
            line = line[:-1]
        key, value = _split_property(line)
        props[_unescape_property(key)] = _unescape_property(value)
    return props


def _ends_with_continuation(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    j = 0
    while j < len(line):
        ch = line[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "=: \t\f":
            break
        j += 1
    key = line[:j]
    # The separator is optional whitespace, then at most one '=' or ':', then optional whitespace.
    rest = line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape_property(text: str) -> str:
    out: list[str] = []
    units: list[int] = []
    i = 0

    def flush_units() -> None:
        if units:
            out.append(b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be", "surrogatepass"))
            units.clear()

    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u":
                digits = text[i + 2 : i + 6]
                if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise ValueError(f"malformed \\uxxxx escape in {text!r}")
                units.append(int(digits, 16))
                i += 6
                continue
            flush_units()
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        flush_units()
        out.append(ch)
        i += 1
    flush_units()
    return "".join(out)


def write_meta_properties(path: Path, meta: MetaProperties, now: datetime | None = None) -> None:
    atomic_write(Path(path), format_properties(meta.to_properties(), now).encode("utf-8"))


def read_meta_properties(path: Path) -> MetaProperties | None:
    """Read ``meta.properties`` (v0 with broker.id, or v1 with node.id). Missing file -> None."""
    path = Path(path)
    text = _read_text(path)
    if text is None:
        return None
    try:
        props = parse_properties(text)
    except ValueError as e:
        raise CorruptCheckpointError(f"{path}: {e}") from None
    if "version" not in props:
        raise CorruptCheckpointError(f"{path}: no 'version' property")
    version = _parse_int(path, props["version"].strip(), "version", _INT32_MIN, _INT32_MAX)
    if version not in (0, 1):
        raise CorruptCheckpointError(f"{path}: unrecognised version {version} (expected 0 or 1)")
    node_key = "broker.id" if version == 0 else "node.id"
    if node_key not in props:
        raise CorruptCheckpointError(f"{path}: version {version} requires '{node_key}'")
    node_id = _parse_int(path, props[node_key].strip(), node_key, _INT32_MIN, _INT32_MAX)
    cluster_id = props.get("cluster.id")
    if version == 1 and not cluster_id:
        raise CorruptCheckpointError(f"{path}: version 1 requires 'cluster.id'")
    directory_id = None
    if "directory.id" in props:
        try:
            directory_id = uuid_from_str(props["directory.id"].strip())
        except ValueError as e:
            raise CorruptCheckpointError(f"{path}: directory.id: {e}") from None
    return MetaProperties(version, node_id, cluster_id, directory_id)


# ------------------------------------------------------------------------------------ .kafka_cleanshutdown


def clean_shutdown_path(log_dir: Path) -> Path:
    return Path(log_dir) / CLEAN_SHUTDOWN


def write_clean_shutdown(log_dir: Path, broker_epoch: int = -1) -> None:
    """Write ``{"version":0,"brokerEpoch":N}``. Kafka in ZooKeeper mode writes brokerEpoch -1."""
    text = json.dumps(
        {"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": int(broker_epoch)}, separators=(",", ":")
    )
    atomic_write(clean_shutdown_path(log_dir), text.encode("utf-8"))


def clean_shutdown_exists(log_dir: Path) -> bool:
    return clean_shutdown_path(log_dir).is_file()


def read_clean_shutdown(log_dir: Path) -> int | None:
    """Broker epoch stored in the marker, or None when there is no marker.

    Strict: unparsable content raises :class:`CorruptCheckpointError`. (Kafka before 3.7 wrote an empty
    marker; that still means "clean" — use :func:`clean_shutdown_exists` for the clean/unclean decision.)
    """
    path = clean_shutdown_path(log_dir)
    text = _read_text(path)
    if text is None:
        return None
    try:
        content = json.loads(text)
    except json.JSONDecodeError as e:
        raise CorruptCheckpointError(f"{path}: not JSON ({e})") from None
    if not isinstance(content, dict):
        raise CorruptCheckpointError(f"{path}: expected a JSON object")
    if content.get("version") != CLEAN_SHUTDOWN_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {content.get('version')!r}")
    epoch = content.get("brokerEpoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise CorruptCheckpointError(f"{path}: brokerEpoch missing or not an integer")
    return epoch


def delete_clean_shutdown(log_dir: Path) -> None:
    path = clean_shutdown_path(log_dir)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)

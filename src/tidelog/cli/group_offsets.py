"""What ``tidelog groups reset-offsets`` computes, as ``kafka-consumer-groups.sh --reset-offsets`` does: the
specification of the new offsets (``--to-earliest``, ``--to-latest``, ``--to-current``, ``--to-offset``,
``--shift-by``, ``--to-datetime``, ``--by-duration``, ``--from-file``) and its parsing, apart from the command's
I/O (groups.py)."""

from __future__ import annotations

import csv
import datetime
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Key = tuple[str, int]

_DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


class SpecError(ValueError):
    """A reset specification that cannot be used (a usage error)."""


def parse_datetime_ms(text: str) -> int:
    """Epoch milliseconds of Kafka's ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+01:00``);
    without one, the local time zone (as Kafka's tool)."""
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss[zone], "
                        "e.g. 2026-11-28T09:30:00.000 or 2026-11-28T09:30:00Z") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's Utils.getDateTime
    return int(when.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's ``Duration.parse`` reads Kafka's ``--by-duration``
    (``PnDTnHnMn.nS``: ``PT1H``, ``P1DT2H30M``, ``PT0.5S``)."""
    m = _DURATION.match(text.strip().upper())
    if m is None or text.strip().upper() in ("P", "PT"):
        raise SpecError(f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H, P1DT2H or PT30M")
    days, hours, minutes = (int(m.group(k) or 0) for k in ("d", "h", "m"))
    seconds = float(m.group("s") or 0)
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_offsets_file(text: str, group: str) -> dict[Key, int]:
    """Kafka's reset file (what ``--export`` prints): ``topic,partition,offset`` lines, or
    ``group,topic,partition,offset`` when it holds several groups (only ``group``'s lines are used)."""
    out: dict[Key, int] = {}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        cells = [c.strip() for c in row]
        if len(cells) == 4:
            if cells[0] != group:
                continue
            cells = cells[1:]
        if len(cells) != 3:
            raise SpecError(f"line {n} of the offsets file: expected topic,partition,offset, got {','.join(row)}")
        try:
            partition, offset = int(cells[1]), int(cells[2])
        except ValueError:
            raise SpecError(f"line {n} of the offsets file: partition and offset must be numbers") from None
        if partition < 0 or offset < 0:
            raise SpecError(f"line {n} of the offsets file: partition and offset must be 0 or more")
        out[(cells[0], partition)] = offset
    if not out:
        raise SpecError(f"the offsets file has no line for group {group!r}")
    return out


def export_csv(rows: Iterable[tuple[str, int, int]]) -> str:
    """Kafka's ``--export`` format: ``topic,partition,offset`` per line (readable back by ``--from-file``)."""
    return "".join(f"{t},{p},{o}\n" for t, p, o in rows)


@dataclass(frozen=True)
class ResetSpec:
    """One of Kafka's reset scenarios. ``mode``: earliest, latest, current, offset, shift, time, file."""

    mode: str
    value: int = 0  # the offset, the shift, or the timestamp (ms)
    from_file: Mapping[Key, int] | None = None

    @property
    def needs_times(self) -> bool:
        return self.mode == "time"


def choose_spec(*, to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None,
                shift_by: int | None, to_datetime: str | None, by_duration: str | None,
                from_file: Mapping[Key, int] | None, now_ms: int) -> ResetSpec:
    """Exactly one scenario, as Kafka's tool requires."""
    given = {"--to-earliest": to_earliest, "--to-latest": to_latest, "--to-current": to_current,
             "--to-offset": to_offset is not None, "--shift-by": shift_by is not None,
             "--to-datetime": to_datetime is not None, "--by-duration": by_duration is not None,
             "--from-file": from_file is not None}
    chosen = [name for name, on in given.items() if on]
    if len(chosen) != 1:
        raise SpecError("give exactly one of " + ", ".join(given) + (f" (got {', '.join(chosen)})" if chosen else ""))
    if to_earliest:
        return ResetSpec("earliest")
    if to_latest:
        return ResetSpec("latest")
    if to_current:
        return ResetSpec("current")
    if to_offset is not None:
        if to_offset < 0:
            raise SpecError(f"--to-offset must be 0 or more, got {to_offset}")
        return ResetSpec("offset", to_offset)
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    if to_datetime is not None:
        return ResetSpec("time", parse_datetime_ms(to_datetime))
    if by_duration is not None:
        return ResetSpec("time", now_ms - parse_duration_ms(by_duration))
    return ResetSpec("file", from_file=from_file)


def target(spec: ResetSpec, key: Key, low: int, high: int, current: int | None, by_time: int | None) -> int:
    """The new offset of one partition before clamping to ``[low, high]``. ``current``: the committed offset
    (None when there is none: the log start, as for Kafka's ``--shift-by`` and ``--to-current``); ``by_time``:
    the earliest offset whose timestamp is at or after the time (None when there is none: the log end, as
    Kafka)."""
    base = current if current is not None and current >= 0 else low
    if spec.mode == "earliest":
        return low
    if spec.mode == "latest":
        return high
    if spec.mode == "current":
        return base
    if spec.mode == "offset":
        return spec.value
    if spec.mode == "shift":
        return base + spec.value
    if spec.mode == "time":
        return high if by_time is None or by_time < 0 else by_time
    assert spec.from_file is not None
    return spec.from_file[key]

"""The share-partition state machine of KIP-932 (Kafka's ``SharePartition``): which records of one partition a share
group has handed out, to whom, how often, and which are done.

* The **window** ``[spso, speo)``: the share-partition start offset (SPSO: every record below it is done) and end
  offset (SPEO: the next offset never acquired yet). Records inside the window are *in flight*, each in one state:
  AVAILABLE (may be acquired: released, or its lock expired), ACQUIRED (locked for one member until a deadline),
  ACKNOWLEDGED (accepted) or ARCHIVED (rejected, delivered too often, a gap or a control record).
* **Acquisition** (a ShareFetch): the lowest AVAILABLE records first, then new records from the SPEO on; each
  acquisition adds 1 to the record's delivery count and locks it for ``group.share.record.lock.duration.ms``.
  A record whose delivery count reached ``group.share.delivery.count.limit`` is archived instead of being made
  available again (when it is released or its lock expires).
* **Acknowledgement** (ShareFetch's piggy-backed batches or ShareAcknowledge): type 1 accept -> ACKNOWLEDGED,
  2 release -> AVAILABLE (or ARCHIVED at the limit), 3 reject -> ARCHIVED, 0 gap -> ARCHIVED. Only the member
  holding the lock may acknowledge a record (INVALID_RECORD_STATE otherwise, as Kafka).
* The SPSO moves over every leading ACKNOWLEDGED / ARCHIVED record and their state is dropped.

Bounded: the window (SPEO - SPSO) never exceeds ``group.share.partition.max.record.locks``; acquisition stops there
until the head of the window is done. Everything is in memory (docs/decisions/0067-share-groups.md).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
STATE_NAMES = {AVAILABLE: "AVAILABLE", ACQUIRED: "ACQUIRED", ACKNOWLEDGED: "ACKNOWLEDGED", ARCHIVED: "ARCHIVED"}

_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_CONTROL = 0x20


class AckError(Exception):
    """An acknowledgement Kafka refuses (INVALID_RECORD_STATE, INVALID_REQUEST)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


@dataclass(slots=True)
class InFlight:
    state: int = AVAILABLE
    delivery_count: int = 0
    member: str = ""
    deadline: float = 0.0


def batch_ranges(data: bytes) -> list[tuple[int, int, int, int, bool]]:
    """(start byte, end byte, base offset, last offset, is control) of every whole v2 batch in ``data``."""
    out: list[tuple[int, int, int, int, bool]] = []
    pos, n = 0, len(data)
    while pos + 27 <= n:
        base, length = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if length < 15 or end > n:
            break
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        out.append((pos, end, base, base + last_delta, bool(attributes & _CONTROL)))
        pos = end
    return out


class SharePartition:
    """One (share group, topic, partition)."""

    __slots__ = ("delivery_limit", "in_flight", "lock_ms", "max_locks", "speo", "spso")

    def __init__(self, start_offset: int, lock_ms: int, delivery_limit: int, max_locks: int) -> None:
        self.spso = start_offset
        self.speo = start_offset
        self.in_flight: dict[int, InFlight] = {}
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks

    # ------------------------------------------------------------------------------------------ housekeeping

    def _done(self, r: InFlight) -> None:
        """A released or expired record: available again, or archived at the delivery count limit."""
        r.member = ""
        r.deadline = 0.0
        r.state = ARCHIVED if r.delivery_count >= self.delivery_limit else AVAILABLE

    def expire(self, now: float) -> int:
        """Release every lock whose deadline passed. Returns how many were released."""
        n = 0
        for r in self.in_flight.values():
            if r.state == ACQUIRED and r.deadline <= now:
                self._done(r)
                n += 1
        if n:
            self._advance()
        return n

    def _advance(self) -> None:
        fl = self.in_flight
        while self.spso < self.speo:
            r = fl.get(self.spso)
            if r is not None and r.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            fl.pop(self.spso, None)
            self.spso += 1

    def reset_start(self, log_start: int) -> None:
        """Records below the log start offset were deleted: they leave the window (Kafka archives them)."""
        if log_start > self.spso:
            for off in range(self.spso, min(log_start, self.speo)):
                self.in_flight.pop(off, None)
            self.spso = log_start
            self.speo = max(self.speo, log_start)

    # --------------------------------------------------------------------------------------------- acquire

    def first_available(self) -> int | None:
        """The lowest AVAILABLE offset in the window, or None."""
        avail = [off for off, r in self.in_flight.items() if r.state == AVAILABLE]
        return min(avail) if avail else None

    def fetch_offset(self) -> int | None:
        """Where the next read starts: the lowest AVAILABLE record, else the SPEO (None: the window is full)."""
        first = self.first_available()
        if first is not None:
            return first
        return self.speo if self.speo - self.spso < self.max_locks else None

    def acquire(self, member: str, batches: Iterable[tuple[int, int, bool]], max_records: int, now: float,
                high_watermark: int) -> list[tuple[int, int, int]]:
        """Acquire for ``member`` the acquirable records of ``batches`` ((base, last, control) as read from the
        log, in order), at most ``max_records`` (whole-batch granularity is not kept: ranges are per offset).
        Returns the acquired ranges (first, last, delivery count), contiguous runs of one count."""
        deadline = now + self.lock_ms / 1000.0
        got: list[tuple[int, int, int]] = []
        taken = 0
        for base, last, control in batches:
            if taken >= max_records:
                break
            if base > self.speo and base < high_watermark:  # a hole in the log (compaction): archived gap
                for off in range(self.speo, base):
                    if off - self.spso >= self.max_locks:
                        break
                    self.in_flight[off] = InFlight(ARCHIVED)
                    self.speo = off + 1
            for off in range(max(base, self.spso), min(last + 1, high_watermark)):
                if taken >= max_records:
                    break
                r = self.in_flight.get(off)
                if r is None:
                    if off != self.speo or off - self.spso >= self.max_locks:
                        if off >= self.speo:
                            break
                        continue
                    r = self.in_flight[off] = InFlight()
                    self.speo = off + 1
                    if control:
                        r.state = ARCHIVED
                        continue
                if r.state != AVAILABLE:
                    continue
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                r.delivery_count += 1
                taken += 1
                if got and got[-1][1] == off - 1 and got[-1][2] == r.delivery_count:
                    got[-1] = (got[-1][0], off, r.delivery_count)
                else:
                    got.append((off, off, r.delivery_count))
        self._advance()
        return got

    # ----------------------------------------------------------------------------------------- acknowledge

    def acknowledge(self, member: str, first: int, last: int, types: list[int]) -> None:
        """Apply one AcknowledgementBatch: ``types`` has one type for the whole range or one per offset."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise AckError("INVALID_REQUEST", f"Invalid acknowledgement batch {first}-{last}")
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
            raise AckError("INVALID_REQUEST", "Invalid acknowledge type")
        recs = []
        for off in range(first, last + 1):
            r = self.in_flight.get(off)
            if r is None or r.state != ACQUIRED or r.member != member:
                raise AckError("INVALID_RECORD_STATE",
                               f"The record state is invalid. The acknowledgement of offset {off} failed.")
            recs.append(r)
        for i, r in enumerate(recs):
            t = types[0] if len(types) == 1 else types[i]
            if t == ACCEPT:
                r.state, r.member, r.deadline = ACKNOWLEDGED, "", 0.0
            elif t == RELEASE:
                self._done(r)
            else:  # REJECT, GAP
                r.state, r.member, r.deadline = ARCHIVED, "", 0.0
        self._advance()

    def release_member(self, member: str) -> int:
        """Release every record ``member`` holds (its share session closed or it left the group)."""
        n = 0
        for r in self.in_flight.values():
            if r.state == ACQUIRED and r.member == member:
                self._done(r)
                n += 1
        if n:
            self._advance()
        return n

    def acquired_count(self) -> int:
        return sum(1 for r in self.in_flight.values() if r.state == ACQUIRED)

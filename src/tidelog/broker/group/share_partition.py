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
  holding the lock may acknowledge a record (INVALID_RECORD_STATE otherwise, as Kafka). Type 4 renew (KIP-1222,
  ``share_renew.py``) keeps the record ACQUIRED by its member with the same delivery count and a new lock deadline.
* The SPSO moves over every leading ACKNOWLEDGED / ARCHIVED record and their state is dropped.

State is kept per *run* of offsets (Kafka keeps it per batch and splits a batch into offsets only when its records'
states diverge): the window is a sorted list of contiguous runs, each with one state, delivery count, member and
deadline, split where an acquisition or an acknowledgement covers part of a run. A consumer that acknowledges what
it was given as a whole (the common case) keeps the list at a few runs.

Bounded: no batch is acquired once the window (SPEO - SPSO) has reached ``group.share.partition.max.record.locks``
(it may pass it by the rest of the last batch started: batches are acquired whole, as Kafka does); acquisition then
waits until the head of the window is done. The runs are at most one per offset of the window, and a few when
consumers acknowledge what they got as a whole. The state is persisted through the share coordinator
(``share_state_store``; docs/decisions/0067-share-groups.md).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
STATE_NAMES = {AVAILABLE: "AVAILABLE", ACQUIRED: "ACQUIRED", ACKNOWLEDGED: "ACKNOWLEDGED", ARCHIVED: "ARCHIVED"}

_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_CONTROL = 0x20


class AckError(Exception):
    """An acknowledgement Kafka refuses (INVALID_RECORD_STATE, INVALID_REQUEST)."""

    def __init__(self, name: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


@dataclass(slots=True)
class Run:
    """Offsets ``first``..``last`` (inclusive) in one state."""

    first: int
    last: int
    state: int = AVAILABLE
    delivery_count: int = 0
    member: str = ""
    deadline: float = 0.0


def _first(r: Run) -> int:
    return r.first


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

    __slots__ = ("delivery_limit", "lock_ms", "max_locks", "runs", "speo", "spso")

    def __init__(self, start_offset: int, lock_ms: int, delivery_limit: int, max_locks: int) -> None:
        self.spso = start_offset
        self.speo = start_offset
        self.runs: list[Run] = []  # contiguous, covering [spso, speo)
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks

    # ------------------------------------------------------------------------------------------ runs

    def _index(self, off: int) -> int:
        """The index of the run holding ``off`` (spso <= off < speo)."""
        return bisect.bisect_right(self.runs, off, key=_first) - 1

    def _split(self, off: int) -> None:
        """Make ``off`` the first offset of a run (when inside the window)."""
        if off <= self.spso or off >= self.speo:
            return
        i = self._index(off)
        r = self.runs[i]
        if r.first == off:
            return
        self.runs.insert(i + 1, Run(off, r.last, r.state, r.delivery_count, r.member, r.deadline))
        r.last = off - 1

    def state_of(self, off: int) -> tuple[int, int] | None:
        """(state, delivery count) of an in-flight offset, None outside the window."""
        if not self.spso <= off < self.speo:
            return None
        r = self.runs[self._index(off)]
        return r.state, r.delivery_count

    # ------------------------------------------------------------------------------------------ housekeeping

    def _done(self, r: Run) -> None:
        """A released or expired run: available again, or archived at the delivery count limit."""
        r.member = ""
        r.deadline = 0.0
        r.state = ARCHIVED if r.delivery_count >= self.delivery_limit else AVAILABLE

    def expire(self, now: float) -> int:
        """Release every lock whose deadline passed. Returns how many records were released."""
        n = 0
        for r in self.runs:
            if r.state == ACQUIRED and r.deadline <= now:
                self._done(r)
                n += r.last - r.first + 1
        if n:
            self._advance()
        return n

    def _advance(self) -> None:
        runs = self.runs
        k = 0
        while k < len(runs) and runs[k].state in (ACKNOWLEDGED, ARCHIVED):
            k += 1
        if k:
            self.spso = runs[k - 1].last + 1
            del runs[:k]

    def reset_start(self, log_start: int) -> None:
        """Records below the log start offset were deleted: they leave the window (Kafka archives them)."""
        if log_start <= self.spso:
            return
        if log_start >= self.speo:
            self.runs.clear()
            self.spso = self.speo = log_start
            return
        self._split(log_start)
        del self.runs[:self._index(log_start)]
        self.spso = log_start

    # --------------------------------------------------------------------------------------------- acquire

    def first_available(self) -> int | None:
        """The lowest AVAILABLE offset in the window, or None."""
        for r in self.runs:
            if r.state == AVAILABLE:
                return r.first
        return None

    def fetch_offset(self) -> int | None:
        """Where the next read starts: the lowest AVAILABLE record, else the SPEO (None: the window is full)."""
        first = self.first_available()
        if first is not None:
            return first
        return self.speo if self.speo - self.spso < self.max_locks else None

    def acquire(self, member: str, batches: Iterable[tuple[int, int, bool]], max_records: int, now: float,
                high_watermark: int, record_limit: bool = False) -> list[tuple[int, int, int]]:
        """Acquire for ``member`` the acquirable records of ``batches`` ((base, last, control) as read from the
        log, in order): records made available again, at most ``max_records`` of them, then new records by whole
        batches (as Kafka, ``max_records`` is a soft limit there: no batch is started beyond it or beyond the
        window's bound, a batch started is acquired whole). Returns the acquired ranges (first, last, delivery count)."""
        batches = list(batches)
        got: list[tuple[int, int, int]] = []
        if not batches or max_records <= 0:
            return got
        deadline = now + self.lock_ms / 1000.0
        taken = 0
        lo, hi = batches[0][0], min(batches[-1][1], high_watermark - 1)
        # records released or expired: available again, within what was read
        i = 0
        while i < len(self.runs) and taken < max_records:
            r = self.runs[i]
            if r.state != AVAILABLE or r.last < lo:
                i += 1
                continue
            if r.first > hi:
                break
            a = max(lo, r.first)
            b = min(hi, r.last, a + (max_records - taken) - 1)
            self._split(b + 1)
            self._split(a)
            i = self._index(a)
            r = self.runs[i]
            r.state, r.member, r.deadline = ACQUIRED, member, deadline
            r.delivery_count += 1
            got.append((a, b, r.delivery_count))
            taken += b - a + 1
            i += 1
        # new records from the SPEO on, by whole batches: a batch is started only while the window is under its
        # bound, and then acquired whole (the window may pass the bound by the rest of that one batch)
        runs = self.runs
        for base, last, control in batches:
            if taken >= max_records or self.speo - self.spso >= self.max_locks:
                break
            last = min(last, high_watermark - 1)
            if last < self.speo:
                continue
            if base > self.speo:  # a hole in the log (compaction): an archived gap
                runs.append(Run(self.speo, base - 1, ARCHIVED))
                self.speo = base
            a, b = self.speo, last
            if record_limit and not control:  # ShareAcquireMode record-limit: a batch may be split
                b = min(b, a + (max_records - taken) - 1)
            if control:  # transaction markers are never delivered
                runs.append(Run(a, b, ARCHIVED))
            else:
                runs.append(Run(a, b, ACQUIRED, 1, member, deadline))
                if got and got[-1][1] == a - 1 and got[-1][2] == 1:
                    got[-1] = (got[-1][0], b, 1)
                else:
                    got.append((a, b, 1))
                taken += b - a + 1
            self.speo = b + 1
        self._advance()
        return got

    # ----------------------------------------------------------------------------------------- acknowledge

    def acknowledge(self, member: str, first: int, last: int, types: list[int],
                    renew_until: float | None = None) -> None:
        """Apply one AcknowledgementBatch: ``types`` has one type for the whole range or one per offset. A RENEW
        sets the lock deadline to ``renew_until`` (None: the group refuses renewals, INVALID_RECORD_STATE)."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise AckError(ErrorCode.INVALID_REQUEST, f"Invalid acknowledgement batch {first}-{last}")
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
            raise AckError(ErrorCode.INVALID_REQUEST, "Invalid acknowledge type")
        if renew_until is None and RENEW in types:
            raise AckError(ErrorCode.INVALID_RECORD_STATE, "The record state is invalid. Renew acknowledgements "
                                                           "are disabled for the share group.")
        if first < self.spso or last >= self.speo:
            bad = first if first < self.spso else max(first, self.speo)
            raise AckError(ErrorCode.INVALID_RECORD_STATE,
                           f"The record state is invalid. The acknowledgement of offset {bad} failed.")
        i = self._index(first)
        while i < len(self.runs) and self.runs[i].first <= last:  # check all before changing any
            r = self.runs[i]
            if r.state != ACQUIRED or r.member != member:
                raise AckError(ErrorCode.INVALID_RECORD_STATE, "The record state is invalid. The acknowledgement of "
                                                       f"offset {max(first, r.first)} failed.")
            i += 1
        if len(types) == 1:
            segments = [(first, last, types[0])]
        else:  # runs of equal types
            segments = []
            start = first
            for k in range(1, len(types) + 1):
                if k == len(types) or types[k] != types[k - 1]:
                    segments.append((start, first + k - 1, types[k - 1]))
                    start = first + k
        for a, b, t in segments:
            self._split(a)
            self._split(b + 1)
            i = self._index(a)
            while i < len(self.runs) and self.runs[i].first <= b:
                r = self.runs[i]
                if t == ACCEPT:
                    r.state, r.member, r.deadline = ACKNOWLEDGED, "", 0.0
                elif t == RELEASE:
                    self._done(r)
                elif t == RENEW:  # still ACQUIRED by the same member, same delivery count: a new deadline
                    r.deadline = renew_until if renew_until is not None else r.deadline
                else:  # REJECT, GAP
                    r.state, r.member, r.deadline = ARCHIVED, "", 0.0
                i += 1
        self._advance()

    def release_member(self, member: str) -> int:
        """Release every record ``member`` holds (its share session closed or it left the group)."""
        n = 0
        for r in self.runs:
            if r.state == ACQUIRED and r.member == member:
                self._done(r)
                n += r.last - r.first + 1
        if n:
            self._advance()
        return n

    def acquired_count(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs if r.state == ACQUIRED)

    # ----------------------------------------------------------------------------------------- persistence

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[tuple[int, int, int, int]], lock_ms: int,
                delivery_limit: int, max_locks: int) -> SharePartition:
        """A share partition as its persisted state left it (ReadShareGroupState): the window starts at the SPSO
        and ends after the last persisted batch; each batch keeps its state (available, acknowledged, archived)
        and delivery count, offsets between batches are available and never delivered."""
        sp = cls(start_offset, lock_ms, delivery_limit, max_locks)
        pos = start_offset
        for first, last, state, count in sorted(batches):
            first = max(first, pos)
            if last < first:
                continue
            if first > pos:
                sp.runs.append(Run(pos, first - 1))
            st = state if state in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE
            sp.runs.append(Run(first, last, st, max(int(count), 0)))
            pos = last + 1
        sp.speo = pos
        sp._advance()
        return sp

    def persisted_batches(self) -> list[tuple[int, int, int, int]]:
        """The window as WriteShareGroupState's state batches: (first, last, delivery state, delivery count), an
        acquired run written as available (a lock does not survive the leader), adjacent equal runs joined."""
        out: list[tuple[int, int, int, int]] = []
        for r in self.runs:
            st = r.state if r.state in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE
            if out and out[-1][1] == r.first - 1 and out[-1][2] == st and out[-1][3] == r.delivery_count:
                out[-1] = (out[-1][0], r.last, st, r.delivery_count)
            else:
                out.append((r.first, r.last, st, r.delivery_count))
        return out

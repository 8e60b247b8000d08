"""The one record walk (tidelog.records.recwalk and the C cursor records/_recwalk.h) and its users.

The record-length bound is decided once: Kafka's smallest record body is 6 bytes (attributes, timestampDelta,
offsetDelta, key -1, value -1, 0 headers), so a declared length under 6 is corrupt for every reader (before, the
log's time scan accepted 3 while the other readers required 6).
"""

from __future__ import annotations

import pytest

from tidelog.records import RecordError, RecordSpec
from tidelog.records.batch import build_batch, parse_records, read_keys
from tidelog.records.errors import CorruptRecordError
from tidelog.records.header import BatchHeader
from tidelog.records.recwalk import (
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    R_OFFSET_DELTA,
    R_TIMESTAMP_DELTA,
    check_records,
    walk_records,
)
from tidelog.storage.cleaner import batch_filter, build_map
from tidelog.storage.log.segments import scan_uncompressed_records
from tidelog.storage.offset_map import OffsetMap

from .records_helpers import recrc

#: the smallest record: length 6, attributes 0, timestampDelta 0, offsetDelta 0, key -1, value -1, no headers
MINIMAL = bytes([MIN_RECORD_BODY << 1, 0, 0, 0, 1, 1, 0])


def _short(declared: int) -> bytes:
    """A record declaring ``declared`` body bytes that are all there, but too few to hold the six fields."""
    return bytes([declared << 1]) + bytes(declared)


def test_the_bound_is_kafkas() -> None:
    assert MIN_RECORD_SIZE == 7 and MIN_RECORD_BODY == 6 and len(MINIMAL) == MIN_RECORD_SIZE
    assert parse_records(MINIMAL, 1)[0].key is None
    fields = next(walk_records(MINIMAL, 0, len(MINIMAL), 1))
    assert fields == (7, 0, 0, 5, -1, 6, -1, 7, 0)


@pytest.mark.parametrize("declared", [0, 1, 2, 3, 4, 5])
def test_record_length_under_six_is_corrupt_everywhere(declared: int) -> None:
    # padded with a minimal record so the count check (7 bytes a record) is not what refuses it
    area = _short(declared) + MINIMAL * 2
    with pytest.raises(CorruptRecordError, match=f"record 0 at byte 1 declares length {declared}"):
        check_records(area, 0, len(area), 1)
    with pytest.raises(CorruptRecordError, match=f"declares length {declared}"):
        parse_records(area, 1)
    with pytest.raises(CorruptRecordError, match=f"declares length {declared}"):
        build_map._keys_and_deltas(area, 0, len(area), 1)
    with pytest.raises(CorruptRecordError, match=f"declares length {declared}"):
        batch_filter._scan_records(area, 0, len(area), 1)
    recwalk = pytest.importorskip("tidelog.records._recwalk")
    with pytest.raises(CorruptRecordError, match=f"record 0 at byte 1 declares length {declared}"):
        recwalk.check_records(area, 1, False)


def test_time_scan_of_the_log_uses_the_same_bound() -> None:
    # the time-index scan (segments.scan_uncompressed_records) used to accept a record length of 3
    batch = bytearray(build_batch([(b"k", b"v")], base_offset=10, now_ms=1000))
    assert scan_uncompressed_records(bytes(batch), BatchHeader.parse(batch), lambda ts, off: True, 0) == (10, 1000)
    records = _short(3) + bytes(MIN_RECORD_SIZE)
    bad = batch[:61] + records
    bad[8:12] = (len(bad) - 12).to_bytes(4, "big")
    bad = recrc(bad)
    with pytest.raises(CorruptRecordError, match="declares length 3"):
        scan_uncompressed_records(bytes(bad), BatchHeader.parse(bad), lambda ts, off: True, 0)


def test_c_cursor_users_refuse_what_the_python_walk_refuses() -> None:
    """The cleaner's C map build walks with the same cursor: a short record makes it decline (the Python walk
    then raises), never accept; a good area goes in."""
    if build_map.c_put_records is None:
        pytest.skip("the optional C extension is not built")
    bad = _short(3) + MINIMAL * 2
    assert not OffsetMap(24 * 16).put_records(build_map.c_put_records, bad, 0, len(bad), 1, 0, -1)
    good = build_batch([(b"k", b"v"), (b"j", None)], now_ms=5)[61:]
    c_map = OffsetMap(24 * 16)
    assert c_map.put_records(build_map.c_put_records, good, 0, len(good), 2, 100, -1)
    assert c_map.size == 2


def test_keys_and_headers_through_the_walk() -> None:
    batch = build_batch(
        [(b"a", b"1", [("h", b"x"), ("n", None)]), (None, None), (b"c" * 100, b"v" * 300)], now_ms=5
    )
    keys = read_keys(batch)
    assert keys == [b"a", None, b"c" * 100]
    recs = parse_records(batch[61:], 3)
    assert recs[0].headers == [("h", b"x"), ("n", None)]
    assert recs[2].value == b"v" * 300 and recs[1].value is None


def test_truncated_area_is_a_record_error() -> None:
    batch = build_batch([(b"a", b"1"), (b"b", b"2")], now_ms=5)
    area = batch[61:-3]
    with pytest.raises(RecordError):
        check_records(area, 0, len(area), 2)


def test_c_record_deltas_agrees_with_the_python_walk() -> None:
    """The log's time scan takes (offsetDelta, timestampDelta) from the C cursor: the Python walk's values, and
    None (the Python walk then raises) wherever the Python walk fails."""
    from tidelog.storage.log.segments import c_record_deltas

    if c_record_deltas is None:
        pytest.skip("the optional C extension is not built")
    batch = build_batch(
        [RecordSpec(b"a", b"1", (), 1000, 0), RecordSpec(None, b"2", [("h", b"x")], 900, 3),
         RecordSpec(b"c" * 200, None, (), 5000, 7)],
        now_ms=1000,
    )
    area = batch[61:]
    want = [(f[R_OFFSET_DELTA], f[R_TIMESTAMP_DELTA]) for f in walk_records(area, 0, len(area), 3)]
    assert want == [(0, 0), (3, -100), (7, 4000)]
    assert c_record_deltas(batch, 3, 61, len(batch)) == want
    for cut in range(1, len(area)):
        bad = area[:-cut]
        c = c_record_deltas(bad, 3, 0, len(bad))
        assert c is None
        with pytest.raises(RecordError):
            check_records(bad, 0, len(bad), 3)
    short = _short(3) + MINIMAL * 2
    assert c_record_deltas(short, 1, 0, len(short)) is None

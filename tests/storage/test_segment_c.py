"""The storage extension's I/O functions (tidelog.storage._segment): the stamped write of one batch with its
checks after the write (moved from tidelog.records._recwalk, which keeps bytes-only code)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tidelog.records import RecordSpec, build_batch

recwalk = pytest.importorskip("tidelog.records._recwalk", reason="the optional C extension is not built")
segment_c = pytest.importorskip("tidelog.storage._segment", reason="the optional C extension is not built")


def test_write_stamped_checks_the_crc_after_the_write(tmp_path: Path) -> None:
    good = build_batch([RecordSpec(b"k", bytes(300_000), (), 1_000)])
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x10
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert segment_c.write_stamped(fd, good, 7, 3, True) == len(good)
        assert segment_c.write_stamped(fd, bad, 8, 3, True) == -1  # written: the caller cuts the file back
        assert segment_c.write_stamped(fd, bad, 9, 3, False) == len(bad)
        small = build_batch([RecordSpec(b"k", b"v", (), 1_000)])
        assert segment_c.write_stamped(fd, small, 10, 3, True) == len(small)
        small_bad = bytearray(small)
        small_bad[-1] ^= 1
        assert segment_c.write_stamped(fd, small_bad, 11, 3, True) == -1
        assert segment_c.write_stamped(fd, bytes(40), 12, 3, True) == -1  # shorter than a batch header: not written
    finally:
        os.close(fd)
    assert os.path.getsize(path) == 3 * len(good) + 2 * len(small)


def test_write_stamped_check_2_also_walks_the_records_after_the_write(tmp_path: Path) -> None:
    good = build_batch([RecordSpec(b"k", b"v" * 100, (), 1_000), RecordSpec(None, b"w", (), 1_001)])
    broken = bytearray(good)
    broken[61] ^= 0x02  # the first record's length varint: the walk fails, the bytes are otherwise intact
    struct.pack_into(">I", broken, 17, recwalk.crc32c(bytes(broken[21:])))  # with a matching CRC
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert segment_c.write_stamped(fd, broken, 0, 0, 1) == len(broken)  # the CRC alone matches
        assert segment_c.write_stamped(fd, broken, 2, 0, 2) == -1
        assert segment_c.write_stamped(fd, good, 4, 0, 2) == len(good)
        with pytest.raises(ValueError):
            segment_c.write_stamped(fd, good, 6, 0, 3)
    finally:
        os.close(fd)
    assert recwalk.validate_single_batch(broken, None, True) is None
    assert recwalk.validate_single_batch(broken, None, True, False) is not None  # header and CRC only


def test_write_stamped_replaces_base_offset_and_epoch_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = build_batch([RecordSpec(b"k%d" % i, b"v" * i, (), 1_000 + i) for i in range(4)])
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for buf in (data, bytearray(data), memoryview(data)):
            assert segment_c.write_stamped(fd, buf, 0x0102030405060708, -5) == len(data)
            assert bytes(buf) == data
        with pytest.raises(ValueError):
            segment_c.write_stamped(fd, b"short", 0, 0)
        with pytest.raises(OverflowError):
            segment_c.write_stamped(fd, data, 0, 1 << 31)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        segment_c.write_stamped(fd, data, 0, 0)  # closed descriptor
    expect = bytearray(data)
    struct.pack_into(">q", expect, 0, 0x0102030405060708)
    struct.pack_into(">i", expect, 12, -5)
    assert path.read_bytes() == bytes(expect) * 3

"""The C whole-batch check (tidelog.records._recwalk.validate_single_batch) and its CRC-32C.

``validate_single_batch`` must accept exactly the batches that the Python path (validate_batch_tuple, the
one-batch size check and check_record_structure) accepts, returning the same header tuple; on anything else it
returns None (the caller then lets Python raise). Its CRC-32C (SSE4.2 or slicing-by-8) must equal the crc32c
package's on any input.
"""

from __future__ import annotations

import random
import struct

import pytest
from crc32c import crc32c as ref_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.records import CompressionType, RecordError, RecordSpec, build_batch
from tidelog.records.batch import check_record_structure
from tidelog.records.header import LOG_OVERHEAD, validate_batch_tuple

recwalk = pytest.importorskip("tidelog.records._recwalk", reason="the optional C extension is not built")


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 63, 255, 256, 767, 768, 769, 4096, 16384, 24575, 24576,
                                    24583, 3 * 8192 * 5 + 13, 1 << 20])
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_crc32c_matches_the_package(length: int, offset: int) -> None:
    rng = random.Random(length * 7 + offset)
    data = memoryview(rng.randbytes(length + offset))[offset:]
    expect = ref_crc32c(data)
    assert recwalk.crc32c(data) == expect
    assert recwalk.crc32c_sw(data) == expect
    seed = rng.getrandbits(32)
    assert recwalk.crc32c(data, seed) == ref_crc32c(data, seed)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3000), seed=st.integers(0, 2**32 - 1))
def test_crc32c_matches_the_package_on_random_bytes(data: bytes, seed: int) -> None:
    assert recwalk.crc32c(data, seed) == ref_crc32c(data, seed)
    assert recwalk.crc32c_sw(data) == ref_crc32c(data)


def python_check(buf: bytes | bytearray, max_size: int | None, check_crc: bool) -> tuple | None:
    """What the Python path concludes: the header tuple when every check passes, else None."""
    try:
        fields = validate_batch_tuple(buf, 0, max_size, check_crc=check_crc)
        if fields[1] + LOG_OVERHEAD != len(buf):
            return None
        if not fields[5] & 7:
            check_record_structure(buf, 0, fields)
    except RecordError:
        return None
    return fields


def batch(n: int = 3, codec: CompressionType = CompressionType.NONE, value_size: int = 20) -> bytes:
    recs = [RecordSpec(b"k%d" % i, b"v" * value_size, (("h", b"x"),), 1_000 + i) for i in range(n)]
    return build_batch(recs, compression=codec, producer_id=7, producer_epoch=1, base_sequence=5, now_ms=0)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_batches_give_the_python_header_tuple(codec: CompressionType) -> None:
    for b in (batch(1, codec), batch(50, codec), batch(40, codec, 5000)):
        for buf in (b, bytearray(b), memoryview(b)):
            assert recwalk.validate_single_batch(buf, 1 << 24, True) == validate_batch_tuple(b)
            assert recwalk.validate_single_batch(buf, None, False) == validate_batch_tuple(b)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 5),
    codec=st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP]),
    mutations=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.sampled_from([0, 0, 0, 1, 30, -3]),
    max_size=st.sampled_from([None, 1 << 20, 100, 0, -1]),
    check_crc=st.booleans(),
    fix_crc=st.booleans(),
)
def test_c_agrees_with_python_on_mutated_batches(n, codec, mutations, cut, max_size, check_crc,
                                                 fix_crc) -> None:  # type: ignore[no-untyped-def]
    buf = bytearray(batch(n, codec))
    for where, byte in mutations:
        buf[where % len(buf)] = byte
    if cut > 0:
        del buf[-cut:]
    elif cut < 0:
        buf += b"\x00" * -cut  # bytes after the batch
    if fix_crc and len(buf) >= 21:
        struct.pack_into(">I", buf, 17, ref_crc32c(memoryview(buf)[21:]))
    assert recwalk.validate_single_batch(bytes(buf), max_size, check_crc) == python_check(
        bytes(buf), max_size, check_crc
    )


def test_large_batch_with_late_crc_and_bad_arguments() -> None:
    b = bytearray(batch(60, value_size=20_000))  # over RELEASE_GIL_BYTES: the GIL is released
    assert len(b) > recwalk.RELEASE_GIL_BYTES
    assert recwalk.validate_single_batch(b, None, True) == validate_batch_tuple(b)
    b[-1] ^= 1  # a value byte: only the CRC notices
    assert recwalk.validate_single_batch(b, None, True) is None
    assert recwalk.validate_single_batch(b, None, False) == validate_batch_tuple(b, check_crc=False)
    small = batch(2)
    assert recwalk.validate_single_batch(small, 1 << 80, True) == validate_batch_tuple(small)
    assert recwalk.validate_single_batch(small, -(1 << 80), True) is None
    with pytest.raises(TypeError):
        recwalk.validate_single_batch(b, None)
    with pytest.raises(TypeError):
        recwalk.validate_single_batch("text", None, True)

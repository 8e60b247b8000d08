"""Codec framing as Kafka writes it, bounded decompression, and compression bombs."""

from __future__ import annotations

import gzip
import os
import struct
import time
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records.compression import (
    XERIAL_CHUNK_SIZE,
    CompressionType,
    codec_of,
    compress,
    decompress,
)
from tidelog.records.errors import (
    CorruptRecordError,
    DecompressionLimitError,
    RecordError,
    UnsupportedCompressionError,
)
from tidelog.records.varint import decode_unsigned_varint

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]
MiB = 1 << 20

SAMPLES = [
    b"",
    b"x",
    b"hello kafka " * 1000,
    os.urandom(70_000),  # incompressible, > one lz4 block and > two xerial chunks
    bytes(range(256)) * 600,
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_round_trip(codec: CompressionType, index: int) -> None:
    data = SAMPLES[index]
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data)) == data
    assert decompress(codec, memoryview(packed), len(data) + 10) == data


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionError):
        decompress(codec, b"x", 10)
    with pytest.raises(UnsupportedCompressionError):
        codec_of(codec)


def test_gzip_is_a_gzip_stream() -> None:
    data = b"abc" * 1000
    packed = compress(CompressionType.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data


def test_gzip_concatenated_members_and_garbage() -> None:
    packed = gzip.compress(b"one ") + gzip.compress(b"two")
    assert decompress(CompressionType.GZIP, packed, 100) == b"one two"
    with pytest.raises(CorruptRecordError, match="trailing"):
        decompress(CompressionType.GZIP, gzip.compress(b"one") + b"junk", 100)


def test_lz4_frame_header_matches_kafka_writer() -> None:
    data = b"0123456789" * 20_000
    packed = compress(CompressionType.LZ4, data)
    assert packed[:4] == struct.pack("<I", 0x184D2204)
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # block independence (Kafka refuses linked blocks)
    assert not flg & 0x10  # no block checksum
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size
    assert packed[-4:] == b"\x00\x00\x00\x00"  # end mark
    assert lz4.frame.decompress(packed) == data


def test_snappy_xerial_framing() -> None:
    data = os.urandom(XERIAL_CHUNK_SIZE) + b"a" * (XERIAL_CHUNK_SIZE * 2 + 5)
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos = 16
    sizes = []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        block = packed[pos + 4 : pos + 4 + length]
        sizes.append(decode_unsigned_varint(block)[0])
        assert bytes(cramjam.snappy.decompress_raw(block)) == data[sum(sizes[:-1]) : sum(sizes)]
        pos += 4 + length
    assert pos == len(packed)
    assert sizes == [XERIAL_CHUNK_SIZE, XERIAL_CHUNK_SIZE, XERIAL_CHUNK_SIZE, 5]


def test_snappy_accepts_raw_block_and_little_endian_xerial_versions() -> None:
    data = b"raw snappy from librdkafka " * 50
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw, len(data)) == data
    block = raw
    odd = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(CompressionType.SNAPPY, odd, len(data)) == data


def test_snappy_header_only_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, compress(CompressionType.SNAPPY, b""), 0) == b""


def test_zstd_frame_has_content_size() -> None:
    data = b"z" * 5000
    packed = compress(CompressionType.ZSTD, data)
    assert packed[:4] == struct.pack("<I", 0xFD2FB528)
    assert zstandard.frame_content_size(packed) == len(data)


def test_zstd_multiple_frames_and_frames_without_size() -> None:
    streaming = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = streaming.compress(b"second") + streaming.flush()
    packed = compress(CompressionType.ZSTD, b"first ") + frame
    assert decompress(CompressionType.ZSTD, packed, 100) == b"first second"


def test_levels() -> None:
    data = b"level " * 1000
    for codec, level in [(CompressionType.GZIP, 9), (CompressionType.LZ4, 9), (CompressionType.ZSTD, 19)]:
        assert decompress(codec, compress(codec, data, level), len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_exact_limit_passes_and_one_less_fails(codec: CompressionType) -> None:
    data = b"limit" * 3000
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data)) == data
    with pytest.raises(DecompressionLimitError, match=str(len(data) - 1)):
        decompress(codec, packed, len(data) - 1)


def test_uncompressed_limit() -> None:
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.NONE, b"abc", 2)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_data_is_corrupt(codec: CompressionType) -> None:
    data = os.urandom(1000) * 3
    packed = compress(codec, data)
    for cut in (1, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut], 10 * len(data))


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD])
def test_trailing_garbage_is_corrupt(codec: CompressionType) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, compress(codec, b"payload" * 10) + b"garbage!", 1000)


# ------------------------------------------------------------------------------------------------ bombs


def _gzip_bomb(size: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MiB)
    return b"".join(comp.compress(zeros) for _ in range(size // MiB)) + comp.flush()


def _lz4_bomb(size: int) -> bytes:
    comp = lz4.frame.LZ4FrameCompressor(block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    zeros = bytes(MiB)
    return comp.begin() + b"".join(comp.compress(zeros) for _ in range(size // MiB)) + comp.flush()


def _zstd_bomb(size: int, with_size: bool) -> bytes:
    if with_size:
        return zstandard.ZstdCompressor(level=1).compress(bytes(size))
    comp = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    zeros = bytes(MiB)
    return b"".join(comp.compress(zeros) for _ in range(size // MiB)) + comp.flush()


def _snappy_bomb(size: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(XERIAL_CHUNK_SIZE)))
    chunk = struct.pack(">i", len(block)) + block
    return compress(CompressionType.SNAPPY, b"") + chunk * (size // XERIAL_CHUNK_SIZE)


BOMB_SIZE = 256 * MiB
LIMIT = 1 * MiB


@pytest.fixture(scope="module")
def bombs() -> dict[str, tuple[CompressionType, bytes]]:
    return {
        "gzip": (CompressionType.GZIP, _gzip_bomb(BOMB_SIZE)),
        "lz4": (CompressionType.LZ4, _lz4_bomb(BOMB_SIZE)),
        "zstd-streamed": (CompressionType.ZSTD, _zstd_bomb(BOMB_SIZE, with_size=False)),
        "zstd-sized": (CompressionType.ZSTD, _zstd_bomb(BOMB_SIZE, with_size=True)),
        "snappy": (CompressionType.SNAPPY, _snappy_bomb(BOMB_SIZE)),
    }


@pytest.mark.parametrize("name", ["gzip", "lz4", "zstd-streamed", "zstd-sized", "snappy"])
def test_bomb_stops_at_the_limit(bombs, name: str) -> None:
    codec, bomb = bombs[name]
    assert len(bomb) < 20 * MiB  # a small payload that would inflate to 256 MiB
    tracemalloc.start()
    try:
        started = time.perf_counter()
        with pytest.raises(DecompressionLimitError, match=str(LIMIT)):
            decompress(codec, bomb, LIMIT)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Never near the 256 MiB the payload expands to: at most the limit plus a couple of output chunks.
    assert peak < 8 * MiB, f"{name}: peak {peak} bytes"
    assert elapsed < 2.0, f"{name}: {elapsed:.2f}s"


def test_snappy_lying_declared_length_is_refused_before_decompressing() -> None:
    # A raw block that claims 2**32 - 1 bytes: refused from the varint alone.
    lying = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.SNAPPY, lying, LIMIT)


# ----------------------------------------------------------------------------------------- random input


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_record_errors(codec: CompressionType, data: bytes) -> None:
    try:
        out = decompress(codec, data, 4096)
    except RecordError:
        return
    assert len(out) <= 4096


@pytest.mark.parametrize("codec", COMPRESSED)
@settings(max_examples=100, deadline=None)
@given(
    payload=st.binary(min_size=1, max_size=2000),
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=4),
)
def test_mutated_streams_raise_only_record_errors(codec: CompressionType, payload: bytes, flips) -> None:
    packed = bytearray(compress(codec, payload * 3))
    for where, byte in flips:
        packed[where % len(packed)] = byte
    try:
        out = decompress(codec, bytes(packed), 10_000)
    except RecordError:
        return
    assert len(out) <= 10_000


def test_zstd_from_several_threads_at_once() -> None:
    """The broker validates (and recompresses) batches on several request handler threads: zstd must give each
    thread its own (de)compressor (python-zstandard's are not thread safe)."""
    import threading

    from tidelog.records.compression import CompressionType, compress, decompress

    payloads = [bytes([i]) * (200_000 + i) + bytes(range(256)) * 50 for i in range(4)]
    frames = [compress(CompressionType.ZSTD, p) for p in payloads]
    bad: list[str] = []

    def work(i: int) -> None:
        try:
            for _ in range(40):
                if decompress(CompressionType.ZSTD, frames[i], 1 << 20) != payloads[i]:
                    bad.append(f"decompress {i}")
                if decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, payloads[i]), 1 << 20) != payloads[i]:
                    bad.append(f"round trip {i}")
        except Exception as exc:
            bad.append(f"{i}: {exc!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []

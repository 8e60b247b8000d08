"""Compression codecs of v2 record batches, framed exactly as Kafka's Java client writes them.

* gzip   (1): a GZIP stream (RFC 1952); concatenated members are read as one stream, like GZIPInputStream.
* snappy (2): xerial snappy-java stream framing: magic ``\\x82SNAPPY\\x00``, int32 version 1, int32
  min-compatible version 1, then ``[int32 big-endian compressed length, raw snappy block]`` repeated; Kafka
  writes 32 KiB uncompressed chunks. Plain raw snappy (no xerial header) is accepted on read, as librdkafka
  does.
* lz4    (3): LZ4 frame format (magic 0x184D2204) with independent 64 KiB blocks, no content size and no content
  checksum, as Kafka's ``Lz4BlockOutputStream`` writes it (Kafka's reader refuses linked blocks).
* zstd   (4): standard zstd frames (with the content size, which Kafka's reader ignores).

:func:`decompress` never produces more than ``max_size`` bytes: every codec is read through a bounded,
incremental API and gives up with :class:`DecompressionLimitError` as soon as the output would pass the limit,
so a compression bomb costs at most ``max_size`` bytes of memory and the time to produce them. Any other
failure of a codec becomes :class:`CorruptRecordError`.
"""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from tidelog.records.errors import CorruptRecordError, DecompressionLimitError, UnsupportedCompressionError
from tidelog.records.varint import decode_unsigned_varint

Buffer = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """Codec ids of bits 0..2 of the batch attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_CHUNK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# Output is produced in chunks that start small (most batches are small) and double up to this size.
_MAX_CHUNK = 1 << 20
_MIN_CHUNK = 1 << 14

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_U32LE = struct.Struct("<I")

# zstandard's (de)compressor objects must not be used by two threads at once (python-zstandard: instances are
# not thread safe), and the broker validates and recompresses batches on several request handler threads: one
# set per thread.
_zstd_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_zstd_local, "compressors", None)
    if cache is None:
        cache = _zstd_local.compressors = {}
    compressor = cache.get(level)
    if compressor is None:
        compressor = cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_zstd_local, "decompressor", None)
    if dctx is None:
        dctx = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return dctx


def codec_of(codec: int) -> CompressionType:
    """Map attribute bits to a :class:`CompressionType`; 5, 6, 7 raise UnsupportedCompressionError."""
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec} (known: 0..4)") from None


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` in Kafka's framing. ``level`` is codec-specific (None = default)."""
    codec = codec_of(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        # wbits 31 = gzip wrapper; level -1 is zlib's default (6), as java.util.zip.Deflater uses.
        comp = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 31)
        return comp.compress(data) + comp.flush()
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    # ZSTD
    zlevel = 3 if level is None else level
    return _zstd_compressor(zlevel).compress(data)


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    pack = _INT32.pack
    for start in range(0, len(view), XERIAL_CHUNK_SIZE):
        block = bytes(compress_raw(view[start : start + XERIAL_CHUNK_SIZE]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(codec: int, data: Buffer, max_size: int) -> bytes:
    """Decompress ``data``; never returns (or builds) more than ``max_size`` bytes."""
    codec = codec_of(codec)
    if codec == CompressionType.NONE:
        if len(data) > max_size:
            _too_big(codec, max_size)
        return bytes(data)
    try:
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_size)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_size)
        return _zstd_decompress(data, max_size)
    except (CorruptRecordError, UnsupportedCompressionError):
        raise
    except (zlib.error, RuntimeError, ValueError, zstandard.ZstdError, cramjam.DecompressionError) as exc:
        raise CorruptRecordError(f"invalid {codec.name.lower()} data: {exc}") from None


def _too_big(codec: CompressionType, max_size: int) -> None:
    raise DecompressionLimitError(
        f"{codec.name.lower()} data decompresses to more than the limit of {max_size} bytes"
    )


def _next_chunk(produced: int, compressed_len: int, max_size: int) -> int:
    """Size of the next bounded read: enough to finish or to hit the limit by one byte."""
    want = max(_MIN_CHUNK, 4 * compressed_len, produced)
    return min(want, _MAX_CHUNK, max_size - produced + 1)


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    out: list[bytes] = []
    produced = 0
    pending: Buffer = data
    while True:
        dec = zlib.decompressobj(31)
        while True:
            before = len(pending)
            chunk = dec.decompress(pending, _next_chunk(produced, len(data), max_size))
            produced += len(chunk)
            if produced > max_size:
                _too_big(CompressionType.GZIP, max_size)
            out.append(chunk)
            if dec.eof:
                break
            pending = dec.unconsumed_tail
            if not chunk and (not pending or len(pending) == before):
                raise CorruptRecordError("truncated gzip stream")
        pending = dec.unused_data
        if not pending:
            return b"".join(out)
        # GZIPInputStream reads concatenated members; anything else after a member is garbage.
        if pending[:2] != b"\x1f\x8b":
            raise CorruptRecordError(f"{len(pending)} bytes of trailing data after the gzip stream")


def _lz4_decompress(data: Buffer, max_size: int) -> bytes:
    dec = lz4.frame.LZ4FrameDecompressor()
    out: list[bytes] = []
    produced = 0
    pending: Buffer = data
    while True:
        chunk = dec.decompress(pending, max_length=_next_chunk(produced, len(data), max_size))
        pending = b""
        produced += len(chunk)
        if produced > max_size:
            _too_big(CompressionType.LZ4, max_size)
        out.append(chunk)
        if dec.eof:
            if dec.unused_data:
                raise CorruptRecordError(f"{len(dec.unused_data)} bytes of trailing data after the lz4 frame")
            return b"".join(out)
        if dec.needs_input or not chunk:
            raise CorruptRecordError("truncated lz4 frame")


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_raw_block(view, max_size, 0)
    # xerial: magic, version, min-compatible version (both ignored, as librdkafka and kafka-python do:
    # some writers put them little-endian), then length-prefixed raw blocks.
    if len(view) < 16:
        raise CorruptRecordError(f"truncated xerial snappy header: {len(view)} bytes")
    pos = 16
    end = len(view)
    out: list[bytes] = []
    produced = 0
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"truncated xerial snappy chunk length at byte {pos}")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"xerial snappy chunk at byte {pos - 4} declares {length} bytes, {end - pos} remain"
            )
        block = _snappy_raw_block(view[pos : pos + length], max_size, produced)
        produced += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _snappy_raw_block(block: memoryview, max_size: int, produced: int) -> bytes:
    """One raw snappy block, refused from its declared length before anything is allocated."""
    declared, _ = decode_unsigned_varint(block, 0)
    if produced + declared > max_size:
        _too_big(CompressionType.SNAPPY, max_size)
    result = bytes(cramjam.snappy.decompress_raw(block))
    if len(result) != declared:
        raise CorruptRecordError(f"snappy block declares {declared} bytes but holds {len(result)}")
    return result


def _zstd_check_frames(view: memoryview) -> None:
    """Walk zstd frame and block headers (no decompression): complete frames only, nothing after them.

    The stream reader used for bounded output treats a truncated frame as a short read, so this is what
    detects truncation and trailing garbage.
    """
    pos = 0
    end = len(view)
    if end == 0:
        raise CorruptRecordError("empty zstd data")
    unpack_u32 = _U32LE.unpack_from
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"truncated zstd frame magic at byte {pos}")
        (magic,) = unpack_u32(view, pos)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if end - pos < 8:
                raise CorruptRecordError(f"truncated zstd skippable frame at byte {pos}")
            (size,) = unpack_u32(view, pos + 4)
            pos += 8 + size
            if pos > end:
                raise CorruptRecordError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"bad zstd frame magic {magic:#010x} at byte {pos}")
        pos += 4
        if pos >= end:
            raise CorruptRecordError("truncated zstd frame header")
        fhd = view[pos]
        single_segment = (fhd >> 5) & 1
        fcs_flag = fhd >> 6
        header_len = (
            1
            + (0 if single_segment else 1)
            + (0, 1, 2, 4)[fhd & 3]
            + ((1 if single_segment else 0), 2, 4, 8)[fcs_flag]
        )
        pos += header_len
        while True:
            if end - pos < 3:
                raise CorruptRecordError("truncated zstd block header")
            bh = view[pos] | (view[pos + 1] << 8) | (view[pos + 2] << 16)
            pos += 3
            block_type = (bh >> 1) & 3
            size = bh >> 3
            if block_type == 1:  # RLE: one byte repeated `size` times
                size = 1
            elif block_type == 3:
                raise CorruptRecordError("reserved zstd block type")
            pos += size
            if pos > end:
                raise CorruptRecordError("truncated zstd block")
            if bh & 1:
                break
        if fhd & 4:  # content checksum
            pos += 4
            if pos > end:
                raise CorruptRecordError("truncated zstd content checksum")


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    _zstd_check_frames(view)
    declared = zstandard.frame_content_size(data)
    if declared > max_size:  # -1 = unknown
        _too_big(CompressionType.ZSTD, max_size)
    reader = _zstd_decompressor().stream_reader(data, read_across_frames=True)
    out: list[bytes] = []
    produced = 0
    first = declared + 1 if 0 <= declared < _MAX_CHUNK else _next_chunk(0, len(view), max_size)
    chunk = reader.read(min(first, max_size + 1))
    while chunk:
        produced += len(chunk)
        if produced > max_size:
            _too_big(CompressionType.ZSTD, max_size)
        out.append(chunk)
        chunk = reader.read(_next_chunk(produced, len(view), max_size))
    return b"".join(out)

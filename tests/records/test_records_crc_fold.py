"""Every CRC-32C implementation of the C extension against the ``crc32c`` package, bit for bit.

``_recwalk`` has up to four paths (slicing-by-8, SSE4.2 crc32, PCLMULQDQ folding, VPCLMULQDQ folding with
crc32 streams alongside); ``crc32c_using(path, data, value)`` runs one of them on any length, so each is
checked here on the lengths, start alignments and continuation values where folding code has its edges
(register rounds, the crc32 streams' split, the aligned head, the bytes after the last lane), up to 3 MiB.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from crc32c import crc32c as ref_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records import crc as crc_module

recwalk = pytest.importorskip("tidelog.records._recwalk", reason="the optional C extension is not built")

PATHS = recwalk.CRC32C_PATHS
MIB = 1 << 20
# random bytes shared by the tests; views into it give any length at any start alignment
POOL = random.Random(20261121).randbytes(3 * MIB + 4096)


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def view(start: int, length: int) -> memoryview:
    return memoryview(POOL)[start : start + length]


def test_paths_are_named_and_the_best_one_is_used() -> None:
    assert PATHS[0] == "slicing-by-8"
    assert set(PATHS) <= {"slicing-by-8", "sse4.2", "pclmulqdq", "vpclmulqdq"}
    assert PATHS[-1] == recwalk.CRC32C_PATH
    flags = cpu_flags()
    if {"sse4_2", "pclmulqdq", "avx512f", "avx512vl", "vpclmulqdq"} <= flags:
        assert recwalk.CRC32C_PATH == "vpclmulqdq"
        assert 0 < recwalk.CRC32C_FOLD_FROM <= 4096
    if sys.platform == "linux" and "sse4_2" in flags:
        assert "sse4.2" in PATHS
    if recwalk.CRC32C_PATH in ("pclmulqdq", "vpclmulqdq"):
        assert recwalk.CRC32C_FOLD_FROM > 0
    else:
        assert recwalk.CRC32C_FOLD_FROM == -1


@pytest.mark.parametrize("path", PATHS)
def test_every_length_up_to_5000_at_four_alignments(path: str) -> None:
    # dense where the folding code branches: its minimum lengths (79, 319), the register rounds, the first
    # lengths with crc32 streams (8 rounds: ~3.1 KiB), the 16-byte lanes and the last 0-15 bytes
    rng = random.Random(path)
    for length in range(0, 5000):
        start = (0, 1, 17, 63)[length % 4] + 64 * rng.randrange(8)
        value = rng.getrandbits(32) if length % 3 else 0
        data = view(start, length)
        got = recwalk.crc32c_using(path, data, value)
        assert got == ref_crc32c(data, value), (path, length, start, value)


@pytest.mark.parametrize("path", PATHS)
def test_random_lengths_up_to_3_mib_at_random_alignments(path: str) -> None:
    rng = random.Random(path + "long")
    lengths = [rng.randrange(5000, 70_000) for _ in range(60)]
    lengths += [rng.randrange(70_000, 3 * MIB) for _ in range(40)]
    lengths += [3 * MIB, MIB, 16 * 1024, 1_033_576 - 21, 16_365 - 21]  # the bench's batches, as checksummed
    for length in lengths:
        start = rng.randrange(4096 - 1)
        value = rng.choice((0, 0xFFFFFFFF, rng.getrandbits(32)))
        data = view(start, length)
        got = recwalk.crc32c_using(path, data, value)
        assert got == ref_crc32c(data, value), (path, length, start, value)


@pytest.mark.parametrize("path", PATHS)
def test_a_crc_continues_over_any_split(path: str) -> None:
    rng = random.Random(path + "split")
    for _ in range(40):
        start = rng.randrange(256)
        length = rng.randrange(20_000) if rng.random() < 0.7 else rng.randrange(2 * MIB)
        cut = rng.randrange(length + 1)
        whole = ref_crc32c(view(start, length))
        first = recwalk.crc32c_using(path, view(start, cut))
        assert recwalk.crc32c_using(path, view(start + cut, length - cut), first) == whole


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fill", [b"\x00", b"\xff"])
def test_constant_bytes(path: str, fill: bytes) -> None:
    for length in (1, 319, 320, 4096, 3 * 1024 + 7, MIB):
        data = fill * length
        for value in (0, 0xFFFFFFFF):
            assert recwalk.crc32c_using(path, data, value) == ref_crc32c(data, value)


def test_a_flipped_bit_anywhere_in_a_large_buffer_changes_the_crc() -> None:
    rng = random.Random(5)
    buf = bytearray(view(3, MIB))
    good = recwalk.crc32c(buf)
    assert good == ref_crc32c(buf)
    for _ in range(200):
        pos, bit = rng.randrange(len(buf)), 1 << rng.randrange(8)
        buf[pos] ^= bit
        assert recwalk.crc32c(buf) != good, pos
        buf[pos] ^= bit


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=6000), value=st.integers(0, 2**32 - 1), start=st.integers(0, 63))
def test_all_paths_on_arbitrary_bytes(data: bytes, value: int, start: int) -> None:
    padded = memoryview(bytes(start) + data)[start:]
    expect = ref_crc32c(data, value)
    for path in PATHS:
        assert recwalk.crc32c_using(path, padded, value) == expect
    assert recwalk.crc32c(padded, value) == expect


def test_crc32c_using_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no CRC-32C path"):
        recwalk.crc32c_using("avx9000", b"x")
    with pytest.raises(OverflowError):
        recwalk.crc32c_using(PATHS[0], b"x", 1 << 32)
    with pytest.raises(TypeError):
        recwalk.crc32c_using(PATHS[0], "text")
    with pytest.raises(TypeError):
        recwalk.crc32c_using(PATHS[0])
    with pytest.raises(BufferError):
        recwalk.crc32c_using(PATHS[-1], memoryview(POOL)[:4096:2])


def test_the_records_crc_module_uses_the_extension_unless_pure_python() -> None:
    src = str(Path(crc_module.__file__).resolve().parents[2])
    code = "from tidelog.records import crc; print(crc.IMPLEMENTATION)"
    env = dict(os.environ, PYTHONPATH=src)
    env.pop("TIDELOG_PURE_PYTHON", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"tidelog C ({recwalk.CRC32C_PATH})"
    env["TIDELOG_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "crc32c package"
    for length in (0, 5, 1000, 100_000):
        assert crc_module.crc32c(view(1, length)) == ref_crc32c(view(1, length))
        assert crc_module.crc32c(view(1, length), 77) == ref_crc32c(view(1, length), 77)

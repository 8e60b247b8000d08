"""Kafka's TransactionIndex (storage/txn_index.py): 34-byte entries, lazily created, collect/truncate rules."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tidelog.storage.index import CorruptIndexError
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex


def test_entries_are_kafkas_34_byte_layout_and_the_file_is_created_lazily(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    idx = TransactionIndex(path, 0)
    assert not path.exists() and idx.entries == [] and idx.is_empty
    idx.append(AbortedTxn(7, 3, 10, 4))
    idx.append(AbortedTxn(-5 + 2**40, 11, 12, 13))
    data = path.read_bytes()
    # version int16 0 | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64
    assert data == (b"\x00\x00" + (7).to_bytes(8, "big") + (3).to_bytes(8, "big") + (10).to_bytes(8, "big")
                    + (4).to_bytes(8, "big") + struct.pack(">hqqqq", 0, 2**40 - 5, 11, 12, 13))
    assert len(data) == 68
    again = TransactionIndex(path, 0)
    assert again.entries == [AbortedTxn(7, 3, 10, 4), AbortedTxn(2**40 - 5, 11, 12, 13)]


def test_last_offsets_must_increase(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "x.txnindex", 0)
    idx.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError, match="must increase"):
        idx.append(AbortedTxn(2, 1, 5, 6))
    assert idx.entries == [AbortedTxn(1, 0, 5, 6)] and (tmp_path / "x.txnindex").stat().st_size == 34


def test_collect_is_kafkas_collect_aborted_txns(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "x.txnindex", 0)
    a = AbortedTxn(1, 0, 5, 2)  # LSO 2: another transaction was open from 2
    b = AbortedTxn(2, 2, 8, 9)
    c = AbortedTxn(3, 20, 25, 26)
    for t in (a, b, c):
        idx.append(t)
    assert idx.collect(0, 3) == ([a, b], True)  # b's LSO 9 >= 3: complete
    assert idx.collect(6, 9) == ([b], True)  # a ended before 6
    assert idx.collect(9, 21) == ([c], True)
    assert idx.collect(9, 20) == ([], True)  # c starts at the bound
    assert idx.collect(26, 100) == ([], False)  # not complete: a later segment may hold an entry


def test_truncate_reset_and_rename(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    idx = TransactionIndex(path, 0)
    for i in range(4):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    idx.truncate_to(25)  # entries whose marker is at 25 or later go
    assert [t.producer_id for t in idx.entries] == [0, 1]
    assert path.stat().st_size == 68
    assert TransactionIndex(path, 0).entries == idx.entries
    idx.truncate_to(100)
    assert len(idx.entries) == 2
    renamed = tmp_path / "x.txnindex.deleted"
    idx.rename_to(renamed)
    assert renamed.exists() and not path.exists() and idx.path == renamed
    idx.reset()
    assert not renamed.exists() and idx.entries == []


def test_sanity_check_rejects_partial_entries_and_unknown_versions(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 2, 3, 4) + b"\x00" * 5)
    with pytest.raises(CorruptIndexError, match="multiple"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 2, 3, 4))
    with pytest.raises(CorruptIndexError, match="version"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 2, 3, 4))
    idx = TransactionIndex(path, 0)
    idx.sanity_check()
    assert idx.entries == [AbortedTxn(1, 2, 3, 4)]

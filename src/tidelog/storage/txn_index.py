"""Kafka's ``TransactionIndex``: the ``.txnindex`` file beside a segment, one 34-byte entry per aborted transaction
whose ABORT marker lies in the segment (layout :data:`tidelog.storage.format.TXN_INDEX_ENTRY`).

The file is created lazily by the first :meth:`TransactionIndex.append`; entries are appended in increasing
``last_offset`` (the marker's offset) order.  The entries are few (one per aborted transaction), so they are
read once and kept in memory beside the file; every change goes through this object (under the log's lock), so
the cache stays the file's content.  :meth:`collect` is Kafka's ``collectAbortedTxns``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import NamedTuple

from tidelog.storage.format import TXN_INDEX_ENTRY, TXN_INDEX_ENTRY_SIZE, TXN_INDEX_VERSION
from tidelog.storage.index import CorruptIndexError


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int  # the partition's LSO when the marker was written

    def encode(self) -> bytes:
        return TXN_INDEX_ENTRY.pack(
            TXN_INDEX_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TxnIndexSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    complete: bool  # an entry's LSO reached the upper bound: no later segment can hold a relevant entry


def decode_txn_index(data: bytes, name: str = "txnindex") -> list[AbortedTxn]:
    """Parse a whole ``.txnindex`` (raises :class:`CorruptIndexError` on a partial entry or unknown version)."""
    if len(data) % TXN_INDEX_ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index {name} has size {len(data)}, not a multiple of the entry size {TXN_INDEX_ENTRY_SIZE}"
        )
    out = []
    for version, pid, first, last, lso in TXN_INDEX_ENTRY.iter_unpack(data):
        if version != TXN_INDEX_VERSION:
            raise CorruptIndexError(f"transaction index {name}: unexpected aborted transaction version {version}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """The ``.txnindex`` of one segment (see module docstring)."""

    __slots__ = ("_entries", "_lock", "base_offset", "path")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None if self.path.exists() else []
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ reading
    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry (Kafka's ``allAbortedTxns``); read from the file once."""
        entries = self._entries
        if entries is None:
            with self._lock:
                if self._entries is None:
                    try:
                        data = self.path.read_bytes()
                    except FileNotFoundError:
                        data = b""
                    whole = len(data) - len(data) % TXN_INDEX_ENTRY_SIZE
                    self._entries = decode_txn_index(data[:whole], str(self.path))
                entries = self._entries
        return entries

    @property
    def is_empty(self) -> bool:
        entries = self._entries
        return entries is not None and not entries

    def last_offset(self) -> int | None:
        entries = self.entries
        return entries[-1].last_offset if entries else None

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns``: the entries overlapping [fetch_offset, upper_bound_offset); complete
        once an entry's last stable offset reaches the upper bound."""
        out = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(out, True)
        return TxnIndexSearchResult(out, False)

    def sanity_check(self) -> None:
        """Kafka's ``sanityCheck``: whole entries of version 0 (raises :class:`CorruptIndexError`)."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                self._entries = []
                return
            self._entries = decode_txn_index(data, str(self.path))

    # ------------------------------------------------------------------ changes
    def append(self, txn: AbortedTxn) -> None:
        """Append one entry, creating the file on the first one; last offsets must increase."""
        with self._lock:
            entries = self.entries
            if entries and entries[-1].last_offset >= txn.last_offset:
                raise ValueError(
                    f"the last offset of appended transactions must increase sequentially, but {txn.last_offset} "
                    f"is not greater than the current last offset {entries[-1].last_offset} of {self.path}"
                )
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, txn.encode())
            finally:
                os.close(fd)
            entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose last offset is >= ``offset`` (Kafka's ``truncateTo``)."""
        with self._lock:
            entries = self.entries
            keep = len(entries)
            for i, txn in enumerate(entries):
                if txn.last_offset >= offset:
                    keep = i
                    break
            if keep == len(entries):
                return
            os.truncate(self.path, keep * TXN_INDEX_ENTRY_SIZE)
            del entries[keep:]

    def reset(self) -> None:
        """Remove the file and every entry (recovery rebuilds them; Kafka's ``reset``)."""
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._entries = []

    def flush(self) -> None:
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename_to(self, path: Path) -> None:
        with self._lock:
            path = Path(path)
            try:
                os.replace(self.path, path)
            except FileNotFoundError:
                pass
            self.path = path

    def moved_to(self, path: Path) -> None:
        """The file is at ``path`` now (its directory was renamed)."""
        with self._lock:
            self.path = Path(path)

    def delete(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._entries = []

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self.path)!r})"


__all__ = ["AbortedTxn", "TransactionIndex", "TxnIndexSearchResult", "decode_txn_index"]

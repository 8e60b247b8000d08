"""Kafka's ``CleanedTransactionMetadata``: what the cleaner knows about transactions while it walks batches in
offset order, from the aborted transactions of the ``.txnindex`` files.

* A transactional data batch is *aborted* when its producer has an aborted transaction whose first offset the walk
  has reached and whose ABORT marker it has not: its records go, whatever their keys.
* A COMMIT marker may be discarded when no batch of its transaction was seen in this walk (its data is gone); an
  ABORT marker likewise, else it is kept and its ``.txnindex`` entry goes to the cleaned segment (``cleaned_index``).
  A discardable marker is removed only after its delete horizon (the batch's delete-horizon attribute, set by the
  first cleaning that finds it discardable, ``delete.retention.ms`` on); the filter applies that part.
* An empty control batch (already cleaned) may always be discarded; other control types never.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from tidelog.records.header import (
    H_BASE_OFFSET,
    H_LAST_OFFSET_DELTA,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    HeaderTuple,
)
from tidelog.storage.log.loader import end_txn_marker_of
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex


class _AbortedTxnMetadata:
    __slots__ = ("aborted", "last_observed_batch_offset")

    def __init__(self, aborted: AbortedTxn) -> None:
        self.aborted = aborted
        self.last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """See the module docstring."""

    def __init__(self, cleaned_index: TransactionIndex | None = None) -> None:
        self._queue: list[tuple[int, int, AbortedTxn]] = []  # (first offset, producer id, entry), a heap
        self._known: set[tuple[int, int]] = set()  # (producer id, first offset) already queued
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnMetadata] = {}
        self.cleaned_index = cleaned_index

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            key = (txn.producer_id, txn.first_offset)
            if key not in self._known:  # a transaction spanning segments is collected once per segment
                self._known.add(key)
                heapq.heappush(self._queue, (txn.first_offset, txn.producer_id, txn))

    def _consume_up_to(self, offset: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= offset:
            _, pid, txn = heapq.heappop(queue)
            if pid not in self._ongoing_aborted:
                self._ongoing_aborted[pid] = _AbortedTxnMetadata(txn)

    def on_batch_read(self, fields: HeaderTuple) -> bool:
        """A transactional data batch: whether it belongs to an aborted transaction (Kafka's ``onBatchRead``)."""
        last = fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA]
        self._consume_up_to(last)
        pid = fields[H_PRODUCER_ID]
        meta = self._ongoing_aborted.get(pid)
        if meta is not None:
            meta.last_observed_batch_offset = last
            return True
        self._ongoing_committed.add(pid)
        return False

    def on_control_batch_read(self, fields: HeaderTuple, batch: bytes | memoryview) -> bool:
        """A control batch (``batch``: its bytes): whether it may be discarded (Kafka's ``onControlBatchRead``)."""
        self._consume_up_to(fields[H_BASE_OFFSET] + fields[H_LAST_OFFSET_DELTA])
        if not fields[H_RECORDS_COUNT]:
            return True  # an empty control batch was cleaned already
        marker = end_txn_marker_of(batch)
        if marker is None:
            return False
        pid = fields[H_PRODUCER_ID]
        if marker[0]:  # ABORT: kept while batches of the transaction were seen in this walk
            meta = self._ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    last = self.cleaned_index.last_offset()
                    if last is None or last < meta.aborted.last_offset:
                        self.cleaned_index.append(meta.aborted)
                return False
            return True
        # COMMIT: discardable when no batch of the transaction was seen
        if pid in self._ongoing_committed:
            self._ongoing_committed.discard(pid)
            return False
        return True


__all__ = ["CleanedTransactionMetadata"]

"""The log of one partition, split along Kafka's lines (see docs/decisions/0009-partition-log-and-late-checks.md):

* :mod:`.partition_log` — :class:`PartitionLog`, the facade (Kafka's UnifiedLog): appends, producer state,
  transactions, high watermark, over :class:`~.local_log.LocalLog` (:mod:`.local_log`, Kafka's LocalLog): the
  directory and its segments, reads, rolls, truncation, retention hooks, flush, close;
* :mod:`.validator` — :class:`LogValidator` (Kafka's LogValidator): client checks, timestamps, recompression;
* :mod:`.loader` — :class:`LogLoader` (Kafka's LogLoader): load, swap/cleaned/deleted files, recovery,
  producer state rebuild;
* :mod:`.segments` — :class:`LogSegments` (Kafka's LogSegments): the ordered segments, lookups, roll.

A module global to monkeypatch lives where it is looked up: ``_c_validate_single_batch`` in :mod:`.validator`,
``_c_append_leader_fast`` in :mod:`.partition_log`.
"""

from tidelog.storage.log.loader import EpochCache, LoadedLogOffsets, LogLoader, ProducerState
from tidelog.storage.log.partition_log import (
    AppendInfo,
    PartitionLog,
    ReadInfo,
    UnexpectedAppendOffsetError,
    parse_topic_partition,
)
from tidelog.storage.log.segments import LogSegments
from tidelog.storage.log.validator import LogValidator, ValidatedBatch
from tidelog.storage.txn_index import AbortedTxn

__all__ = [
    "AbortedTxn",
    "AppendInfo",
    "EpochCache",
    "LoadedLogOffsets",
    "LogLoader",
    "LogSegments",
    "LogValidator",
    "PartitionLog",
    "ProducerState",
    "ReadInfo",
    "UnexpectedAppendOffsetError",
    "ValidatedBatch",
    "parse_topic_partition",
]

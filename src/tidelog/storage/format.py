"""The on-disk layouts of a partition directory's files, defined once (Kafka's names for files and fields).

The record batch inside a ``.log`` is the records layer's: its 61-byte header is
:data:`tidelog.records.header.BATCH_HEADER` (with the field offsets and single-field structs beside it), since
the bytes layer parses it. This module holds what only exists on disk: the segment file suffixes, the entries
of the ``.index`` / ``.timeindex`` / ``.txnindex`` files and the producer-state ``.snapshot`` layout. Storage,
the cleaner, ``tidelog dump-log`` and the ``tidelog-log`` Spark source all read them from here. Every layout
is a precompiled :class:`struct.Struct`, big-endian as Kafka writes them.
"""

from __future__ import annotations

import re
import struct

# ----------------------------------------------------------------------------------------------- file names
# Kafka's LogFileUtils suffixes; a segment is ``<20-digit base offset><suffix>``.
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# ------------------------------------------------------------------------------------------------- indexes
#: ``.index`` entry (Kafka's OffsetIndex): relativeOffset int32, physical position int32 — 8 bytes
OFFSET_INDEX_ENTRY = struct.Struct(">ii")
OFFSET_INDEX_ENTRY_SIZE = OFFSET_INDEX_ENTRY.size
#: ``.timeindex`` entry (Kafka's TimeIndex): timestamp int64, relativeOffset int32 — 12 bytes
TIME_INDEX_ENTRY = struct.Struct(">qi")
TIME_INDEX_ENTRY_SIZE = TIME_INDEX_ENTRY.size
#: ``.txnindex`` entry (Kafka's TransactionIndex AbortedTxn): version int16, producerId int64, firstOffset int64,
#: lastOffset int64, lastStableOffset int64 — 34 bytes
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_ENTRY_SIZE = TXN_INDEX_ENTRY.size  # 34
TXN_INDEX_VERSION = 0  # AbortedTxn.CURRENT_VERSION

# --------------------------------------------------------------------------------------- producer snapshot
# ``<20-digit offset>.snapshot``, Kafka's ProducerSnapshot v1 (ProducerStateManager)::
#
#     0  version  int16  (= 1)
#     2  crc      uint32 (CRC-32C of bytes 6..end)
#     6  count    int32
#     10 entries  46 bytes each: producerId int64, producerEpoch int16, lastSequence int32, lastOffset int64,
#                 offsetDelta int32, timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64
PRODUCER_SNAPSHOT_VERSION = 1
VERSION_OFFSET = 0
CRC_OFFSET = 2
PRODUCER_ENTRIES_OFFSET = 6  # the CRC covers the file from here (count and entries)
#: version, crc, count
PRODUCER_SNAPSHOT_HEADER = struct.Struct(">hIi")
#: one producer's entry, fields in the order of the layout above
PRODUCER_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
PRODUCER_SNAPSHOT_ENTRY_SIZE = PRODUCER_SNAPSHOT_ENTRY.size  # 46


# ------------------------------------------------------------------------------------- partition directories
# ``<topic>-<partition>``, and Kafka's ``<topic>-<partition>.<uuid hex><suffix>`` for a log being deleted, moved
# into another log directory (a future replica) or left over from a topic gone elsewhere (stray)
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+\Z")
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)\Z")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``orders-3`` -> ``("orders", 3)``; None for anything that is not a live partition directory."""
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        return None
    m = _PARTITION_DIR.match(name)
    if not m or not LEGAL_TOPIC.match(m.group("topic")):
        return None
    return m.group("topic"), int(m.group("partition"))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"

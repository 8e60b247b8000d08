"""Producer id blocks in ZooKeeper mode: Kafka's ``ZkProducerIdManager``.

Every broker of a cluster hands out producer ids, so blocks must be unique cluster-wide (two producers with one
id writing to one partition would share its sequence numbers: OUT_OF_ORDER_SEQUENCE, or batches dropped as
duplicates). As Kafka does in ZooKeeper mode, the latest reserved block lives in the znode
``/latest_producer_id_block`` (``ProducerIdBlockZNode``)::

    {"version":1,"broker":2,"block_start":"1000","block_end":"1999"}

``version`` and ``broker`` are JSON numbers, ``block_start``/``block_end`` decimal *strings* (Kafka writes the
longs with ``toString``), and ``block_end`` is inclusive. A broker reserves the next block by reading the znode
and writing the block after it conditionally on the znode version it read (a concurrent reservation elsewhere
makes the write fail with BadVersion: read again and retry); a missing znode is created with the first block.
The write is acknowledged by a ZooKeeper quorum before any id of the block is handed out.

A data dir that was used before this existed (cluster brokers wrote the single-node file
``tidelog-producer-id-block``) keeps its file as a floor: this broker's blocks start at or above the ids it may
have handed out from the file. (Ids other brokers handed out from *their* files are not known here.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.broker.producer_ids import DEFAULT_BLOCK_SIZE, ProducerIdManager, read_block_files

log = logging.getLogger("tidelog.cluster.producer_ids")

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CURRENT_VERSION = 1
MAX_PRODUCER_ID = 2**63 - 1  # producer ids are int64
_MAX_ATTEMPTS = 100


class ProducerIdBlockError(RuntimeError):
    """The znode does not parse, or producer ids are exhausted."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker: int
    block_start: int
    block_end: int  # inclusive, as in the znode


def encode_block(block: ProducerIdBlock) -> bytes:
    """``ProducerIdBlockZNode.generateProducerIdBlockJson``."""
    return json.dumps({"version": CURRENT_VERSION, "broker": block.broker,
                       "block_start": str(block.block_start), "block_end": str(block.block_end)},
                      separators=(",", ":")).encode()


def decode_block(data: bytes) -> ProducerIdBlock:
    """``ProducerIdBlockZNode.parseProducerIdBlockData`` (numbers are accepted too)."""
    try:
        value = json.loads(data)
        block = ProducerIdBlock(int(value["broker"]), int(value["block_start"]), int(value["block_end"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ProducerIdBlockError(f"cannot parse {PRODUCER_ID_BLOCK_PATH}: {data[:200]!r}") from exc
    if block.block_start < 0 or block.block_end < block.block_start:
        raise ProducerIdBlockError(f"{PRODUCER_ID_BLOCK_PATH} holds an invalid block {block}")
    return block


class ZkBlockSource:
    """A :class:`tidelog.broker.producer_ids.BlockSource` on ``/latest_producer_id_block`` (blocking kazoo calls:
    the manager reserves at most once per block, from a worker thread when used by the event loop)."""

    def __init__(self, zk: Any, broker_id: int, floor: int = 0, timeout_s: float = 15.0) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.floor = floor
        self.timeout_s = timeout_s  # per ZooKeeper call: a disconnected client fails instead of hanging

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.zk, method + "_async")(*args, **kwargs).get(timeout=self.timeout_s)

    def issued_below(self) -> int:
        # Ids of earlier runs were interleaved with other brokers' blocks: none is known to be ours.
        return 0

    def _new_block(self, start: int, size: int) -> ProducerIdBlock:
        start = max(start, self.floor)
        if start > MAX_PRODUCER_ID - size:
            raise ProducerIdBlockError("producer ids are exhausted (the next block would pass 2^63-1)")
        return ProducerIdBlock(self.broker_id, start, start + size - 1)

    def reserve(self, size: int) -> tuple[int, int]:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for _attempt in range(_MAX_ATTEMPTS):
            try:
                data, stat = self._call("get", PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                block = self._new_block(0, size)
                try:
                    self._call("create", PRODUCER_ID_BLOCK_PATH, encode_block(block), makepath=True)
                except NodeExistsError:
                    continue  # another broker created it first: read it
            else:
                # Kafka creates the znode empty at start-up: no block reserved yet
                start = decode_block(data).block_end + 1 if data else 0
                block = self._new_block(start, size)
                try:
                    self._call("set", PRODUCER_ID_BLOCK_PATH, encode_block(block), version=stat.version)
                except BadVersionError:
                    continue  # reserved elsewhere meanwhile: read the new latest block and try again
            log.info("producer id block reserved", extra={"kv": {
                "broker": self.broker_id, "block_start": block.block_start, "block_end": block.block_end}})
            return block.block_start, block.block_end + 1
        raise ProducerIdBlockError(f"{PRODUCER_ID_BLOCK_PATH} kept changing: no block reserved after "
                                   f"{_MAX_ATTEMPTS} attempts")


def zk_producer_id_manager(zk: Any, broker_id: int, log_dirs: Iterable[Path | str] = (),
                           block_size: int = DEFAULT_BLOCK_SIZE) -> ProducerIdManager:
    """The manager a ZooKeeper-mode broker uses (``log_dirs``: the floor left by the single-node file)."""
    try:
        floor = read_block_files(log_dirs)
    except OSError as exc:  # ProducerIdBlockFileError included: the file is only a floor here
        log.warning("ignoring the single-node producer id block file: %s", exc)
        floor = 0
    return ProducerIdManager(source=ZkBlockSource(zk, broker_id, floor=floor), block_size=block_size)

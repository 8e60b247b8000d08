"""Transactions in the console, as ``tidelog transactions`` (cli/transactions.py) does them — the same requests
(:mod:`tidelog.client.admin_ops`) with the console's credentials: list (ListTransactions on every broker), describe
one transactional id at its coordinator (FindCoordinator, DescribeTransactions), the open transactions of a
partition (DescribeProducers at its leader) and abort one of them (an ABORT marker written by WriteTxnMarkers at the
leader, as Kafka's ``Admin.abortTransaction``)."""

from __future__ import annotations

import time
from typing import Any

from tidelog.client import admin_ops
from tidelog.console.kafka import Cluster, ConsoleError


def describe(cluster: Cluster, tid: str) -> dict[str, Any]:
    node, s = cluster.run(admin_ops.describe_transaction(cluster.transport, tid))
    start = s["transaction_start_time_ms"]
    return {"transactional_id": tid, "coordinator": node, "producer_id": s["producer_id"],
            "producer_epoch": s["producer_epoch"], "state": s["transaction_state"],
            "timeout_ms": s["transaction_timeout_ms"], "start_ms": start,
            "duration_ms": int(time.time() * 1000) - start if start >= 0 else None,
            "partitions": [f"{t['topic']}-{p}" for t in s["topics"] for p in t["partitions"]]}


def _leader(cluster: Cluster, topic: str, partition: int) -> tuple[str, int]:
    md = cluster.metadata()
    t = md.topics.get(topic)
    if t is None or t.error is not None or partition not in t.partitions:
        raise ConsoleError(f"{topic}-{partition} does not exist", 404)
    leader = t.partitions[partition].leader
    if leader < 0 or leader not in md.brokers:
        raise ConsoleError(f"{topic}-{partition} has no leader now", 503)
    b = md.brokers[leader]
    return b.host, b.port


def open_transactions(cluster: Cluster, topic: str, partition: int) -> list[dict[str, Any]]:
    """The producers of a partition with a transaction open there (DescribeProducers at its leader)."""
    host, port = _leader(cluster, topic, partition)
    found = cluster.run(admin_ops.describe_producers(cluster.transport, host, port, {topic: [partition]}))
    return [{"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"],
             "coordinator_epoch": a["coordinator_epoch"], "start_offset": a["current_txn_start_offset"],
             "last_timestamp": a["last_timestamp"]}
            for _t, _p, a in found if a["current_txn_start_offset"] >= 0]


def abort(cluster: Cluster, topic: str, partition: int, start_offset: int) -> dict[str, Any]:
    """Abort the transaction that begins at ``start_offset`` of the partition (``transactions abort
    --start-offset``)."""
    found = [a for a in open_transactions(cluster, topic, partition) if a["start_offset"] == start_offset]
    if not found:
        raise ConsoleError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}", 404)
    a = found[0]
    host, port = _leader(cluster, topic, partition)
    cluster.run(admin_ops.write_abort_marker(cluster.transport, host, port, topic, partition, a["producer_id"],
                                             a["producer_epoch"], a["coordinator_epoch"]))
    return {"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"]}

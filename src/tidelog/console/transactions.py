"""Transactions in the console, as ``tidelog transactions`` (cli/transactions.py) does them, through tidelog's own
protocol client with the console's credentials: list (ListTransactions on every broker), describe one
transactional id at its coordinator (FindCoordinator, DescribeTransactions), the open transactions of a partition
(DescribeProducers at its leader) and abort one of them (an ABORT marker written by WriteTxnMarkers at the leader,
as Kafka's ``Admin.abortTransaction``)."""

from __future__ import annotations

import time
from typing import Any

from tidelog.console.kafka import Cluster, ConsoleError, from_code

FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS = 10, 27, 61, 65


def describe(cluster: Cluster, tid: str) -> dict[str, Any]:
    found = cluster.any_broker(FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
    if found["error_code"]:
        raise from_code(found["error_code"], found.get("error_message"), f"FindCoordinator {tid}")
    resp = cluster.peer_call(found["host"], found["port"], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    s = resp["transaction_states"][0]
    if s["error_code"]:
        raise from_code(s["error_code"], None, f"DescribeTransactions {tid}")
    start = s["transaction_start_time_ms"]
    return {"transactional_id": tid, "coordinator": found["node_id"], "producer_id": s["producer_id"],
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
    resp = cluster.peer_call(host, port, DESCRIBE_PRODUCERS, 0,
                              {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    out: list[dict[str, Any]] = []
    for t in resp["topics"]:
        for p in t["partitions"]:
            if p["error_code"]:
                raise from_code(p["error_code"], p.get("error_message"), f"DescribeProducers {topic}-{partition}")
            out.extend({"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"],
                        "coordinator_epoch": a["coordinator_epoch"], "start_offset": a["current_txn_start_offset"],
                        "last_timestamp": a["last_timestamp"]}
                       for a in p["active_producers"] if a["current_txn_start_offset"] >= 0)
    return out


def abort(cluster: Cluster, topic: str, partition: int, start_offset: int) -> dict[str, Any]:
    """Abort the transaction that begins at ``start_offset`` of the partition (``transactions abort
    --start-offset``)."""
    found = [a for a in open_transactions(cluster, topic, partition) if a["start_offset"] == start_offset]
    if not found:
        raise ConsoleError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}", 404)
    a = found[0]
    host, port = _leader(cluster, topic, partition)
    body = {"markers": [{"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"],
                         "transaction_result": False, "topics": [{"name": topic, "partition_indexes": [partition]}],
                         "coordinator_epoch": max(a["coordinator_epoch"], 0)}]}
    resp = cluster.peer_call(host, port, WRITE_TXN_MARKERS, 1, body)
    code = resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    if code:
        raise from_code(code, None, f"abort of producer {a['producer_id']} in {topic}-{partition}")
    return {"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"]}

"""``tidelog transactions``: the jobs of Kafka's ``kafka-transactions.sh``.

* ``list`` — ListTransactions on every broker (each answers for the transactional ids it coordinates), with the
  state / producer id / duration filters of the API;
* ``describe --transactional-id ID`` — FindCoordinator(TRANSACTION), then DescribeTransactions at the coordinator;
* ``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E --coordinator-epoch C)`` —
  writes an ABORT marker to the partition's leader (WriteTxnMarkers, as Kafka's ``Admin.abortTransaction``); with
  ``--start-offset`` the producer is found with DescribeProducers (the one whose open transaction starts there);
* ``find-hanging (--broker-id N | --topic T [--partition P])`` — open transactions in partitions (DescribeProducers)
  older than ``--max-transaction-timeout`` minutes whose coordinator no longer has them in an ongoing transaction
  on that partition (ListTransactions by producer id, DescribeTransactions): the candidates for ``abort``.

confluent-kafka's AdminClient has no transaction APIs, so these speak the protocol through tidelog's own codec
(:class:`tidelog.cluster.peer.Peer`, as ``tidelog cluster`` does).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import click

from tidelog.cli._client import bootstrap_option, fail, output_option, peer_request, print_table
from tidelog.protocol.errors import error_for_code

METADATA, FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 3, 10, 27, 61
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def _err(code: int) -> str:
    return error_for_code(code).name


def _host_port(hp: str) -> tuple[str, int]:
    host, _, port = hp.strip().rpartition(":")
    return host.strip("[]"), int(port)


async def _request(host: str, port: int, api_key: int, version: int, body: dict, timeout: float) -> dict:
    return await peer_request(host, port, api_key, version, body, timeout)


async def _metadata(bootstrap: str, topics: list[str] | None, timeout: float) -> dict:
    last: Exception | None = None
    for hp in bootstrap.split(","):
        if not hp.strip():
            continue
        host, port = _host_port(hp)
        body = {"topics": None if topics is None else [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        try:
            return await _request(host, port, METADATA, 12, body, timeout)
        except (OSError, TimeoutError) as exc:
            last = exc
    fail(f"cannot reach any broker of {bootstrap}: {last}")


def _brokers(md: dict) -> dict[int, tuple[str, int]]:
    return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}


async def _leader(bootstrap: str, topic: str, partition: int, timeout: float) -> tuple[str, int]:
    md = await _metadata(bootstrap, [topic], timeout)
    for t in md["topics"]:
        if t["error_code"]:
            fail(f"topic {topic}: {_err(t['error_code'])}")
        for p in t["partitions"]:
            if p["partition_index"] == partition:
                node = _brokers(md).get(p["leader_id"])
                if node is None:
                    fail(f"{topic}-{partition} has no leader now")
                return node
    fail(f"{topic}-{partition} does not exist")


async def _list(bootstrap: str, states: list[str], pids: list[int], duration_ms: int,
                timeout: float) -> list[tuple[int, dict]]:
    md = await _metadata(bootstrap, [], timeout)
    out: list[tuple[int, dict]] = []
    body = {"state_filters": states, "producer_id_filters": pids, "duration_filter": duration_ms}
    for node, (host, port) in sorted(_brokers(md).items()):
        resp = await _request(host, port, LIST_TRANSACTIONS, 1, body, timeout)
        if resp["error_code"]:
            fail(f"broker {node}: ListTransactions failed: {_err(resp['error_code'])}")
        if resp["unknown_state_filters"]:
            fail(f"unknown transaction states: {', '.join(resp['unknown_state_filters'])}")
        out.extend((node, t) for t in resp["transaction_states"])
    return out


async def _describe(bootstrap: str, tid: str, timeout: float) -> tuple[int, dict]:
    host, port = _host_port(bootstrap.split(",")[0])
    found = await _request(host, port, FIND_COORDINATOR, 3, {"key": tid, "key_type": 1}, timeout)
    if found["error_code"]:
        fail(f"no coordinator for transactional id {tid!r}: {_err(found['error_code'])}")
    state = (await _request(found["host"], found["port"], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]},
                            timeout))["transaction_states"][0]
    if state["error_code"]:
        fail(f"transactional id {tid!r}: {_err(state['error_code'])}")
    return found["node_id"], state


async def _producers(host: str, port: int, parts: dict[str, list[int]], timeout: float) -> list[tuple[str, int, dict]]:
    body = {"topics": [{"name": t, "partition_indexes": ps} for t, ps in parts.items()]}
    resp = await _request(host, port, DESCRIBE_PRODUCERS, 0, body, timeout)
    out: list[tuple[str, int, dict]] = []
    for t in resp["topics"]:
        for p in t["partitions"]:
            if p["error_code"]:
                fail(f"{t['name']}-{p['partition_index']}: {_err(p['error_code'])}")
            out.extend((t["name"], p["partition_index"], a) for a in p["active_producers"])
    return out


@click.group("transactions")
def transactions() -> None:
    """List, describe and abort transactions; find hanging ones (kafka-transactions.sh)."""


@transactions.command("list")
@output_option
@bootstrap_option
@click.option("--state", "states", multiple=True, help="Only transactions in this state (repeatable), e.g. Ongoing.")
@click.option("--producer-id", "pids", multiple=True, type=int, help="Only this producer id (repeatable).")
@click.option("--duration-filter", "duration_ms", type=int, default=-1,
              help="Only transactions running longer than this many ms.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def list_cmd(bootstrap: str, properties: tuple[str, ...], states: tuple[str, ...], pids: tuple[int, ...],
             duration_ms: int, as_json: bool, timeout: float) -> None:
    """Every transactional id the brokers coordinate."""
    rows = asyncio.run(_list(bootstrap, list(states), list(pids), duration_ms, timeout))
    if as_json:
        click.echo(json.dumps([{"transactionalId": t["transactional_id"], "coordinator": node,
                                "producerId": t["producer_id"], "state": t["transaction_state"]} for node, t in rows]))
        return
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                [(t["transactional_id"], node, t["producer_id"], t["transaction_state"]) for node, t in rows], layout="tabbed")


@transactions.command("describe")
@output_option
@bootstrap_option
@click.option("--transactional-id", "tid", required=True)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def describe_cmd(bootstrap: str, properties: tuple[str, ...], tid: str, as_json: bool, timeout: float) -> None:
    """The state of one transactional id at its coordinator."""
    node, s = asyncio.run(_describe(bootstrap, tid, timeout))
    start = s["transaction_start_time_ms"]
    duration = int(time.time() * 1000) - start if start >= 0 else None
    parts = ",".join(f"{t['topic']}-{p}" for t in s["topics"] for p in t["partitions"])
    if as_json:
        click.echo(json.dumps({"coordinator": node, "transactionalId": tid, "producerId": s["producer_id"],
                               "producerEpoch": s["producer_epoch"], "state": s["transaction_state"],
                               "timeoutMs": s["transaction_timeout_ms"], "startTimeMs": start,
                               "durationMs": duration, "partitions": parts}))
        return
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [(node, tid, s["producer_id"], s["producer_epoch"], s["transaction_state"],
                  s["transaction_timeout_ms"], start if start >= 0 else "None",
                  duration if duration is not None else "None", parts or "None")], layout="tabbed")


@transactions.command("abort")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, default=None, help="Offset where the transaction to abort begins.")
@click.option("--producer-id", type=int, default=None)
@click.option("--producer-epoch", type=int, default=None)
@click.option("--coordinator-epoch", type=int, default=None)
@click.option("--timeout", type=float, default=30.0, show_default=True)
def abort_cmd(bootstrap: str, properties: tuple[str, ...], topic: str, partition: int, start_offset: int | None,
              producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None,
              timeout: float) -> None:
    """Write an ABORT marker for a (hanging) transaction in one partition."""
    explicit = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in explicit:
        fail("give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch", 2)

    async def run() -> str:
        host, port = await _leader(bootstrap, topic, partition, timeout)
        pid, epoch, cepoch = explicit
        if start_offset is not None:
            found = [a for _, _, a in await _producers(host, port, {topic: [partition]}, timeout)
                     if a["current_txn_start_offset"] == start_offset]
            if not found:
                fail(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
            a = found[0]
            pid, epoch, cepoch = a["producer_id"], a["producer_epoch"], a["coordinator_epoch"]
        body = {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
                             "topics": [{"name": topic, "partition_indexes": [partition]}],
                             "coordinator_epoch": max(cepoch or 0, 0)}]}
        resp = await _request(host, port, WRITE_TXN_MARKERS, 1, body, timeout)
        code = resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]
        if code:
            fail(f"abort of producer {pid} in {topic}-{partition} failed: {_err(code)}")
        return f"aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-{partition}"

    click.echo(asyncio.run(run()))


@transactions.command("find-hanging")
@output_option
@bootstrap_option
@click.option("--broker-id", type=int, default=None, help="Every partition this broker leads.")
@click.option("--topic", default=None)
@click.option("--partition", type=int, default=None)
@click.option("--max-transaction-timeout", "max_minutes", type=int, default=15, show_default=True,
              help="transaction.max.timeout.ms of the cluster, in minutes.")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def find_hanging_cmd(bootstrap: str, properties: tuple[str, ...], broker_id: int | None, topic: str | None,
                     partition: int | None, max_minutes: int, timeout: float) -> None:
    """Open transactions older than the maximum timeout that their coordinator no longer tracks."""
    if (broker_id is None) == (topic is None):
        fail("give --broker-id or --topic", 2)

    async def run() -> list[tuple]:
        md = await _metadata(bootstrap, None if topic is None else [topic], timeout)
        nodes = _brokers(md)
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in md["topics"]:
            if t["error_code"]:
                fail(f"topic {t['name']}: {_err(t['error_code'])}")
            for p in t["partitions"]:
                if partition is not None and p["partition_index"] != partition:
                    continue
                if broker_id is not None and p["leader_id"] != broker_id:
                    continue
                by_leader.setdefault(p["leader_id"], {}).setdefault(t["name"], []).append(p["partition_index"])
        now = int(time.time() * 1000)
        limit = max_minutes * 60_000
        open_txns = []
        for leader, parts in by_leader.items():
            if leader not in nodes:
                continue
            for name, idx, a in await _producers(*nodes[leader], parts, timeout):
                if a["current_txn_start_offset"] >= 0 and now - a["last_timestamp"] > limit:
                    open_txns.append((name, idx, a))
        hanging = []
        for name, idx, a in open_txns:
            listed = [t for _, t in await _list(bootstrap, [], [a["producer_id"]], -1, timeout)]
            ongoing = False
            for t in listed:
                _, s = await _describe(bootstrap, t["transactional_id"], timeout)
                in_txn = any(x["topic"] == name and idx in x["partitions"] for x in s["topics"])
                if s["producer_id"] == a["producer_id"] and s["transaction_state"] != "CompleteAbort" and in_txn:
                    ongoing = True
            if not ongoing:
                hanging.append((name, idx, a["producer_id"], a["producer_epoch"], a["coordinator_epoch"],
                                a["current_txn_start_offset"], a["last_timestamp"],
                                (now - a["last_timestamp"]) // 60_000))
        return hanging

    rows = asyncio.run(run())
    print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                 "LastTimestamp", "Duration(min)"], rows, layout="tabbed")

"""``tidelog cluster describe``: the cluster as ZooKeeper has it (brokers, controller, partition states);
``tidelog cluster elect-leaders``: preferred leader election; ``tidelog cluster reassign``: partition reassignment."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from typing import Any

import click

from tidelog.cli._client import fail, output_is_json, output_option
from tidelog.cli.local_cluster import up as local_cluster_up
from tidelog.cli.reassign import reassignment_options, run_reassignment
from tidelog.cluster import zkdata as zd


@click.group("cluster")
def cluster() -> None:
    """Inspect and administer a ZooKeeper-mode cluster."""


def _zk_start(zk: Any, zk_connect: str, timeout: float) -> Any:
    """Connect, or fail with one line when ZooKeeper does not answer in time (kazoo's own error is a timeout
    traceback)."""
    logging.getLogger("kazoo.client").setLevel(logging.CRITICAL)  # its retry warnings; the failure is one line
    try:
        zk.start(timeout=timeout)
    except Exception as exc:
        zk.close()
        fail(f"cannot reach ZooKeeper at {zk_connect} within {timeout:g}s ({type(exc).__name__})")
    return zk


def read_cluster(zk_connect: str, timeout: float = 10.0) -> dict:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = _zk_start(KazooClient(hosts=zk_connect, timeout=timeout, read_only=True), zk_connect, timeout)
    try:
        def get(path: str) -> bytes | None:
            try:
                return zk.get(path)[0]
            except NoNodeError:
                return None

        def children(path: str) -> list[str]:
            try:
                return zk.get_children(path)
            except NoNodeError:
                return []

        brokers = []
        for c in sorted(children(zd.BROKER_IDS), key=int):
            data = get(zd.broker_path(int(c)))
            if data is not None:
                b = zd.decode_broker(int(c), data)
                brokers.append({"id": b.id, "host": b.host, "port": b.port, "rack": b.rack})
        epoch = get(zd.CONTROLLER_EPOCH)
        topics = []
        for t in sorted(children(zd.BROKER_TOPICS)):
            data = get(zd.topic_path(t))
            if data is None:
                continue
            a = zd.decode_topic(data)
            parts = []
            for p, replicas in sorted(a.partitions.items()):
                raw = get(zd.state_path(t, p))
                s = zd.decode_state(raw, -1) if raw else None
                parts.append({"partition": p, "replicas": replicas,
                              "leader": s.leader if s else -1, "leader_epoch": s.leader_epoch if s else -1,
                              "isr": list(s.isr) if s else [], "controller_epoch": s.controller_epoch if s else -1})
            topics.append({"topic": t, "topic_id": zd.uuid_to_kafka(a.topic_id) if a.topic_id else None,
                           "partitions": parts})
        return {"controller": zd.decode_controller(get(zd.CONTROLLER)),
                "controller_epoch": int(epoch) if epoch else 0, "brokers": brokers, "topics": topics}
    finally:
        zk.stop()
        zk.close()


@cluster.command("describe")
@click.option("--zookeeper", "-z", "zk_connect", required=True, help="zookeeper.connect, e.g. 127.0.0.1:2181")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (as --output json)")
@output_option
def describe(zk_connect: str, as_json: bool) -> None:
    """Brokers, the controller and every partition's leader, epoch, replicas and ISR; partitions without a live
    leader are flagged OFFLINE, those with an ISR smaller than the replica set UNDER-REPLICATED."""
    try:
        info = read_cluster(zk_connect)
    except Exception as exc:
        click.echo(f"tidelog cluster describe: cannot read ZooKeeper at {zk_connect}: {exc}", err=True)
        sys.exit(1)
    live = {b["id"] for b in info["brokers"]}
    for t in info["topics"]:
        for p in t["partitions"]:  # kafka-topics --under-replicated-partitions / --unavailable-partitions
            p["under_replicated"] = len(p["isr"]) < len(p["replicas"])
            p["offline"] = p["leader"] not in live
    if as_json or output_is_json():
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(f"Controller: {info['controller']} (epoch {info['controller_epoch']})")
    for b in info["brokers"]:
        click.echo(f"Broker {b['id']}: {b['host']}:{b['port']}" + (f" rack={b['rack']}" if b["rack"] else ""))
    for t in info["topics"]:
        click.echo(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {len(t['partitions'])}")
        for p in t["partitions"]:
            offline = [r for r in p["replicas"] if r not in live]
            leader = p["leader"] if p["leader"] >= 0 else "none"
            click.echo(
                f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                f"LeaderEpoch: {p['leader_epoch']}\tReplicas: {','.join(map(str, p['replicas']))}\t"
                f"Isr: {','.join(map(str, p['isr']))}"
                + (f"\tOffline: {','.join(map(str, offline))}" if offline else "")
                + ("\tOFFLINE" if p["offline"] else "\tUNDER-REPLICATED" if p["under_replicated"] else "")
            )


@cluster.command("elect-leaders")
@click.option("--zookeeper", "-z", "zk_connect", required=True, help="zookeeper.connect, e.g. 127.0.0.1:2181")
@click.option("--topic", default=None, help="only this topic (default: every partition of every topic)")
@click.option("--partition", type=int, default=None, help="only this partition (needs --topic)")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="seconds to wait for the controller to finish")
def elect_leaders(zk_connect: str, topic: str | None, partition: int | None, timeout: float) -> None:
    """Preferred leader election: each partition's first assigned replica becomes leader when it is alive and in
    the ISR. Writes Kafka's ``/admin/preferred_replica_election`` and waits until the controller deletes it
    (``tidelog leader-election`` does it through the bootstrap server instead)."""
    import threading

    from kazoo.client import KazooClient
    from kazoo.exceptions import NodeExistsError, NoNodeError

    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    info = read_cluster(zk_connect)
    wanted = [(t["topic"], p["partition"]) for t in info["topics"] for p in t["partitions"]
              if (topic is None or t["topic"] == topic) and (partition is None or p["partition"] == partition)]
    if not wanted:
        click.echo(f"tidelog cluster elect-leaders: no such partition ({topic}/{partition})", err=True)
        sys.exit(1)
    zk = _zk_start(KazooClient(hosts=zk_connect, timeout=10.0), zk_connect, 10.0)
    try:
        try:
            zk.create(zd.PREFERRED_REPLICA_ELECTION, zd.encode_preferred_election(wanted), makepath=True)
        except NodeExistsError:
            click.echo("tidelog cluster elect-leaders: a preferred replica election is already in progress", err=True)
            sys.exit(1)
        done = threading.Event()

        def gone(data: bytes | None, _stat: object) -> bool | None:
            if data is None:
                done.set()
                return False
            return None

        with contextlib.suppress(NoNodeError):
            zk.DataWatch(zd.PREFERRED_REPLICA_ELECTION, gone)
        if not done.wait(timeout):
            click.echo(f"tidelog cluster elect-leaders: the controller did not finish within {timeout}s", err=True)
            sys.exit(1)
    finally:
        zk.stop()
        zk.close()
    after = {(t["topic"], p["partition"]): p for t in read_cluster(zk_connect)["topics"] for p in t["partitions"]}
    for tp in wanted:
        p = after.get(tp)
        if p is None:
            continue
        preferred = p["replicas"][0] if p["replicas"] else -1
        status = "preferred" if p["leader"] == preferred else "not preferred (preferred replica down or out of sync)"
        click.echo(f"Topic: {tp[0]}\tPartition: {tp[1]}\tLeader: {p['leader']}\tPreferred: {preferred}\t{status}")


# -- reassignment (kafka-reassign-partitions.sh) -----------------------------------------------------------------


@cluster.command("reassign")
@reassignment_options
def reassign(bootstrap: str, json_file: str | None, mode: str | None, timeout: float) -> None:
    """Partition reassignment as kafka-reassign-partitions.sh --execute/--verify/--cancel/--list does it
    (AlterPartitionReassignments / ListPartitionReassignments to the controller); ``tidelog reassign-partitions``
    is the same, with --generate."""
    if mode is None:
        raise click.UsageError("one of --execute, --verify, --cancel or --list is needed")
    run_reassignment(bootstrap, mode, json_file, timeout)


cluster.add_command(local_cluster_up)

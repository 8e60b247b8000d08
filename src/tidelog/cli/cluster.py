"""``tidelog cluster describe``: the cluster as ZooKeeper has it (brokers, controller, partition states);
``tidelog cluster elect-leaders``: preferred leader election; ``tidelog cluster reassign``: partition reassignment."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import uuid
from typing import Any

import click

from tidelog.cli._client import command_config_option, fail, peer_request
from tidelog.cluster import zkdata as zd
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code


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
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
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
    if as_json:
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
    the ISR. Writes Kafka's ``/admin/preferred_replica_election`` and waits until the controller deletes it."""
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

METADATA, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 3, 45, 46


async def _controller_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float) -> dict:
    """Send one request to the controller named in Metadata (again, up to a few times, on NOT_CONTROLLER)."""
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    last: Exception | None = None
    for _attempt in range(5):
        for hp in hosts:
            host, _, port = hp.rpartition(":")
            try:
                md = await peer_request(host.strip("[]"), int(port), METADATA, 12,
                                        {"topics": [], "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False}, timeout)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            nodes = {b["node_id"]: b for b in md["brokers"]}
            ctl = nodes.get(md["controller_id"])
            if ctl is None:
                last = RuntimeError("no controller in the cluster metadata")
                continue
            try:
                # a broker without the API (single-node mode) would close the connection: ask first, as Kafka's
                # admin client knows from ApiVersions
                versions = await peer_request(ctl["host"], ctl["port"], ApiKey.API_VERSIONS, 3,
                                              {"client_software_name": "tidelog-cli",
                                               "client_software_version": "1"}, timeout)
                if versions["error_code"] == 0 and api_key not in {k["api_key"] for k in versions["api_keys"]}:
                    fail(f"the controller {ctl['host']}:{ctl['port']} does not support {ApiKey(api_key).name} "
                         "(a single-node broker has no partition reassignment)")
                resp = await peer_request(ctl["host"], ctl["port"], api_key, version, body, timeout)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            if resp.get("error_code") == 41:  # NOT_CONTROLLER: the controller moved; ask again
                last = RuntimeError("NOT_CONTROLLER")
                continue
            return resp
    raise click.ClickException(f"cannot reach the controller through {bootstrap}: {last}")


async def _replicas_of(bootstrap: str, topics: list[str], timeout: float) -> dict[tuple[str, int], list[int]]:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    md = await peer_request(host.strip("[]"), int(port), METADATA, 12,
                            {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
                             "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
                            timeout)
    return {(t["name"], p["partition_index"]): list(p["replica_nodes"]) for t in md["topics"]
            for p in t["partitions"]}


def _read_reassignment_file(path: str) -> dict[tuple[str, int], list[int]]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        out: dict[tuple[str, int], list[int]] = {}
        for e in value["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            if tp in out:
                raise click.ClickException(f"partition {tp[0]}-{tp[1]} appears more than once in {path}")
            out[tp] = [int(b) for b in e.get("replicas") or []]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"cannot read the reassignment JSON {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if value.get("version", 1) != 1:
        raise click.ClickException(f"unsupported reassignment JSON version {value.get('version')}")
    return out


def _alter_body(parts: dict[tuple[str, int], list[int] | None], timeout: float) -> dict:
    topics: dict[str, list[dict]] = {}
    for (t, p), replicas in sorted(parts.items()):
        topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    return {"timeout_ms": int(timeout * 1000),
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def _alter_errors(resp: dict) -> list[str]:
    def error_name(code: int) -> str:
        return error_for_code(code).name

    if resp.get("error_code"):
        return [f"{error_name(resp['error_code'])}: {resp.get('error_message')}"]
    return [f"{t['name']}-{p['partition_index']}: {error_name(p['error_code'])}: {p['error_message']}"
            for t in resp["responses"] for p in t["partitions"] if p["error_code"]]


def _names(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


@cluster.command("reassign")
@click.option("--bootstrap-server", "-b", "bootstrap", envvar="TIDELOG_BOOTSTRAP", default="127.0.0.1:9092",
              show_default=True, help="Broker(s) to ask for the controller, host:port[,host:port...].")
@command_config_option
@click.option("--reassignment-json-file", "json_file", default=None,
              help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')
@click.option("--execute", "mode", flag_value="execute", help="start the reassignment in the JSON file")
@click.option("--verify", "mode", flag_value="verify", help="is the reassignment in the JSON file done? "
              "(exit status 1 while it is not)")
@click.option("--cancel", "mode", flag_value="cancel", help="cancel the reassignments of the JSON file's partitions")
@click.option("--list", "mode", flag_value="list", help="list every ongoing reassignment")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="seconds per request")
def reassign(bootstrap: str, json_file: str | None, mode: str | None, timeout: float) -> None:
    """Partition reassignment as kafka-reassign-partitions.sh --execute/--verify/--cancel/--list does it
    (AlterPartitionReassignments / ListPartitionReassignments to the controller)."""
    import asyncio

    if mode is None:
        raise click.UsageError("one of --execute, --verify, --cancel or --list is needed")
    if mode != "list" and json_file is None:
        raise click.UsageError(f"--{mode} needs --reassignment-json-file")
    wanted = _read_reassignment_file(json_file) if json_file else {}

    if mode == "list":
        resp = asyncio.run(_controller_request(bootstrap, LIST_REASSIGNMENTS, 0,
                                               {"timeout_ms": int(timeout * 1000), "topics": None}, timeout))
        parts = [(t["name"], p) for t in resp["topics"] for p in t["partitions"]]
        if not parts:
            click.echo("No partition reassignments found.")
            return
        click.echo("Current partition reassignments:")
        for name, p in sorted(parts, key=lambda x: (x[0], x[1]["partition_index"])):
            click.echo(f"{name}-{p['partition_index']}: replicas: {','.join(map(str, p['replicas']))}. "
                       f"adding: {','.join(map(str, p['adding_replicas']))}. "
                       f"removing: {','.join(map(str, p['removing_replicas']))}.")
        return
    if mode == "execute":
        current = asyncio.run(_replicas_of(bootstrap, sorted({t for t, _ in wanted}), timeout))
        click.echo("Current partition replica assignment\n")
        click.echo(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": current[(t, p)], "log_dirs": ["any"] * len(current[(t, p)])}
            for t, p in sorted(wanted) if (t, p) in current]}, separators=(",", ":")))
        click.echo("\nSave this to use as the --reassignment-json-file option during rollback")
        resp = asyncio.run(_controller_request(bootstrap, ALTER_REASSIGNMENTS, 0,
                                               _alter_body(dict(wanted.items()), timeout), timeout))
        errors = _alter_errors(resp)
        if errors:
            raise click.ClickException("Error reassigning partition(s):\n" + "\n".join(errors))
        click.echo(f"Successfully started partition reassignments for {_names(wanted)}")
        return
    if mode == "cancel":
        resp = asyncio.run(_controller_request(bootstrap, ALTER_REASSIGNMENTS, 0,
                                               _alter_body(dict.fromkeys(wanted), timeout), timeout))
        errors = _alter_errors(resp)
        if errors:
            raise click.ClickException("Error cancelling partition reassignment(s):\n" + "\n".join(errors))
        click.echo(f"Successfully cancelled partition reassignments for: {_names(wanted)}")
        return
    # verify
    topics = sorted({t for t, _ in wanted})
    resp = asyncio.run(_controller_request(bootstrap, LIST_REASSIGNMENTS, 0, {
        "timeout_ms": int(timeout * 1000),
        "topics": [{"name": t, "partition_indexes": sorted(p for tt, p in wanted if tt == t)} for t in topics]},
        timeout))
    ongoing = {(t["name"], p["partition_index"]) for t in resp["topics"] for p in t["partitions"]}
    current = asyncio.run(_replicas_of(bootstrap, topics, timeout))
    click.echo("Status of partition reassignment:")
    all_done = True
    for tp in sorted(wanted):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            all_done = False
            click.echo(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == wanted[tp]:
            click.echo(f"Reassignment of partition {name} is completed.")
        else:
            all_done = False
            click.echo(f"There is no active reassignment of partition {name}, but replica set is "
                       f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, wanted[tp]))}.")
    if not all_done:
        sys.exit(1)


def _register_up() -> None:
    from tidelog.cli.local_cluster import up

    cluster.add_command(up)


_register_up()

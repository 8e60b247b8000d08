"""``tidelog reassign-partitions`` (kafka-reassign-partitions.sh) and ``tidelog leader-election``
(kafka-leader-election.sh), through the bootstrap server.

Reassignment: AlterPartitionReassignments / ListPartitionReassignments sent to the controller named in Metadata
(``--generate`` proposes an assignment as Kafka's ``AdminUtils.assignReplicasToBrokers`` does, rack-unaware:
:func:`tidelog.cluster.zkdata.assign_replicas`, the code CreateTopics uses;
``--execute``, ``--verify``, ``--cancel``, ``--list``). Leader election: ElectLeaders (preferred or unclean),
sent by the admin client to the controller. ``tidelog cluster reassign`` is the same reassignment code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import sys
import uuid
from typing import Any

import click

from tidelog.cli._client import (
    bootstrap_option,
    broker_addresses,
    command_config_option,
    echo_json,
    fail,
    kafka_error_name,
    kafka_error_text,
    output_is_json,
    output_option,
    peer_request,
    repeated,
    safe_echo,
)
from tidelog.cli.topics import _admin, timeout_option
from tidelog.cluster.zkdata import assign_replicas
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

METADATA, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 3, 45, 46
TopicPartition = tuple[str, int]


async def controller_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float) -> dict:
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
                # a broker without the API would close the connection: ask first, as Kafka's admin client knows
                # from ApiVersions
                versions = await peer_request(ctl["host"], ctl["port"], ApiKey.API_VERSIONS, 3,
                                              {"client_software_name": "tidelog-cli",
                                               "client_software_version": "1"}, timeout)
                if versions["error_code"] == 0 and api_key not in {k["api_key"] for k in versions["api_keys"]}:
                    fail(f"the controller {ctl['host']}:{ctl['port']} does not support {ApiKey(api_key).name}")
                resp = await peer_request(ctl["host"], ctl["port"], api_key, version, body, timeout)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            if resp.get("error_code") == 41:  # NOT_CONTROLLER: the controller moved; ask again
                last = RuntimeError("NOT_CONTROLLER")
                continue
            return resp
    fail(f"cannot reach the controller through {bootstrap}: {last}")


async def replicas_of(bootstrap: str, topics: list[str], timeout: float) -> dict[TopicPartition, list[int]]:
    """The replica assignment of every partition of ``topics``; an unknown topic ends the command."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    md = await peer_request(host.strip("[]"), int(port), METADATA, 12,
                            {"topics": [{"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
                             "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
                            timeout)
    for t in md["topics"]:
        if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # UNKNOWN_TOPIC_OR_PARTITION
            fail(f"Topic {t['name']} not found.")
    return {(t["name"], p["partition_index"]): list(p["replica_nodes"]) for t in md["topics"]
            for p in t["partitions"]}


def _load_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        fail(f"cannot read the {what} {path}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(f"cannot read the {what} {path}: {exc}")


def read_reassignment_file(path: str) -> dict[TopicPartition, list[int]]:
    value = _load_json(path, "reassignment JSON")
    out: dict[TopicPartition, list[int]] = {}
    try:
        for e in value["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            if tp in out:
                fail(f"partition {tp[0]}-{tp[1]} appears more than once in {path}")
            out[tp] = [int(b) for b in e.get("replicas") or []]
    except (KeyError, TypeError, ValueError) as exc:
        fail(f"cannot read the reassignment JSON {path}: {type(exc).__name__}: {exc}")
    if value.get("version", 1) != 1:
        fail(f"unsupported reassignment JSON version {value.get('version')}")
    return out


def reassignment_json(parts: dict[TopicPartition, list[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson`` (sorted by topic and partition, log dirs "any")."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(parts.items())]}, separators=(",", ":"))


def _alter_body(parts: dict[TopicPartition, list[int] | None], timeout: float) -> dict:
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


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def generate(bootstrap: str, topics_file: str, broker_list: str, timeout: float,
             rnd: random.Random | None = None) -> dict[TopicPartition, list[int]]:
    """kafka-reassign-partitions.sh --generate: print the current and a proposed assignment of the topics."""
    value = _load_json(topics_file, "topics-to-move JSON")
    try:
        topics = [str(t["topic"]) for t in value["topics"]]
        brokers = [int(b) for b in broker_list.split(",") if b.strip()]
    except (KeyError, TypeError, ValueError) as exc:
        fail(f"cannot read the topics to move ({type(exc).__name__}: {exc})", 2)
    for what, items in (("Broker list", [str(b) for b in brokers]), ("List of topics to reassign", topics)):
        dups = repeated(items)
        if dups:
            fail(f"{what} contains duplicate entries: {','.join(dups)}")
    live = asyncio.run(broker_addresses(bootstrap, timeout))
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        fail(f"Unknown broker id(s): {','.join(map(str, unknown))}")
    current = asyncio.run(replicas_of(bootstrap, topics, timeout))
    rnd = rnd or random.Random()
    proposed: dict[TopicPartition, list[int]] = {}
    for t in topics:
        parts = sorted(p for tt, p in current if tt == t)
        rf = len(current[(t, parts[0])]) if parts else 0
        if rf > len(brokers):
            fail(f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
        for p, replicas in assign_replicas(brokers, len(parts), rf, rng=rnd).items():  # Kafka's, as CreateTopics
            proposed[(t, p)] = replicas
    safe_echo(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    safe_echo(f"Proposed partition reassignment configuration\n{reassignment_json(proposed)}")
    return proposed


def run_reassignment(bootstrap: str, mode: str, json_file: str | None, timeout: float) -> None:
    """``--execute``, ``--verify``, ``--cancel`` or ``--list`` as kafka-reassign-partitions.sh prints them."""
    if mode != "list" and json_file is None:
        fail(f"--{mode} needs --reassignment-json-file", 2)
    wanted = read_reassignment_file(json_file) if json_file else {}
    if mode == "list":
        resp = asyncio.run(controller_request(bootstrap, LIST_REASSIGNMENTS, 0,
                                              {"timeout_ms": int(timeout * 1000), "topics": None}, timeout))
        parts = [(t["name"], p) for t in resp["topics"] for p in t["partitions"]]
        if output_is_json():
            echo_json([{"topic": name, "partition": p["partition_index"], "replicas": p["replicas"],
                        "addingReplicas": p["adding_replicas"], "removingReplicas": p["removing_replicas"]}
                       for name, p in sorted(parts, key=lambda x: (x[0], x[1]["partition_index"]))])
            return
        if not parts:
            safe_echo("No partition reassignments found.")
            return
        safe_echo("Current partition reassignments:")
        for name, p in sorted(parts, key=lambda x: (x[0], x[1]["partition_index"])):
            adding = f" adding: {','.join(map(str, p['adding_replicas']))}." if p["adding_replicas"] else ""
            removing = f" removing: {','.join(map(str, p['removing_replicas']))}." if p["removing_replicas"] else ""
            safe_echo(f"{name}-{p['partition_index']}: replicas: {','.join(map(str, p['replicas']))}.{adding}{removing}")
        return
    if mode == "execute":
        current = asyncio.run(replicas_of(bootstrap, sorted({t for t, _ in wanted}), timeout))
        safe_echo("Current partition replica assignment\n")
        safe_echo(reassignment_json({tp: current[tp] for tp in wanted if tp in current}))
        safe_echo("\nSave this to use as the --reassignment-json-file option during rollback")
        resp = asyncio.run(controller_request(bootstrap, ALTER_REASSIGNMENTS, 0,
                                              _alter_body(dict(wanted.items()), timeout), timeout))
        errors = _alter_errors(resp)
        if errors:
            fail("Error reassigning partition(s):\n" + "\n".join(errors))
        safe_echo(f"Successfully started partition reassignment{_plural(len(wanted))} for {_names(wanted)}")
        return
    if mode == "cancel":
        resp = asyncio.run(controller_request(bootstrap, ALTER_REASSIGNMENTS, 0,
                                              _alter_body(dict.fromkeys(wanted), timeout), timeout))
        errors = _alter_errors(resp)
        if errors:
            fail(f"Error cancelling partition reassignment{_plural(len(errors))} for:\n" + "\n".join(errors))
        safe_echo(f"Successfully cancelled partition reassignment{_plural(len(wanted))} for: {_names(wanted)}")
        return
    verify(bootstrap, wanted, timeout)


def verify(bootstrap: str, wanted: dict[TopicPartition, list[int]], timeout: float) -> None:
    """Status of each partition of the plan; exit status 1 while any is not done as planned."""
    topics = sorted({t for t, _ in wanted})
    resp = asyncio.run(controller_request(bootstrap, LIST_REASSIGNMENTS, 0, {
        "timeout_ms": int(timeout * 1000),
        "topics": [{"name": t, "partition_indexes": sorted(p for tt, p in wanted if tt == t)} for t in topics]},
        timeout))
    ongoing = {(t["name"], p["partition_index"]) for t in resp["topics"] for p in t["partitions"]}
    current = asyncio.run(replicas_of(bootstrap, topics, timeout))
    as_json = output_is_json()
    if not as_json:
        safe_echo("Status of partition reassignment:")
    all_done = True
    statuses = []
    for tp in sorted(wanted):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            all_done = False
            status = "in progress"
            text = f"Reassignment of partition {name} is still in progress."
        elif current.get(tp) == wanted[tp]:
            status = "completed"
            text = f"Reassignment of partition {name} is completed."
        else:
            all_done = False
            status = "mismatch"
            text = (f"There is no active reassignment of partition {name}, but replica set is "
                    f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, wanted[tp]))}.")
        statuses.append({"topic": tp[0], "partition": tp[1], "status": status, "replicas": current.get(tp, []),
                         "targetReplicas": wanted[tp]})
        if not as_json:
            safe_echo(text)
    if as_json:
        echo_json(statuses)
    if not all_done:
        sys.exit(1)


def reassignment_options(fn: Any) -> Any:
    """The options ``tidelog reassign-partitions`` and ``tidelog cluster reassign`` share."""
    fn = click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds per request.")(fn)
    fn = click.option("--list", "mode", flag_value="list", help="List every ongoing reassignment.")(fn)
    fn = click.option("--cancel", "mode", flag_value="cancel",
                      help="Cancel the reassignments of the JSON file's partitions.")(fn)
    fn = click.option("--verify", "mode", flag_value="verify",
                      help="Is the reassignment in the JSON file done? (exit status 1 while it is not)")(fn)
    fn = click.option("--execute", "mode", flag_value="execute", help="Start the reassignment in the JSON file.")(fn)
    fn = click.option("--reassignment-json-file", "json_file", default=None,
                      help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')(fn)
    fn = output_option(fn)
    fn = command_config_option(fn)
    fn = click.option("--bootstrap-server", "-b", "bootstrap", envvar="TIDELOG_BOOTSTRAP", default="127.0.0.1:9092",
                      show_default=True, help="Broker(s) to ask for the controller, host:port[,host:port...].")(fn)
    return fn


@click.command("reassign-partitions")
@reassignment_options
@click.option("--generate", "mode", flag_value="generate",
              help="Propose an assignment of --topics-to-move-json-file's topics over --broker-list.")
@click.option("--topics-to-move-json-file", default=None, help='{"topics": [{"topic": "foo"}], "version": 1}')
@click.option("--broker-list", default=None, metavar="ID[,ID...]", help="Brokers to spread the replicas over.")
def reassign_partitions(bootstrap: str, json_file: str | None, mode: str | None, timeout: float,
                        topics_to_move_json_file: str | None, broker_list: str | None) -> None:
    """Move partition replicas between brokers (kafka-reassign-partitions.sh): --generate a plan, --execute it,
    --verify it, --cancel it, --list what is moving."""
    if mode is None:
        fail("one of --generate, --execute, --verify, --cancel or --list is needed", 2)
    if mode == "generate":
        if topics_to_move_json_file is None or broker_list is None:
            fail("--generate needs --topics-to-move-json-file and --broker-list", 2)
        generate(bootstrap, topics_to_move_json_file, broker_list, timeout)
        return
    run_reassignment(bootstrap, mode, json_file, timeout)


def _election_partitions(topic: str | None, partition: int | None, all_partitions: bool,
                         json_file: str | None) -> list[TopicPartition] | None:
    if sum((topic is not None, all_partitions, json_file is not None)) != 1:
        fail("give exactly one of --topic/--partition, --all-topic-partitions or --path-to-json-file", 2)
    if (topic is None) != (partition is None):
        fail("--topic and --partition go together", 2)
    if all_partitions:
        return None
    if json_file is None:
        return [(str(topic), int(partition or 0))]
    value = _load_json(json_file, "election JSON")
    try:
        parts = [(str(e["topic"]), int(e["partition"])) for e in value["partitions"]]
    except (KeyError, TypeError, ValueError) as exc:
        fail(f"{json_file}: Replica election data is missing or malformed ({type(exc).__name__}: {exc})")
    if not parts:
        fail("Replica election data is empty")
    dups = repeated(f"{t}-{p}" for t, p in parts)
    if dups:
        fail(f"Replica election data contains duplicate partitions: {','.join(dups)}")
    return parts


@click.command("leader-election")
@click.option("--election-type", required=True, type=click.Choice(["preferred", "unclean"], case_sensitive=False),
              help="preferred: the first assigned replica leads (when in sync); unclean: a partition without a "
              "leader elects a live replica even outside the ISR.")
@click.option("--topic", default=None, help="The topic (with --partition).")
@click.option("--partition", type=int, default=None, help="The partition (with --topic).")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of every topic.")
@click.option("--path-to-json-file", type=click.Path(dir_okay=False), default=None,
              help='{"partitions": [{"topic": "foo", "partition": 1}]}')
@bootstrap_option
@timeout_option
def leader_election(election_type: str, topic: str | None, partition: int | None, all_topic_partitions: bool,
                    path_to_json_file: str | None, bootstrap: str, properties: tuple[str, ...],
                    timeout: float) -> None:
    """Elect partition leaders (kafka-leader-election.sh) through ElectLeaders to the controller."""
    from confluent_kafka import ElectionType, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    parts = _election_partitions(topic, partition, all_topic_partitions, path_to_json_file)
    kind = ElectionType.PREFERRED if election_type.lower() == "preferred" else ElectionType.UNCLEAN
    label = kind.name
    admin = _admin(bootstrap, properties)
    try:
        # no request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders fails with any keyword argument
        future = admin.elect_leaders(kind, None if parts is None else [KafkaTopicPartition(t, p) for t, p in parts])
        results = future.result(timeout)
    except concurrent.futures.TimeoutError:
        fail(f"leader election ({label}): no answer within {timeout:g}s")
    except KafkaException as exc:
        if kafka_error_name(exc) == "_UNSUPPORTED_FEATURE":
            fail(f"leader election ({label}) failed: the brokers do not support ElectLeaders "
                 "(a single-node tidelog broker has no controller to elect leaders)")
        fail(f"leader election ({label}) failed: {kafka_error_text(exc)}")
    done, noop, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(error, KafkaError):  # confluent-kafka hands a partition's error as a bare KafkaError
            error = KafkaException(error)
        if error is None:
            done.append(name)
        elif kafka_error_name(error) == "ELECTION_NOT_NEEDED":
            noop.append(name)
        else:
            failed.append((name, kafka_error_text(error)))
    if done:
        safe_echo(f"Successfully completed leader election ({label}) for partitions {', '.join(done)}")
    if noop:
        safe_echo(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, text in failed:
        safe_echo(f"Error completing leader election ({label}) for partition: {name}: {text}")
    if failed:
        fail(f"{len(failed)} replica(s) could not be elected")

"""ZooKeeper layout, paths and JSON values exactly as Kafka's ZooKeeper mode writes them (``kafka.zk.ZkData``).

=========================================== ==============================================================
znode                                        value
=========================================== ==============================================================
``/brokers/ids/<id>`` (ephemeral)            ``{"features":{},"listener_security_protocol_map":{...},
                                             "endpoints":["PLAINTEXT://h:p"],"jmx_port":-1,"port":p,
                                             "host":"h","version":5,"timestamp":"<ms>"}`` (+ ``rack``)
``/cluster/id``                              ``{"version":"1","id":"<base64 uuid>"}`` (``ClusterIdZNode``)
``/controller`` (ephemeral)                  ``{"version":1,"brokerid":N,"timestamp":"<ms>"}``
``/controller_epoch``                        ``N`` (decimal text)
``/brokers/topics/<t>``                      ``{"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},
                                             "removing_replicas":{},"topic_id":"<base64 uuid>"}``
``/brokers/topics/<t>/partitions/<p>/state`` ``{"controller_epoch":C,"leader":L,"version":1,
                                             "leader_epoch":E,"isr":[...]}``
``/config/topics/<t>``                       ``{"version":1,"config":{...}}`` (the topic's overrides)
``/config/changes/config_change_<seq>``      ``{"version":2,"entity_path":"topics/<t>"}``
(persistent sequential)                      (``ConfigEntityChangeNotificationSequenceZNode``): ``<t>``'s
                                             config znode changed; every broker applies it, and any broker
                                             deletes notifications older than 15 minutes
``/admin/preferred_replica_election``        ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``
                                             (Kafka's ``PreferredReplicaElectionZNode``; the controller
                                             deletes it when done)
``/admin/controlled_shutdown/<id>``          tidelog only (ephemeral): broker ``<id>`` asks the controller
(ephemeral)                                  to move its leaderships and drop it from every ISR; the value
                                             is ``{"version":1,"broker":<id>,"attempt":N}``
``/log_dir_event_notification/``            ``{"version":1,"broker":<id>,"event":1}`` (Kafka's
``log_dir_event_<seq>`` (persistent          ``LogDirEventNotificationSequenceZNode``): a log directory of
sequential)                                  broker ``<id>`` failed; the controller handles and deletes it
``/tidelog/offline_replicas/<id>``           tidelog only (ephemeral): ``{"version":1,"partitions":[{"topic":
(ephemeral)                                  "t","partition":0}]}``, the replicas of ``<id>`` in its failed
                                             log directories (Kafka's controller asks the broker with a
                                             LeaderAndIsr instead); gone with the broker's session
``/admin/reassign_partitions``               ``{"version":1,"partitions":[{"topic":"t","partition":0,
                                             "replicas":[1,2]}]}`` (``ReassignPartitionsZNode``); the
                                             controller drops each partition from it when its reassignment
                                             completes, and deletes it when empty
``/admin/delete_topics/<t>``                 empty: topic ``<t>`` is queued for deletion (the controller deletes
                                             it with the topic's znodes)
=========================================== ==============================================================
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

BROKER_IDS = "/brokers/ids"
CLUSTER_ID = "/cluster/id"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
DELETE_TOPICS = "/admin/delete_topics"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent
OFFLINE_REPLICAS = "/tidelog/offline_replicas"
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, CONFIG_CHANGES, DELETE_TOPICS,
                    "/isr_change_notification", CONTROLLED_SHUTDOWN, LOG_DIR_EVENT_NOTIFICATION, OFFLINE_REPLICAS)

NO_LEADER = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def config_change_path(name: str = "") -> str:
    """``/config/changes/config_change_`` (the prefix to create a sequential znode with), or a notification's
    path given its child name."""
    return f"{CONFIG_CHANGES}/{name or CONFIG_CHANGE_PREFIX}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _now_ms_text() -> str:
    return str(time.time_ns() // 1_000_000)


def _dumps(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def uuid_to_kafka(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def uuid_from_kafka(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- broker registration -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker: ``host``/``port`` is its PLAINTEXT (inter-broker) endpoint; ``endpoints`` every
    listener's advertised (host, port) by listener name, ``protocols`` their security protocols."""

    id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict, compare=False)
    protocols: dict[str, str] = field(default_factory=dict, compare=False)

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """The (host, port) of ``listener`` (a client is answered with the endpoints of the listener it came in
        on, as Kafka does), else the inter-broker one."""
        if listener and listener in self.endpoints:
            return self.endpoints[listener]
        return self.host, self.port


def encode_broker(info: BrokerInfo) -> bytes:
    """``BrokerIdZNode.encode`` version 5."""
    endpoints = info.endpoints or {"PLAINTEXT": (info.host, info.port)}
    value: dict = {
        "features": {},
        "listener_security_protocol_map": info.protocols or {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": [f"{name}://{h}:{p}" for name, (h, p) in endpoints.items()],
        "jmx_port": -1,
        "port": info.port,
        "host": info.host,
        "version": 5,
        "timestamp": _now_ms_text(),
    }
    if info.rack is not None:
        value["rack"] = info.rack
    return _dumps(value)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    value = json.loads(data)
    host, port = value.get("host"), value.get("port", -1)
    protocols = {str(k): str(v) for k, v in (value.get("listener_security_protocol_map") or {}).items()}
    endpoints: dict[str, tuple[str, int]] = {}
    for ep in value.get("endpoints") or ():
        name, _, hostport = ep.partition("://")
        h, _, p = hostport.rpartition(":")
        endpoints[name] = (h.strip("[]"), int(p))
    # the inter-broker endpoint: the listener named PLAINTEXT, else the first whose protocol is PLAINTEXT
    plain = [n for n in endpoints if n == "PLAINTEXT"] + [n for n in endpoints if protocols.get(n) == "PLAINTEXT"]
    if plain:
        host, port = endpoints[plain[0]]
    return BrokerInfo(broker_id, str(host), int(port), value.get("rack"), endpoints, protocols)


def encode_cluster_id(cluster_id: str) -> bytes:
    """``ClusterIdZNode.toJson`` (the version is a JSON string there)."""
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(json.loads(data)["id"])


# -- controller ----------------------------------------------------------------------------------------------------


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes | None) -> int:
    """The broker id of a log dir event notification (-1 when unreadable)."""
    try:
        return int(json.loads(data or b"{}").get("broker", -1))
    except (ValueError, TypeError, AttributeError):
        return -1


def offline_replicas_path(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def encode_offline_replicas(tps: list[tuple[str, int]]) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in sorted(tps)]})


def decode_offline_replicas(data: bytes | None) -> set[tuple[str, int]]:
    try:
        return {(str(e["topic"]), int(e["partition"])) for e in json.loads(data or b"{}").get("partitions", [])}
    except (ValueError, TypeError, KeyError, AttributeError):
        return set()


def encode_controller(broker_id: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": _now_ms_text()})


def decode_controller(data: bytes | None) -> int:
    if not data:
        return -1
    try:
        return int(json.loads(data)["brokerid"])
    except (ValueError, KeyError, TypeError):
        return -1


# -- topics ----------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class TopicAssignment:
    """``partitions`` holds each partition's full replica set RS; during a reassignment (KIP-455) RS is the
    target plus the original replicas, ``adding`` the replicas not in the original set (AR) and ``removing``
    those not in the target (RR)."""

    partitions: dict[int, list[int]]
    topic_id: bytes | None = None
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def reassigning(self, p: int) -> bool:
        return bool(self.adding.get(p) or self.removing.get(p))

    def origin(self, p: int) -> list[int]:
        """The replicas before the reassignment (``ReplicaAssignment.originReplicas``)."""
        adding = set(self.adding.get(p, ()))
        return [b for b in self.partitions.get(p, ()) if b not in adding]

    def target(self, p: int) -> list[int]:
        """The replicas after it (``ReplicaAssignment.targetReplicas``)."""
        removing = set(self.removing.get(p, ()))
        return [b for b in self.partitions.get(p, ()) if b not in removing]

    def reassign_to(self, p: int, target: list[int]) -> None:
        """Kafka's ``ReplicaAssignment.reassignTo``: RS = target + origin (distinct, in that order), AR = RS -
        origin, RR = RS - target. A target equal to the origin (a cancellation) leaves no reassignment."""
        origin = self.origin(p)
        full = list(dict.fromkeys([*target, *origin]))
        self.partitions[p] = full
        adding = [b for b in full if b not in origin]
        removing = [b for b in full if b not in target]
        for d, v in ((self.adding, adding), (self.removing, removing)):
            if v:
                d[p] = v
            else:
                d.pop(p, None)

    def complete(self, p: int) -> None:
        """RS = target, AR = RR = [] (the end of a reassignment)."""
        self.partitions[p] = self.target(p)
        self.adding.pop(p, None)
        self.removing.pop(p, None)


def encode_topic(a: TopicAssignment) -> bytes:
    """``TopicZNode.encode`` (version 3)."""
    value: dict = {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in sorted(a.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(a.adding.items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted(a.removing.items())},
    }
    if a.topic_id is not None:
        value["topic_id"] = uuid_to_kafka(a.topic_id)
    return _dumps(value)


def decode_topic(data: bytes) -> TopicAssignment:
    value = json.loads(data)
    tid = value.get("topic_id")
    return TopicAssignment(
        {int(p): [int(b) for b in r] for p, r in (value.get("partitions") or {}).items()},
        uuid_from_kafka(tid) if tid else None,
        {int(p): [int(b) for b in r] for p, r in (value.get("adding_replicas") or {}).items()},
        {int(p): [int(b) for b in r] for p, r in (value.get("removing_replicas") or {}).items()},
    )


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {str(k): str(v) for k, v in (json.loads(data).get("config") or {}).items()}


_SANITIZER_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a config entity name (user, client id) as its znode name, URL-encoded as
    UTF-8 (letters, digits, ``.``, ``_``, ``-`` as they are; everything else ``%XX``, ``*`` and space included)."""
    return "".join(chr(b) if b in _SANITIZER_SAFE else f"%{b:02X}" for b in name.encode("utf-8"))


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder.decode``)."""
    return urllib.parse.unquote_plus(name)


def topic_entity_path(topic: str) -> str:
    """The ``entity_path`` of a topic's config change: ``topics/<t>`` (Kafka sanitizes the entity name by URL
    encoding; a legal topic name, ``[a-zA-Z0-9._-]``, is its own encoding)."""
    return f"topics/{topic}"


def encode_config_change(entity_path: str) -> bytes:
    """``ConfigEntityChangeNotificationSequenceZNode.encode``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str | None:
    """The topic a config change notification names, or None (another entity type, or unreadable). Version 1,
    ``{"version":1,"entity_type":"topics","entity_name":"<t>"}``, is read too, as Kafka's listener does."""
    try:
        value = json.loads(data)
        if value.get("version") == 1:
            entity_type, name = value.get("entity_type"), value.get("entity_name")
        else:
            entity_type, _, name = str(value.get("entity_path") or "").partition("/")
    except (ValueError, AttributeError, TypeError):
        return None
    return name if entity_type == "topics" and name else None


def config_change_sequence(name: str) -> int | None:
    """The sequence number of the notification child ``config_change_<10 digits>``, None for other children."""
    digits = name[len(CONFIG_CHANGE_PREFIX):]
    return int(digits) if name.startswith(CONFIG_CHANGE_PREFIX) and digits.isdigit() else None


def new_config_changes(zk: Any, children: Iterable[str], after: int) -> tuple[int, list[str]]:
    """Blocking (reads each notification): the ``entity_path`` of every notification among ``children`` newer than
    sequence ``after``, in order, and the newest sequence seen (``after`` when none is newer). A notification
    purged meanwhile or not JSON is skipped."""
    from kazoo.exceptions import NoNodeError

    paths: list[str] = []
    for name in sorted(children):
        seq = config_change_sequence(name)
        if seq is None or seq <= after:
            continue
        after = seq
        try:
            data, _ = zk.get(config_change_path(name))
            paths.append(str(json.loads(data).get("entity_path") or ""))
        except (NoNodeError, ValueError, AttributeError):
            continue
    return after, paths


# -- admin requests ------------------------------------------------------------------------------------------------


def encode_preferred_election(partitions: list[tuple[str, int]]) -> bytes:
    """``PreferredReplicaElectionZNode.encode``."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_preferred_election(data: bytes | None) -> list[tuple[str, int]]:
    if not data:
        return []
    return [(str(e["topic"]), int(e["partition"])) for e in (json.loads(data).get("partitions") or ())]


def encode_reassignment(partitions: dict[tuple[str, int], list[int]]) -> bytes:
    """``ReassignPartitionsZNode.encode``."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                 for (t, p), r in sorted(partitions.items())]})


def decode_reassignment(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    """``ReassignPartitionsZNode.decode``; raises ValueError on a malformed value."""
    if not data:
        return {}
    try:
        value = json.loads(data)
        return {(str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
                for e in (value.get("partitions") or ())}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed reassignment: {exc!r}") from None


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def encode_controlled_shutdown(broker_id: int, attempt: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "attempt": attempt})


# -- partition state -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1  # the znode's version when read: the token of the next conditional write

    def with_zk_version(self, version: int) -> LeaderIsr:
        return LeaderIsr(self.leader, self.leader_epoch, self.isr, self.controller_epoch, version)


def encode_state(s: LeaderIsr) -> bytes:
    """``TopicPartitionStateZNode.encode`` (version 1; leader_recovery_state is not used)."""
    return _dumps(
        {
            "controller_epoch": s.controller_epoch,
            "leader": s.leader,
            "version": 1,
            "leader_epoch": s.leader_epoch,
            "isr": list(s.isr),
        }
    )


def decode_state(data: bytes, zk_version: int) -> LeaderIsr:
    value = json.loads(data)
    return LeaderIsr(
        int(value["leader"]),
        int(value["leader_epoch"]),
        tuple(int(b) for b in value["isr"]),
        int(value["controller_epoch"]),
        zk_version,
    )


# -- replica assignment (AdminUtils.assignReplicasToBrokers, rack unaware) ------------------------------------------


def assign_replicas(
    brokers: list[int], num_partitions: int, replication_factor: int, *, start_index: int = -1,
    start_partition: int = 0, next_shift: int = -1, rng=None,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: the first replica of partition p goes round robin from a random start
    broker; the other replicas follow at an increasing shift, so leaders and followers spread evenly."""
    import random

    rng = rng or random
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} larger than available brokers {n}")
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = next_shift if next_shift >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    current = start_partition
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[_replica_index(first, shift, j, n)])
        out[current] = replicas
        current += 1
    return out


def _replica_index(first: int, second_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_shift + replica_index) % (n - 1)
    return (first + shift) % n


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    """The ``config`` of a config entity's znode (``{"version":1,"config":{..}}``); {} for none or unreadable."""
    if not data:
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    config = value.get("config") if isinstance(value, dict) else None
    return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}


def write_entity_config(zk: Any, path: str, config: dict[str, str], entity_path: str,
                        delete_when_empty: bool = False) -> None:
    """Blocking: a config entity's znode replaced by ``config`` (removed when empty and ``delete_when_empty``) and
    a ``/config/changes`` notification naming ``entity_path``, in one transaction, retried while another writer
    raced it (``AdminZkClient.changeEntityConfig``)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    encoded = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
    while True:
        try:
            _, stat = zk.get(path)
            version = stat.version
        except NoNodeError:
            version = -1
        if version < 0 and not config and delete_when_empty:
            return
        t = zk.transaction()
        if version < 0:
            t.create(path, encoded)
        elif config or not delete_when_empty:
            t.set_data(path, encoded, version=version)
        else:
            t.delete(path, version=version)
        t.create(config_change_path(), encode_config_change(entity_path), sequence=True)
        results = t.commit()
        if not any(isinstance(r, Exception) for r in results):
            return
        if not any(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError)) for r in results):
            raise next(r for r in results if isinstance(r, Exception))

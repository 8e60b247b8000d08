"""The console's one way to a cluster: the Kafka protocol, as the CLI speaks it.

confluent-kafka (librdkafka) for what its AdminClient, Consumer and Producer offer; tidelog's own protocol client
(:class:`tidelog.cluster.peer.Peer`, as ``tidelog acls | transactions | log-dirs`` use it) for the APIs librdkafka
lacks (DescribeLogDirs, ApiVersions' features, ListTransactions, the ACL APIs). Every call carries the credentials
of the ``--command-config`` file (SASL/TLS, read by the same functions as the CLI's), so the broker's authorizer
decides and a refusal comes back as a :class:`ConsoleError` with Kafka's error name.

Every method blocks: the web layer runs them in worker threads, never on its event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from tidelog.broker.security.acls import AclOperation, PatternType, PermissionType, ResourceType, parse_enum
from tidelog.cli._client import kafka_error_name, kafka_error_text
from tidelog.cli._tables import group_state_name
from tidelog.cli.group_kip848 import (
    CONSUMER_GROUP_DESCRIBE_VERSION,
    LIST_GROUPS_VERSION,
    as_console,
    describe_request,
    find_coordinator_request,
    list_groups_request,
    listed_groups,
    parse_described,
)
from tidelog.cli.group_offsets import ResetSpec, target
from tidelog.cli.topics import _leader_metrics_urls
from tidelog.client import admin_ops
from tidelog.client.security import ClientSecurity, SaslClientError, client_security, librdkafka_config
from tidelog.cluster.peer import Peer
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 3, 10, 18, 29, 30, 31
LIST_GROUPS, CONSUMER_GROUP_DESCRIBE = 16, 69
DESCRIBE_LOG_DIRS = ApiKey.DESCRIBE_LOG_DIRS
T = TypeVar("T")
MIN_ISR_TTL = 60.0  # seconds a topic's min.insync.replicas is kept for the Overview's count

_AUTH_ERRORS = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "SASL_AUTHENTICATION_FAILED",
                "DELEGATION_TOKEN_AUTHORIZATION_FAILED", "_AUTHENTICATION", "SECURITY_DISABLED"}


class ConsoleError(Exception):
    """A refusal or failure to show on the page: Kafka's error name and text; ``status`` the HTTP status."""

    def __init__(self, text: str, status: int = 400) -> None:
        super().__init__(text)
        self.text = text
        self.status = status


def from_kafka(exc: BaseException, what: str) -> ConsoleError:
    name = kafka_error_name(exc) or ""
    status = 403 if name in _AUTH_ERRORS or "AUTHORIZATION" in name else 400
    return ConsoleError(f"{what}: {kafka_error_text(exc)}", status)


def from_code(code: int, message: str | None, what: str) -> ConsoleError:
    err = error_for_code(code)
    status = 403 if "AUTHORIZATION" in err.name else 400
    return ConsoleError(f"{what}: {err.name}: {message or err.message}", status)


def _source_name(source: Any) -> str:
    """Kafka's config source name (DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG...)."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def _ms_now() -> int:
    return int(time.time() * 1000)


class Cluster:
    """A cluster reached at ``bootstrap`` with the Kafka client properties ``props`` (``--command-config``)."""

    def __init__(self, bootstrap: str, props: Mapping[str, str] | None = None, timeout: float = 15.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        props = dict(props or {})
        self.rdkafka: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": "tidelog-console",
                                        "socket.connection.setup.timeout.ms": 10000,
                                        "logger": logging.getLogger("tidelog.console.librdkafka"),
                                        **librdkafka_config(props)}
        self.security: ClientSecurity | None = client_security(props) if props else None
        self.principal = f"User:{props['sasl.username']}" if props.get("sasl.username") else (
            f"User:{self.security.username}" if self.security is not None and self.security.username else
            "(the listener's principal)")
        self._admin: Any = None
        self._producer: Any = None
        self._lock = threading.Lock()
        self._min_isr_at: dict[str, tuple[float, int]] = {}  # topic -> (when described, min.insync.replicas)
        self.min_isr_ttl = MIN_ISR_TTL  # 0: described on every Overview

    # -- clients --------------------------------------------------------------------------------------------

    def admin(self) -> Any:
        with self._lock:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(dict(self.rdkafka))
            return self._admin

    def producer(self) -> Any:
        with self._lock:
            if self._producer is None:
                from confluent_kafka import Producer

                self._producer = Producer({**self.rdkafka, "acks": "all", "linger.ms": 0})
            return self._producer

    def consumer(self, **extra: Any) -> Any:
        from confluent_kafka import Consumer

        conf = {**self.rdkafka, "group.id": "tidelog-console", "enable.auto.commit": False,
                "enable.partition.eof": True, "auto.offset.reset": "earliest", **extra}
        return Consumer(conf)

    async def call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict:
        """:class:`tidelog.client.admin_ops.Transport`: one request with the console's credentials."""
        peer = Peer(host, port, "tidelog-console", self.security)
        try:
            return await peer.request(api_key, version, body, self.timeout)
        except SaslClientError as exc:
            raise ConsoleError(f"{host}:{port}: {exc}", 403) from None
        except (OSError, TimeoutError, EOFError) as exc:
            raise ConsoleError(f"{host}:{port}: {type(exc).__name__}: {exc}", 502) from None
        finally:
            peer.close()

    async def any_broker_async(self, api_key: int, version: int, body: dict) -> dict:
        last: ConsoleError | None = None
        for hp in self.bootstrap.split(","):
            if not hp.strip():
                continue
            host, _, port = hp.strip().split("://")[-1].rpartition(":")
            try:
                return await self.call(host.strip("[]"), int(port), api_key, version, body)
            except ConsoleError as exc:
                if exc.status == 403:
                    raise
                last = exc
        raise last or ConsoleError(f"no broker in {self.bootstrap!r}", 502)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run admin requests (a coroutine over this cluster as the transport) from a worker thread; a broker's
        refusal becomes a :class:`ConsoleError` with Kafka's error name."""
        try:
            return asyncio.run(coro)
        except admin_ops.AdminError as exc:
            raise ConsoleError(str(exc), 403 if "AUTHORIZATION" in exc.name else 400) from None

    def peer_call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict:
        return self.run(self.call(host, port, api_key, version, body))

    def any_broker(self, api_key: int, version: int, body: dict) -> dict:
        return self.run(self.any_broker_async(api_key, version, body))

    @property
    def transport(self) -> admin_ops.Transport:
        return _Transport(self)

    def brokers(self) -> dict[int, tuple[str, int]]:
        md = self.any_broker(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
        return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}

    def _result(self, fut: Any, what: str) -> Any:
        try:
            return fut.result(self.timeout)
        except Exception as exc:
            raise from_kafka(exc, what) from None

    def metadata(self, topic: str | None = None) -> Any:
        """The cluster's metadata, always of all topics: librdkafka's Metadata request for one named topic lets
        the broker auto-create it (auto.create.topics.enable), which a look must never do."""
        try:
            return self.admin().list_topics(timeout=self.timeout)
        except Exception as exc:
            raise from_kafka(exc, "metadata") from None

    # -- overview ---------------------------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        desc = self._result(self.admin().describe_cluster(request_timeout=self.timeout), "DescribeCluster")
        md = self.metadata()
        controller = desc.controller.id if desc.controller is not None else None
        brokers = {n.id: {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack,
                          "controller": n.id == controller, "log_dirs": []} for n in desc.nodes}
        topics = {name: t for name, t in md.topics.items() if not name.startswith("__")}
        min_isr = self._min_isr(list(topics))
        total = under = offline = below_min = 0
        for name, t in topics.items():
            for p in t.partitions.values():
                total += 1
                under += len(p.isrs) < len(p.replicas)
                offline += p.leader < 0
                below_min += len(p.isrs) < min_isr.get(name, 1)
        for node, (host, port) in sorted(self.brokers().items()):
            try:
                resp = self.peer_call(host, port, DESCRIBE_LOG_DIRS, 4, {"topics": None})
            except ConsoleError as exc:
                brokers.setdefault(node, {"id": node, "host": host, "port": port, "rack": None,
                                          "controller": False, "log_dirs": []})["error"] = exc.text
                continue
            for d in resp.get("results", []):
                size = sum(p["partition_size"] for t in d["topics"] for p in t["partitions"])
                brokers.setdefault(node, {"id": node, "log_dirs": []})["log_dirs"].append({
                    "path": d["log_dir"], "size": size, "offline": d["error_code"] != 0,
                    "error": error_for_code(d["error_code"]).name if d["error_code"] else None,
                    "total_bytes": d.get("total_bytes", -1), "usable_bytes": d.get("usable_bytes", -1)})
        versions = self.any_broker(API_VERSIONS, 3, {"client_software_name": "tidelog-console",
                                                      "client_software_version": "1"})
        return {
            "cluster_id": desc.cluster_id, "controller": controller, "brokers": sorted(brokers.values(),
                                                                                      key=lambda b: b["id"]),
            "partitions": total, "under_replicated": under, "offline": offline, "under_min_isr": below_min,
            "topics": len(topics), "principal": self.principal,
            "api_versions": len(versions.get("api_keys") or []),
            "finalized_features": [{"name": f["name"], "min": f["min_version_level"], "max": f["max_version_level"]}
                                   for f in versions.get("finalized_features") or []],
        }

    def _min_isr(self, names: list[str]) -> dict[str, int]:
        """Each topic's ``min.insync.replicas`` (DescribeConfigs), kept per topic for ``min_isr_ttl`` s: the
        Overview's slowest request over 1,000 partitions, and a value that rarely changes. The console's own
        changes of a topic (create, delete, config) drop its entry; others' changes show within the TTL."""
        from confluent_kafka.admin import ConfigResource
        from confluent_kafka.admin import ResourceType as RT

        now = time.monotonic()
        with self._lock:
            stale = [n for n in names
                     if n not in self._min_isr_at or now - self._min_isr_at[n][0] >= self.min_isr_ttl]
        if stale:
            resources = [ConfigResource(RT.TOPIC, n) for n in stale]
            for res, fut in self.admin().describe_configs(resources, request_timeout=self.timeout).items():
                try:
                    entry = fut.result(self.timeout).get("min.insync.replicas")
                except Exception:  # not allowed to describe this topic's configs: no count for it
                    continue
                with self._lock:
                    self._min_isr_at[res.name] = (now, int(entry.value) if entry is not None and entry.value else 1)
        with self._lock:
            if len(self._min_isr_at) > 2 * max(len(names), 1000):  # deleted topics' entries
                live = set(names)
                self._min_isr_at = {n: v for n, v in self._min_isr_at.items() if n in live}
            return {n: self._min_isr_at[n][1] for n in names if n in self._min_isr_at}

    def forget_topic(self, name: str) -> None:
        with self._lock:
            self._min_isr_at.pop(name, None)

    # -- topics -----------------------------------------------------------------------------------------------

    def watermarks(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (log start, high watermark), two batched ListOffsets through the admin client."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}
        out: dict[tuple[str, int], list[int]] = {tp: [-1, -1] for tp in tps}
        for i, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
            futs = self.admin().list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                             request_timeout=self.timeout)
            for tp, fut in futs.items():
                try:
                    out[(tp.topic, tp.partition)][i] = fut.result(self.timeout).offset
                except Exception:
                    continue
        return {k: (v[0], v[1]) for k, v in out.items()}

    def topics(self, include_internal: bool = False) -> list[dict[str, Any]]:
        md = self.metadata()
        names = sorted(n for n in md.topics if include_internal or not n.startswith("__"))
        tps = [(n, p) for n in names for p in md.topics[n].partitions]
        marks = self.watermarks(tps)
        sizes = self._sizes()
        out = []
        for n in names:
            t = md.topics[n]
            rf = max((len(p.replicas) for p in t.partitions.values()), default=0)
            msgs = sum(max(0, marks[(n, p)][1] - max(0, marks[(n, p)][0])) for p in t.partitions)
            out.append({"name": n, "partitions": len(t.partitions), "replication": rf, "messages": msgs,
                        "end_offsets": sum(max(0, marks[(n, p)][1]) for p in t.partitions),
                        "size": sizes.get(n), "internal": n.startswith("__"),
                        "under_replicated": sum(len(p.isrs) < len(p.replicas) for p in t.partitions.values()),
                        "error": str(t.error) if t.error is not None else None})
        return out

    def _sizes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            nodes = self.brokers()
        except ConsoleError:
            return out
        for host, port in nodes.values():
            try:
                resp = self.peer_call(host, port, DESCRIBE_LOG_DIRS, 4, {"topics": None})
            except ConsoleError:
                continue
            for d in resp.get("results", []):
                for t in d["topics"]:
                    out[t["name"]] = out.get(t["name"], 0) + sum(p["partition_size"] for p in t["partitions"])
        return out

    def topic(self, name: str) -> dict[str, Any]:
        md = self.metadata(name)
        t = md.topics.get(name)
        if t is None or t.error is not None:
            raise ConsoleError(f"topic {name}: {t.error if t is not None else 'UNKNOWN_TOPIC_OR_PARTITION'}", 404)
        marks = self.watermarks([(name, p) for p in t.partitions])
        parts = [{"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs),
                  "start": marks[(name, p.id)][0], "end": marks[(name, p.id)][1]}
                 for p in sorted(t.partitions.values(), key=lambda p: p.id)]
        return {"name": name, "partitions": parts, "configs": self.topic_configs(name)}

    def topic_configs(self, name: str) -> list[dict[str, Any]]:
        from confluent_kafka.admin import ConfigResource
        from confluent_kafka.admin import ResourceType as RT

        res = ConfigResource(RT.TOPIC, name)
        entries = self._result(self.admin().describe_configs([res], request_timeout=self.timeout)[res],
                               f"DescribeConfigs {name}")
        return [{"name": e.name, "value": None if e.is_sensitive else e.value, "source": _source_name(e.source), "default": bool(e.is_default),
                 "read_only": bool(e.is_read_only), "sensitive": bool(e.is_sensitive)}
                for e in sorted(entries.values(), key=lambda e: e.name)]

    def create_topic(self, name: str, partitions: int, replication: int, configs: Mapping[str, str]) -> None:
        self.forget_topic(name)
        from confluent_kafka.admin import NewTopic

        nt = NewTopic(name, num_partitions=partitions, replication_factor=replication, config=dict(configs))
        self._result(self.admin().create_topics([nt], request_timeout=self.timeout)[name], f"create topic {name}")

    def delete_topic(self, name: str) -> None:
        self.forget_topic(name)
        self._result(self.admin().delete_topics([name], operation_timeout=self.timeout,
                                                request_timeout=self.timeout)[name], f"delete topic {name}")

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        futs = self.admin().create_partitions([NewPartitions(name, total)], request_timeout=self.timeout)
        self._result(futs[name], f"add partitions to {name}")

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
        from confluent_kafka.admin import ResourceType as RT

        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        res = ConfigResource(RT.TOPIC, name, incremental_configs=[ConfigEntry(key, value or "",
                                                                              incremental_operation=op)])
        try:
            futs = self.admin().incremental_alter_configs([res], request_timeout=self.timeout)
            self._result(next(iter(futs.values())), f"alter config {key} of {name}")
        finally:  # after the change: an Overview running meanwhile may have kept the old value
            self.forget_topic(name)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        from confluent_kafka import TopicPartition

        futs = self.admin().delete_records([TopicPartition(name, partition, offset)], request_timeout=self.timeout)
        res = self._result(next(iter(futs.values())), f"delete records of {name}-{partition}")
        return int(res.offset)

    # -- messages ---------------------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes]]) -> dict[str, Any]:
        p = self.producer()
        done: list[Any] = []
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers or None,
                                  "on_delivery": lambda err, msg: done.append((err, msg))}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            p.produce(topic, **kwargs)
        except Exception as exc:
            raise from_kafka(exc, f"produce to {topic}") from None
        deadline = time.monotonic() + self.timeout
        while not done and time.monotonic() < deadline:
            p.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        if not done:
            raise ConsoleError(f"produce to {topic}: no acknowledgement within {self.timeout:.0f}s", 504)
        err, msg = done[0]
        if err is not None:
            status = 403 if "AUTHORIZATION" in err.name() else 400
            if status == 403:  # librdkafka keeps the topic's refusal in its metadata cache: a new ACL would not
                with self._lock:  # be seen until the next refresh, so the next produce gets a fresh client
                    if self._producer is p:
                        self._producer = None
            raise ConsoleError(f"produce to {topic}: {err.name()}: {err.str()}", status)
        return {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}

    def offsets_for_time(self, tps: list[tuple[str, int]], when_ms: int) -> dict[tuple[str, int], int]:
        """The first offset at or after ``when_ms`` per partition (-1: none, the log end)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        futs = self.admin().list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(when_ms) for t, p in tps},
                                         request_timeout=self.timeout)
        return {(tp.topic, tp.partition): int(self._result(f, f"offsets of {tp.topic}-{tp.partition} at time").offset)
                for tp, f in futs.items()}

    # -- groups -----------------------------------------------------------------------------------------------

    def groups(self) -> list[dict[str, Any]]:
        """Every group of the cluster: ``{"group", "type", "state", "simple"}`` with Kafka's names (Classic /
        Consumer; Stable, Empty, Assigning, Reconciling...), from ListGroups v5 at every broker (librdkafka reports a
        consumer group's Assigning / Reconciling as UNKNOWN); ``simple``: a classic group without a protocol type
        (offsets only). A broker that does not answer does not hide the others' groups."""
        answers = []
        down: ConsoleError | None = None
        for _node, (host, port) in sorted(self.brokers().items()):
            try:
                answers.append(self.peer_call(host, port, LIST_GROUPS, LIST_GROUPS_VERSION, list_groups_request()))
            except ConsoleError as exc:
                if exc.status == 403:
                    raise
                down = exc
        if not answers and down is not None:
            raise down
        rows, _errors = listed_groups(answers)
        protocol = {g["group_id"]: g.get("protocol_type") or "" for a in answers for g in a.get("groups") or []}
        return [{**r, "simple": r["type"] == "Classic" and not protocol.get(r["group"])} for r in rows]

    def consumer_group(self, group: str) -> dict[str, Any] | None:
        """A KIP-848 group's epochs, members with epochs and current / target assignments (ConsumerGroupDescribe
        at its coordinator); None when it is not a consumer group (GROUP_ID_NOT_FOUND) or has no coordinator."""
        found = self.any_broker(FIND_COORDINATOR, 3, find_coordinator_request(group))
        if found["error_code"]:
            return None
        resp = self.peer_call(found["host"], found["port"], CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_DESCRIBE_VERSION,
                              describe_request(group))
        (g,) = resp["groups"]
        return None if g["error_code"] else as_console(parse_described(g))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        fut = self.admin().list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                       request_timeout=self.timeout)[group]
        tps = self._result(fut, f"OffsetFetch {group}").topic_partitions or []
        return {(tp.topic, tp.partition): tp.offset for tp in tps if tp.error is None}

    def group(self, group: str) -> dict[str, Any]:
        desc = self._result(self.admin().describe_consumer_groups([group], request_timeout=self.timeout)[group],
                            f"DescribeGroups {group}")
        committed = self.committed(group)
        marks = self.watermarks(sorted(committed))
        rows: list[dict[str, Any]] = []
        for (t, p), off in sorted(committed.items()):
            end = marks.get((t, p), (-1, -1))[1]
            rows.append({"topic": t, "partition": p, "committed": off, "end": end,
                         "lag": max(0, end - off) if off >= 0 and end >= 0 else None})
        per_topic: dict[str, int] = {}
        for r in rows:
            per_topic[str(r["topic"])] = per_topic.get(str(r["topic"]), 0) + int(r["lag"] or 0)
        members = [{"member": m.member_id, "client": m.client_id, "host": m.host,
                    "assignment": sorted(f"{tp.topic}-{tp.partition}" for tp in (m.assignment.topic_partitions
                                                                                 if m.assignment else []))}
                   for m in desc.members]
        gtype = getattr(getattr(desc, "type", None), "name", "CLASSIC")
        out = {"group": group, "state": group_state_name(desc.state),
               "type": gtype.title() if gtype in ("CLASSIC", "CONSUMER", "SHARE") else "Unknown",
               "coordinator": desc.coordinator.id if desc.coordinator is not None else None,
               "assignor": desc.partition_assignor, "members": members, "offsets": rows,
               "lag_by_topic": per_topic, "lag": sum(per_topic.values()), "at_ms": _ms_now(), "kip848": None}
        if gtype == "CONSUMER":  # epochs, target assignments and Kafka's state names: ConsumerGroupDescribe
            detail = self.consumer_group(group)
            if detail is not None:
                out.update(state=detail["state"], assignor=detail["assignor"], members=detail["members"],
                           kip848=detail)
        return out

    def reset_offsets(self, group: str, topic: str, partition: int | None, spec: ResetSpec,
                      execute: bool) -> list[dict[str, Any]]:
        """Kafka's ``--reset-offsets`` for one topic (one partition or all): the preview rows (topic, partition,
        current, new); with ``execute`` the new offsets are committed (the broker refuses a group with members)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        md = self.metadata(topic)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise ConsoleError(f"topic {topic}: {t.error if t is not None else 'does not exist'}", 404)
        parts = sorted(t.partitions) if partition is None else [partition]
        if partition is not None and partition not in t.partitions:
            raise ConsoleError(f"{topic}-{partition} does not exist", 404)
        tps = [(topic, p) for p in parts]
        marks = self.watermarks(tps)
        committed = self.committed(group)
        times = self.offsets_for_time(tps, spec.value) if spec.needs_times else {}
        rows: list[dict[str, Any]] = []
        for key in tps:
            low, high = marks[key]
            cur = committed.get(key)
            new = min(max(target(spec, key, low, high, cur, times.get(key)), low), high)
            rows.append({"topic": key[0], "partition": key[1], "current": cur, "new": new, "end": high,
                         "lag_after": high - new})
        if execute:
            req = ConsumerGroupTopicPartitions(group, [TopicPartition(r["topic"], r["partition"], r["new"])
                                                       for r in rows])
            fut = self.admin().alter_consumer_group_offsets([req], request_timeout=self.timeout)[group]
            res = self._result(fut, f"OffsetCommit {group}")
            for tp in res.topic_partitions or []:
                if tp.error is not None:
                    raise from_kafka(Exception(tp.error), f"reset {group} {tp.topic}-{tp.partition}")
        return rows

    def delete_group_offsets(self, group: str, topic: str) -> list[dict[str, Any]]:
        """OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``) of every partition of ``topic``, at the
        group's coordinator; the broker refuses while the group consumes the topic (GROUP_SUBSCRIBED_TO_TOPIC).
        As ``tidelog groups delete-offsets`` (cli/group_admin.py), with the console's credentials."""
        md = self.metadata()
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise ConsoleError(f"topic {topic}: {t.error if t is not None else 'does not exist'}", 404)
        codes = self.run(admin_ops.delete_offsets(self.transport, group, {topic: sorted(t.partitions)}))
        failed = [code for _t, _p, code in codes if code]
        if failed:
            raise from_code(failed[0], None, f"OffsetDelete {group} {topic}")
        return [{"topic": x, "partition": p, "result": "Successful"} for x, p, _code in codes]

    def delete_group(self, group: str) -> None:
        self._result(self.admin().delete_consumer_groups([group], request_timeout=self.timeout)[group],
                     f"delete group {group}")

    # -- transactions -------------------------------------------------------------------------------------

    def transactions(self) -> list[dict[str, Any]]:
        rows = self.run(admin_ops.list_transactions(self.transport, self.brokers()))
        return sorted(({"transactional_id": t["transactional_id"], "producer_id": t["producer_id"],
                        "state": t["transaction_state"], "coordinator": node} for node, t in rows),
                      key=lambda t: t["transactional_id"])

    # -- security ---------------------------------------------------------------------------------------------

    def acls(self) -> list[dict[str, Any]]:
        flt = {"resource_type_filter": int(ResourceType.ANY), "resource_name_filter": None,
               "pattern_type_filter": int(PatternType.ANY), "principal_filter": None, "host_filter": None,
               "operation": int(AclOperation.ANY), "permission_type": int(PermissionType.ANY)}
        resp = self.any_broker(DESCRIBE_ACLS, 3, flt)
        if resp["error_code"]:
            raise from_code(resp["error_code"], resp.get("error_message"), "DescribeAcls")
        out = []
        for r in resp.get("resources") or []:
            for a in r["acls"]:
                out.append({"resource_type": ResourceType(r["resource_type"]).name, "name": r["resource_name"],
                            "pattern": PatternType(r["pattern_type"]).name, "principal": a["principal"],
                            "host": a["host"], "operation": AclOperation(a["operation"]).name,
                            "permission": PermissionType(a["permission_type"]).name})
        return sorted(out, key=lambda a: tuple(a.values()))

    @staticmethod
    def acl_fields(acl: Mapping[str, str]) -> dict[str, Any]:
        """The request fields of one ACL given by name (ResourceType, PatternType... names as Kafka's)."""
        try:
            principal = acl["principal"]
            if ":" not in principal or not principal.split(":", 1)[1]:
                raise ValueError(f"principal {principal!r}: expected Type:name, e.g. User:alice")
            return {"resource_type": int(parse_enum(ResourceType, acl["resource_type"])),
                    "resource_name": acl["name"], "pattern_type": int(parse_enum(PatternType, acl.get("pattern",
                                                                                                     "LITERAL"))),
                    "principal": principal, "host": acl.get("host") or "*",
                    "operation": int(parse_enum(AclOperation, acl["operation"])),
                    "permission_type": int(parse_enum(PermissionType, acl.get("permission", "ALLOW")))}
        except (KeyError, ValueError) as exc:
            raise ConsoleError(f"bad ACL: {exc}", 400) from None

    def create_acl(self, acl: Mapping[str, str]) -> None:
        f = self.acl_fields(acl)
        body = {"creations": [{"resource_type": f["resource_type"], "resource_name": f["resource_name"],
                               "resource_pattern_type": f["pattern_type"], "principal": f["principal"],
                               "host": f["host"], "operation": f["operation"],
                               "permission_type": f["permission_type"]}]}
        resp = self.any_broker(CREATE_ACLS, 3, body)
        for r in resp["results"]:
            if r["error_code"]:
                raise from_code(r["error_code"], r.get("error_message"), "CreateAcls")

    def delete_acl(self, acl: Mapping[str, str]) -> int:
        f = self.acl_fields(acl)
        body = {"filters": [{"resource_type_filter": f["resource_type"], "resource_name_filter": f["resource_name"],
                             "pattern_type_filter": f["pattern_type"], "principal_filter": f["principal"],
                             "host_filter": f["host"], "operation": f["operation"],
                             "permission_type": f["permission_type"]}]}
        resp = self.any_broker(DELETE_ACLS, 3, body)
        n = 0
        for r in resp["filter_results"]:
            if r["error_code"]:
                raise from_code(r["error_code"], r.get("error_message"), "DeleteAcls")
            n += len(r["matching_acls"])
        return n

    def scram_users(self) -> list[dict[str, Any]]:
        """DescribeUserScramCredentials (admin_ops, as confluent-kafka 2.16 aborts on the broker's refusal)."""
        return [{"user": user, "mechanisms": [f"{m}({i})" for m, i in infos]}
                for user, infos in self.run(admin_ops.describe_scram(self.transport))]

    def quotas(self) -> list[dict[str, Any]]:
        """Every client quota (DescribeClientQuotas with no filter, as ``tidelog quotas describe``): per entity its
        {entity type: name, None for the default} and its quotas."""
        return [{"entity": names, "quotas": dict(values)}
                for names, values in self.run(admin_ops.describe_quotas(self.transport, []))]

    def metrics_urls(self) -> dict[int, str]:
        """Each broker's own Prometheus endpoint, as ``tidelog topics describe`` finds it (broker config
        ``tidelog.metrics.listener``); none for a broker that is not tidelog."""
        md = self.metadata()
        return _leader_metrics_urls(self.admin(), md, set(md.brokers), self.timeout)


class _Transport:
    """A cluster as :class:`tidelog.client.admin_ops.Transport`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict:
        return await self.cluster.call(host, port, api_key, version, body)

    async def any_broker(self, api_key: int, version: int, body: dict) -> dict:
        return await self.cluster.any_broker_async(api_key, version, body)

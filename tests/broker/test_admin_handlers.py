"""An in-process broker for handler tests: requests and responses go through the real codec."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tidelog.broker.broker import Broker
from tidelog.broker.config import BrokerConfig
from tidelog.broker.handlers import REGISTRY, RequestContext
from tidelog.protocol import codec
from tidelog.protocol.errors import error_code


class Harness:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._cid = itertools.count(1)

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """Encode ``body`` as a request, decode it as the server does, run the handler, and return the
        response as a client would decode it from the wire."""
        cid = next(self._cid)
        frame = codec.encode_request(api_key, version, cid, "test-client", body)
        _header, request = codec.decode_request(frame[4:])
        ctx = RequestContext(self.broker, api_key, version, cid, "test-client")
        response = await REGISTRY[api_key](ctx, request)
        assert response is not None
        data = b"".join(bytes(c) for c in codec.encode_response(api_key, version, cid, response))
        got_cid, decoded = codec.decode_response(api_key, version, data[4:])
        assert got_cid == cid
        return decoded

    def produce(self, topic: str, partition: int, values: list[bytes], **batch_kwargs: Any) -> None:
        from tidelog.records.batch import build_batch

        log = self.broker.topics.get_log(topic, partition)
        log.append_as_leader(build_batch([(None, v) for v in values], **batch_kwargs))
        self.broker.on_append((topic, partition), log)


def run_broker(
    tmp_path: Path,
    scenario: Callable[[Harness], Awaitable[None]],
    props: dict[str, str] | None = None,
) -> None:
    """Start a Broker on 127.0.0.1 (free port, metrics off) with its data in ``tmp_path``, run ``scenario``,
    shut the broker down."""

    async def main() -> None:
        cfg = BrokerConfig.from_properties(
            {
                "log.dirs": str(tmp_path / "data"),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "tidelog.metrics.listener": "off",
                **(props or {}),
            }
        )
        broker = Broker(cfg)
        await broker.start()
        try:
            await scenario(Harness(broker))
        finally:
            await broker.shutdown()

    asyncio.run(main())


def err(name: str) -> int:
    return error_code(name)


# ---------------------------------------------------------------------------------------------------------------
# tests

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 33, 37, 44, 60
TOPIC, BROKER = 2, 4


def _topic(name: str, partitions: int = 1, rf: int = -1, configs: dict[str, str] | None = None, **kw: Any) -> dict:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": kw.get("assignments", []),
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


async def _create(h: Harness, *topics: dict, version: int = 7, validate_only: bool = False) -> list[dict]:
    resp = await h.call(CREATE_TOPICS, version, {"topics": list(topics), "timeout_ms": 1000, "validate_only": validate_only})
    return resp["topics"]


def test_create_topics_every_version(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        lo, hi = codec.SUPPORTED_VERSIONS[CREATE_TOPICS]
        for v in range(lo, hi + 1):
            [res] = await _create(h, _topic(f"t{v}", 3, configs={"retention.ms": "60000"}), version=v)
            assert res["error_code"] == 0, res
            assert h.broker.topics.get(f"t{v}").num_partitions == 3
            if v >= 5:
                assert res["num_partitions"] == 3 and res["replication_factor"] == 1
                cfgs = {c["name"]: c for c in res["configs"]}
                assert cfgs["retention.ms"]["value"] == "60000"
                assert cfgs["retention.ms"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
                assert cfgs["segment.bytes"]["config_source"] == 5  # DEFAULT_CONFIG
            if v >= 7:
                assert res["topic_id"].bytes == h.broker.topics.get(f"t{v}").topic_id

    run_broker(tmp_path, scenario)


def test_create_topics_defaults_and_validate_only(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        [res] = await _create(h, _topic("d", -1, -1))
        assert res["error_code"] == 0 and res["num_partitions"] == 4  # num.partitions below
        [res] = await _create(h, _topic("v", 2), validate_only=True)
        assert res["error_code"] == 0 and res["num_partitions"] == 2
        assert not h.broker.topics.exists("v")

    run_broker(tmp_path, scenario, {"num.partitions": "4"})


def test_create_topics_errors(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("exists"))
        results = await _create(
            h,
            _topic("exists"),
            _topic("bad name!"),
            _topic("zero", 0),
            _topic("rf3", 1, 3),
            _topic("badcfg", 1, configs={"retention.ms": "soon"}),
            _topic("unknowncfg", 1, configs={"no.such.config": "1"}),
            _topic("dup"),
            _topic("dup"),
            _topic("ok", 2),
        )
        by_name = {r["name"]: r for r in results}
        assert len(results) == 8  # "dup" answered once
        assert by_name["exists"]["error_code"] == err("TOPIC_ALREADY_EXISTS")
        assert "already exists" in by_name["exists"]["error_message"]
        assert by_name["bad name!"]["error_code"] == err("INVALID_TOPIC_EXCEPTION")
        assert by_name["zero"]["error_code"] == err("INVALID_PARTITIONS")
        assert by_name["rf3"]["error_code"] == err("INVALID_REPLICATION_FACTOR")
        assert by_name["badcfg"]["error_code"] == err("INVALID_CONFIG")
        assert by_name["unknowncfg"]["error_code"] == err("INVALID_CONFIG")
        assert by_name["dup"]["error_code"] == err("INVALID_REQUEST")
        assert by_name["ok"]["error_code"] == 0 and by_name["ok"]["error_message"] is None
        for name in ("bad name!", "zero", "rf3", "badcfg", "dup"):
            assert not h.broker.topics.exists(name)
            assert by_name[name]["num_partitions"] == -1
        assert h.broker.topics.exists("ok")

    run_broker(tmp_path, scenario)


def test_create_topics_manual_assignment(tmp_path: Path) -> None:
    def assign(*replicas: list[int]) -> list[dict]:
        return [{"partition_index": i, "broker_ids": r} for i, r in enumerate(replicas)]

    async def scenario(h: Harness) -> None:
        results = await _create(
            h,
            _topic("a2", -1, -1, assignments=assign([0], [0])),
            _topic("other-broker", -1, -1, assignments=assign([1])),
            _topic("two-replicas", -1, -1, assignments=assign([0, 1])),
            _topic("gap", -1, -1, assignments=[{"partition_index": 1, "broker_ids": [0]}]),
            _topic("both", 2, -1, assignments=assign([0])),
        )
        by_name = {r["name"]: r for r in results}
        assert by_name["a2"]["error_code"] == 0 and by_name["a2"]["num_partitions"] == 2
        assert h.broker.topics.get("a2").num_partitions == 2
        for name in ("other-broker", "two-replicas", "gap"):
            assert by_name[name]["error_code"] == err("INVALID_REPLICA_ASSIGNMENT"), name
        assert by_name["both"]["error_code"] == err("INVALID_REQUEST")

    run_broker(tmp_path, scenario)


def test_delete_topics_by_name_and_id(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("a"), _topic("b"), _topic("c"))
        resp = await h.call(DELETE_TOPICS, 1, {"topic_names": ["a", "nope"], "timeout_ms": 1000})
        codes = {r["name"]: r["error_code"] for r in resp["responses"]}
        assert codes == {"a": 0, "nope": err("UNKNOWN_TOPIC_OR_PARTITION")}
        assert not h.broker.topics.exists("a")

        b_id = uuid.UUID(bytes=h.broker.topics.get("b").topic_id)
        resp = await h.call(
            DELETE_TOPICS,
            6,
            {
                "topics": [
                    {"name": None, "topic_id": b_id},
                    {"name": None, "topic_id": uuid.uuid4()},
                    {"name": "c", "topic_id": uuid.uuid4()},
                ],
                "timeout_ms": 1000,
            },
        )
        r_b, r_unknown, r_both = resp["responses"]
        assert r_b["error_code"] == 0 and r_b["name"] == "b" and r_b["topic_id"] == b_id
        assert r_unknown["error_code"] == err("UNKNOWN_TOPIC_ID")
        assert r_both["error_code"] == err("INVALID_REQUEST")
        assert not h.broker.topics.exists("b") and h.broker.topics.exists("c")
        resp = await h.call(DELETE_TOPICS, 6, {"topics": [{"name": "c"}], "timeout_ms": 1000})
        assert resp["responses"][0]["error_code"] == 0
        assert resp["responses"][0]["topic_id"] != uuid.UUID(int=0)
        assert h.broker.topics.names() == []

    run_broker(tmp_path, scenario)


def test_delete_topics_disabled(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("keep"))
        resp = await h.call(DELETE_TOPICS, 4, {"topic_names": ["keep"], "timeout_ms": 1000})
        assert resp["responses"][0]["error_code"] == err("TOPIC_DELETION_DISABLED")
        assert h.broker.topics.exists("keep")

    run_broker(tmp_path, scenario, {"delete.topic.enable": "false"})


def test_create_partitions(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("p", 1))

        async def grow(name: str, count: int, assignments: list | None = None, validate_only: bool = False) -> dict:
            body = {
                "topics": [{"name": name, "count": count, "assignments": assignments}],
                "timeout_ms": 1000,
                "validate_only": validate_only,
            }
            return (await h.call(CREATE_PARTITIONS, 3, body))["results"][0]

        assert (await grow("p", 3, validate_only=True))["error_code"] == 0
        assert h.broker.topics.get("p").num_partitions == 1
        assert (await grow("p", 3))["error_code"] == 0
        assert h.broker.topics.get("p").num_partitions == 3
        assert h.broker.topics.get_log("p", 2) is not None
        shrink = await grow("p", 2)
        assert shrink["error_code"] == err("INVALID_PARTITIONS") and "higher than" in shrink["error_message"]
        assert (await grow("p", 3))["error_code"] == err("INVALID_PARTITIONS")
        assert (await grow("missing", 3))["error_code"] == err("UNKNOWN_TOPIC_OR_PARTITION")
        bad = await grow("p", 4, assignments=[{"broker_ids": [7]}])
        assert bad["error_code"] == err("INVALID_REPLICA_ASSIGNMENT")
        assert (await grow("p", 5, assignments=[{"broker_ids": [0]}]))["error_code"] == err(
            "INVALID_REPLICA_ASSIGNMENT"
        )
        assert (await grow("p", 4, assignments=[{"broker_ids": [0]}]))["error_code"] == 0
        assert h.broker.topics.get("p").num_partitions == 4

    run_broker(tmp_path, scenario)


def test_delete_records(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("r", 2), _topic("compacted", 1, configs={"cleanup.policy": "compact"}))
        h.produce("r", 0, [b"a", b"b", b"c"])
        h.produce("r", 0, [b"d", b"e"])

        async def delete(parts: list[tuple[str, int, int]], version: int = 2) -> list[tuple[int, int]]:
            topics: dict[str, list[dict]] = {}
            for t, p, o in parts:
                topics.setdefault(t, []).append({"partition_index": p, "offset": o})
            body = {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": 1000}
            resp = await h.call(DELETE_RECORDS, version, body)
            return [(p["error_code"], p["low_watermark"]) for t in resp["topics"] for p in t["partitions"]]

        log = h.broker.topics.get_log("r", 0)
        assert log.high_watermark == 5
        assert await delete([("r", 0, 2)], version=0) == [(0, 2)]
        assert log.log_start_offset == 2
        assert await delete([("r", 0, 1)]) == [(0, 2)]  # never moves back
        assert await delete([("r", 0, 6)]) == [(err("OFFSET_OUT_OF_RANGE"), 2)]
        assert await delete([("r", 0, -7)]) == [(err("OFFSET_OUT_OF_RANGE"), 2)]
        assert await delete([("r", 0, -1), ("r", 1, -1)], version=1) == [(0, 5), (0, 0)]
        assert log.log_start_offset == 5
        assert await delete([("r", 9, 0), ("nope", 0, 0)]) == [(err("UNKNOWN_TOPIC_OR_PARTITION"), -1)] * 2
        assert (await delete([("compacted", 0, -1)]))[0][0] == err("POLICY_VIOLATION")

    run_broker(tmp_path, scenario)


def test_describe_configs_topic(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("c", 1, configs={"retention.ms": "1234", "cleanup.policy": "compact"}))
        lo, hi = codec.SUPPORTED_VERSIONS[DESCRIBE_CONFIGS]
        for v in range(lo, hi + 1):
            body = {
                "resources": [{"resource_type": TOPIC, "resource_name": "c", "configuration_keys": None}],
                "include_synonyms": True,
                "include_documentation": v >= 3,
            }
            [res] = (await h.call(DESCRIBE_CONFIGS, v, body))["results"]
            assert res["error_code"] == 0
            cfgs = {c["name"]: c for c in res["configs"]}
            assert cfgs["retention.ms"]["value"] == "1234"
            assert cfgs["retention.ms"]["config_source"] == 1
            assert cfgs["cleanup.policy"]["value"] == "compact"
            assert cfgs["max.message.bytes"]["config_source"] == 5
            assert cfgs["retention.ms"]["synonyms"][0] == {"name": "retention.ms", "value": "1234", "source": 1}
            if v >= 3:
                assert cfgs["retention.ms"]["config_type"] == 5  # LONG
                assert cfgs["cleanup.policy"]["config_type"] == 7  # LIST
        # keys filter, no synonyms
        body = {
            "resources": [{"resource_type": TOPIC, "resource_name": "c", "configuration_keys": ["retention.ms"]}],
            "include_synonyms": False,
        }
        [res] = (await h.call(DESCRIBE_CONFIGS, 1, body))["results"]
        assert [c["name"] for c in res["configs"]] == ["retention.ms"]
        assert res["configs"][0]["synonyms"] == []
        # unknown topic, unknown resource type
        body = {
            "resources": [
                {"resource_type": TOPIC, "resource_name": "missing", "configuration_keys": None},
                {"resource_type": 3, "resource_name": "g", "configuration_keys": None},
            ]
        }
        missing, group = (await h.call(DESCRIBE_CONFIGS, 4, body))["results"]
        assert missing["error_code"] == err("UNKNOWN_TOPIC_OR_PARTITION")
        assert group["error_code"] == err("INVALID_REQUEST")

    run_broker(tmp_path, scenario)


def test_describe_configs_broker(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        body = {
            "resources": [
                {"resource_type": BROKER, "resource_name": "0", "configuration_keys": None},
                {"resource_type": BROKER, "resource_name": "", "configuration_keys": ["num.partitions"]},
                {"resource_type": BROKER, "resource_name": "5", "configuration_keys": None},
            ],
            "include_documentation": True,
        }
        mine, default, other = (await h.call(DESCRIBE_CONFIGS, 4, body))["results"]
        assert mine["error_code"] == 0
        cfgs = {c["name"]: c for c in mine["configs"]}
        assert cfgs["num.partitions"]["value"] == "3"
        assert cfgs["num.partitions"]["config_source"] == 4  # STATIC_BROKER_CONFIG
        assert cfgs["num.partitions"]["read_only"] is True
        assert cfgs["auto.create.topics.enable"]["config_source"] == 5
        assert cfgs["auto.create.topics.enable"]["config_type"] == 1  # BOOLEAN
        assert cfgs["log.retention.hours"]["value"] == "168"
        assert cfgs["log.segment.bytes"]["value"] == "1073741824"
        assert cfgs["num.partitions"]["documentation"]
        assert default["error_code"] == 0 and default["configs"] == []  # the cluster default: dynamic ones only
        assert other["error_code"] == err("INVALID_REQUEST")

    run_broker(tmp_path, scenario, {"num.partitions": "3"})


def test_alter_configs(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _create(h, _topic("a", 1, configs={"retention.ms": "1000"}))
        topics = h.broker.topics

        async def alter(resources: list[dict], validate_only: bool = False, version: int = 2) -> list[dict]:
            body = {"resources": resources, "validate_only": validate_only}
            return (await h.call(ALTER_CONFIGS, version, body))["responses"]

        def res(rtype: int, name: str, **cfg: str | None) -> dict:
            return {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k.replace("_", "."), "value": v} for k, v in cfg.items()],
            }

        [r] = await alter([res(TOPIC, "a", segment_ms="5000")], validate_only=True)
        assert r["error_code"] == 0 and topics.get("a").overrides == {"retention.ms": "1000"}
        # AlterConfigs replaces the whole override set
        [r] = await alter([res(TOPIC, "a", segment_ms="5000")], version=0)
        assert r["error_code"] == 0 and topics.get("a").overrides == {"segment.ms": "5000"}
        assert topics.get_log("a", 0).config.segment_ms == 5000  # applied to the live log
        [bad, missing, broker, other_broker] = await alter(
            [
                res(TOPIC, "a", segment_ms="-5"),
                res(TOPIC, "missing", segment_ms="5"),
                res(BROKER, "0", num_partitions="5"),
                res(BROKER, "3"),
            ]
        )
        assert bad["error_code"] == err("INVALID_CONFIG") and bad["error_message"]
        assert missing["error_code"] == err("UNKNOWN_TOPIC_OR_PARTITION")
        assert broker["error_code"] == err("INVALID_REQUEST")
        assert "dynamically" in broker["error_message"]
        assert other_broker["error_code"] == err("INVALID_REQUEST")
        assert topics.get("a").overrides == {"segment.ms": "5000"}
        [empty_broker] = await alter([res(BROKER, "0")])
        assert empty_broker["error_code"] == 0

    run_broker(tmp_path, scenario)


def test_incremental_alter_configs(tmp_path: Path) -> None:
    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

    async def scenario(h: Harness) -> None:
        await _create(h, _topic("i", 1, configs={"retention.ms": "1000"}))
        topics = h.broker.topics

        async def inc(name: str, *ops: tuple[str, int, str | None], rtype: int = TOPIC, version: int = 1) -> dict:
            body = {
                "resources": [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in ops],
                    }
                ],
                "validate_only": False,
            }
            return (await h.call(INCREMENTAL_ALTER_CONFIGS, version, body))["responses"][0]

        assert (await inc("i", ("max.message.bytes", SET, "2048"), version=0))["error_code"] == 0
        assert topics.get("i").overrides == {"retention.ms": "1000", "max.message.bytes": "2048"}
        assert topics.get_log("i", 0).config.max_message_bytes == 2048
        assert (await inc("i", ("retention.ms", DELETE, None)))["error_code"] == 0
        assert topics.get("i").overrides == {"max.message.bytes": "2048"}
        assert (await inc("i", ("cleanup.policy", APPEND, "compact")))["error_code"] == 0
        assert topics.get("i").overrides["cleanup.policy"] == "delete,compact"
        assert (await inc("i", ("cleanup.policy", SUBTRACT, "delete")))["error_code"] == 0
        assert topics.get("i").overrides["cleanup.policy"] == "compact"
        r = await inc("i", ("retention.ms", APPEND, "5"))
        assert r["error_code"] == err("INVALID_CONFIG")
        r = await inc("i", ("retention.ms", SET, "1"), ("retention.ms", DELETE, None))
        assert r["error_code"] == err("INVALID_REQUEST")
        assert (await inc("i", ("retention.ms", 9, "1")))["error_code"] == err("INVALID_REQUEST")
        assert (await inc("nope", ("retention.ms", SET, "1")))["error_code"] == err("UNKNOWN_TOPIC_OR_PARTITION")
        r = await inc("0", ("num.partitions", SET, "2"), rtype=BROKER)
        assert r["error_code"] == err("INVALID_REQUEST")
        assert "Cannot update these configs dynamically: Set(num.partitions)" in r["error_message"]

    run_broker(tmp_path, scenario)


def test_describe_cluster(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        b = h.broker
        lo, hi = codec.SUPPORTED_VERSIONS[DESCRIBE_CLUSTER]
        for v in range(lo, hi + 1):
            body = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
            r = await h.call(DESCRIBE_CLUSTER, v, body)
            assert r["error_code"] == 0
            assert r["cluster_id"] == b.cluster_id and r["cluster_id"]
            assert r["controller_id"] == b.node_id
            assert r["brokers"] == [
                {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": "r1"}
                | ({"is_fenced": False} if "is_fenced" in r["brokers"][0] else {})
            ]
            ops = r["cluster_authorized_operations"]
            assert ops & (1 << 8) and ops & (1 << 12)  # DESCRIBE, IDEMPOTENT_WRITE
        r = await h.call(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        assert r["cluster_authorized_operations"] == -(2**31)
        r = await h.call(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert r["error_code"] == err("UNSUPPORTED_ENDPOINT_TYPE")

    run_broker(tmp_path, scenario, {"broker.rack": "r1"})

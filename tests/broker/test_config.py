"""Broker configuration: properties files, overrides, defaults, errors, and the serve command's exit codes."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.broker.config import BrokerConfig, ConfigException, is_sensitive_config, parse_properties


def test_defaults_are_kafkas_except_documented_ones() -> None:
    cfg = BrokerConfig.from_properties({})
    assert cfg.node_id == 0
    assert str(cfg.listener) == "PLAINTEXT://127.0.0.1:9092"
    assert cfg.log_dirs == [Path("./data")]
    assert cfg.num_partitions == 1
    assert cfg.default_replication_factor == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.message_max_bytes == 1048588
    assert cfg.get("num.recovery.threads.per.data.dir") == 2
    assert cfg.get("log.flush.offset.checkpoint.interval.ms") == 60000
    assert cfg.get("log.retention.check.interval.ms") == 300000
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.metrics_listener == ("127.0.0.1", 9404)
    assert cfg.log_config().retention_ms == 604800000
    assert cfg.log_config().max_message_bytes == 1048588


def test_properties_file_syntax() -> None:
    text = "\n".join(
        [
            "# comment",
            "! also a comment",
            "node.id = 3",
            "log.dirs: /a,/b",
            "num.partitions 4",
            "listeners=PLAINTEXT://127.0.0.1:19092,\\",
            "   ",
            "cluster.id=abc\\u0041",
            "key\\=with\\:escapes=v",
        ]
    )
    props = parse_properties(text)
    assert props["node.id"] == "3"
    assert props["log.dirs"] == "/a,/b"
    assert props["num.partitions"] == "4"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,"
    assert props["cluster.id"] == "abcA"
    assert props["key=with:escapes"] == "v"


def test_file_then_overrides_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=2\nlog.retention.hours=1\nlisteners=PLAINTEXT://127.0.0.1:9093\n")
    cfg = BrokerConfig.load(f, ["num.partitions=5", "auto.create.topics.enable=false"], port=9999, data_dir=tmp_path)
    assert cfg.num_partitions == 5
    assert cfg.auto_create_topics_enable is False
    assert cfg.listener.port == 9999 and cfg.listener.host == "127.0.0.1"
    assert cfg.log_dirs == [tmp_path]
    assert cfg.log_config().retention_ms == 3600000  # broker log.* defaults flow into topic defaults
    cfg2 = BrokerConfig.load(f, host="0.0.0.0")
    assert cfg2.listener.port == 9093 and cfg2.listener.host == "0.0.0.0"


def test_log_dir_vs_log_dirs() -> None:
    assert BrokerConfig.from_properties({"log.dir": "/x"}).log_dirs == [Path("/x")]
    assert BrokerConfig.from_properties({"log.dir": "/x", "log.dirs": "/y, /z"}).log_dirs == [Path("/y"), Path("/z")]


def test_broker_id_and_node_id() -> None:
    assert BrokerConfig.from_properties({"broker.id": "7"}).node_id == 7
    assert BrokerConfig.from_properties({"node.id": "8"}).node_id == 8
    with pytest.raises(ConfigException, match=r"node\.id"):
        BrokerConfig.from_properties({"node.id": "1", "broker.id": "2"})


def test_unknown_keys_warn_but_do_not_fail(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tidelog.broker.config"):
        cfg = BrokerConfig.from_properties({"some.future.setting": "1", "zookeeper.connect": "x:2181"})
    assert cfg.unknown_keys == ["some.future.setting"]
    assert "some.future.setting" in caplog.text
    assert "zookeeper.connect" not in caplog.text  # known (ignored) Kafka key


def test_replication_factor_warning_only_for_a_single_node(caplog: pytest.LogCaptureFixture) -> None:
    """default.replication.factor > 1 cannot be met by a broker without ZooKeeper (it says so); in ZooKeeper mode
    it is the cluster's ordinary setting and nothing is logged."""
    with caplog.at_level(logging.WARNING, logger="tidelog.broker.config"):
        BrokerConfig.from_properties({"default.replication.factor": "3"})
    assert "this broker runs alone" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidelog.broker.config"):
        BrokerConfig.from_properties({"default.replication.factor": "3", "zookeeper.connect": "x:2181"})
    assert "runs alone" not in caplog.text


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num.partitions", "zero", "num.partitions"),
        ("num.partitions", "0", "num.partitions"),
        ("auto.create.topics.enable", "yes", "auto.create.topics.enable"),
        ("listeners", "127.0.0.1:9092", "listeners"),
        ("listeners", "CUSTOM://127.0.0.1:9093", "no security protocol defined for listener CUSTOM"),
        ("socket.request.max.bytes", "-5", "socket.request.max.bytes"),
        ("log.retention.ms", "soon", "retention"),
        ("log.cleanup.policy", "shred", "cleanup.policy"),
        ("tidelog.metrics.listener", "host:notaport", "tidelog.metrics.listener"),
    ],
)
def test_bad_values_are_clear_errors(key: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigException) as info:
        BrokerConfig.from_properties({key: value})
    assert fragment in str(info.value)


def test_override_syntax_error() -> None:
    with pytest.raises(ConfigException, match="key=value"):
        BrokerConfig.load(None, ["no-equals-sign"])


def test_metrics_listener_forms() -> None:
    assert BrokerConfig.from_properties({"tidelog.metrics.listener": "off"}).metrics_listener is None
    assert BrokerConfig.from_properties({"metrics.port": "9500"}).metrics_listener == ("127.0.0.1", 9500)
    assert BrokerConfig.from_properties({"tidelog.metrics.listener": "0.0.0.0:0"}).metrics_listener == ("0.0.0.0", 0)


def test_advertised_listener() -> None:
    cfg = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://kafka.example:19092"}
    )
    adv = cfg.advertised_listener
    assert adv is not None and (adv.host, adv.port) == ("kafka.example", 19092)


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", "serve", *args], capture_output=True, text=True, timeout=60
    )


def test_serve_exits_non_zero_on_bad_value(tmp_path: Path) -> None:
    r = _serve("--data-dir", str(tmp_path), "-o", "num.partitions=lots")
    assert r.returncode == 2
    assert "num.partitions" in r.stderr


def test_serve_exits_non_zero_on_missing_config_file(tmp_path: Path) -> None:
    r = _serve("--config", str(tmp_path / "nope.properties"))
    assert r.returncode == 2
    assert "cannot read" in r.stderr


def test_serve_exits_non_zero_on_a_malformed_unicode_escape(tmp_path: Path) -> None:
    """Java's Properties.load refuses a malformed \\uxxxx escape; so does the one parser tidelog has."""
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=3\ncluster.id=ab\\u00zz\n")
    with pytest.raises(ConfigException, match="uxxxx"):
        BrokerConfig.load(f)
    r = _serve("--config", str(f))
    assert r.returncode == 2
    assert "server.properties" in r.stderr and "uxxxx" in r.stderr


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [("ssl.keystore.password", True), ("sasl.jaas.config", True), ("listener.name.client.ssl.key.password", True),
     ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", True), ("password.encoder.secret", True),
     ("some.plugin.password", True), ("vendor.api.secret.key", True), ("num.partitions", False),
     ("listeners", False), ("ssl.keystore.location", False), ("log.retention.ms", False)],
)
def test_sensitive_configs_are_kafkas_password_configs(name: str, sensitive: bool) -> None:
    assert is_sensitive_config(name) is sensitive


def test_invalid_sensitive_value_is_not_in_the_message() -> None:
    exc = ConfigException("ssl.keystore.password", "hunter2", "too short")
    assert "hunter2" not in str(exc) and "ssl.keystore.password" in str(exc)
    assert "'12x'" in str(ConfigException("num.partitions", "12x", "not a number"))

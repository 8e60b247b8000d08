"""tidelog's own clients over TLS and SASL (issue 16 item 6): the CLI commands that speak the protocol themselves
(``tidelog transactions``, ``tidelog cluster reassign``) with ``--command-config``, and the Spark ``tidelog``
source (raw-fetch and librdkafka paths) and sink with ``kafka.security.protocol`` / ``kafka.sasl.*`` /
``kafka.ssl.*``, all against a real ``tidelog serve`` (conftest.py's listeners; SASL_SSL with SCRAM-SHA-512)."""

from __future__ import annotations

import importlib.util
import secrets
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secsupport import PASSWORD, Certs

from tidelog.spark.fetcher import PartitionFetcher, raw_fetch_allowed
from tidelog.spark.kafka_sink import producer_config
from tidelog.spark.options import client_config
from tidelog.spark.producer import RawProducer, raw_produce_unsupported

USER, USER_PW = "olga", "olga-secret"
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{u}" password="{p}";'


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def scram_broker(secure_broker: Any) -> Any:
    """The secure broker with a SCRAM-SHA-512 user (made on the PLAINTEXT listener)."""
    admin = AdminClient({"bootstrap.servers": secure_broker.bootstrap})
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), USER_PW.encode(), secrets.token_bytes(16))])
    for f in futures.values():
        f.result(30)
    return secure_broker


def _sasl_ssl(b: Any) -> str:
    return f"127.0.0.1:{b.ports['SASL_SSL']}"


def _props(tmp_path: Path, certs: Certs, password: str = USER_PW, name: str = "client.properties") -> Path:
    """A Java client properties file: SASL_SSL, SCRAM-SHA-512, a PKCS12 trust store."""
    path = tmp_path / name
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.jaas.config={SCRAM_JAAS.format(u=USER, p=password)}\n"
                    f"ssl.truststore.type=PKCS12\nssl.truststore.location={certs.path('trust.p12')}\n"
                    f"ssl.truststore.password={PASSWORD}\n")
    return path


def _scram_conf(certs: Certs) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": USER_PW, "ssl.ca.location": certs.path("ca.pem")}


def _topic(b: Any, partitions: int = 1) -> str:
    name = f"own-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def test_transactions_list_and_describe_over_sasl_ssl(scram_broker: Any, certs: Certs, tmp_path: Path) -> None:
    b = scram_broker
    topic = _topic(b)
    tid = f"own-tx-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": _sasl_ssl(b), "transactional.id": tid, **_scram_conf(certs)})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"v")
    assert p.flush(30) == 0
    try:
        props = str(_props(tmp_path, certs))
        r = _cli("transactions", "list", "-b", _sasl_ssl(b), "--command-config", props)
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines()]
        assert any(tid in row and "Ongoing" in row for row in rows), r.stdout
        r = _cli("transactions", "describe", "--transactional-id", tid, "-b", _sasl_ssl(b), "--command-config", props)
        assert r.returncode == 0, r.stderr
        assert "Ongoing" in r.stdout and topic in r.stdout, r.stdout
        # without --command-config the SASL_SSL listener is not spoken to: the command fails, it does not hang
        r = _cli("transactions", "list", "-b", _sasl_ssl(b), "--timeout", "5")
        assert r.returncode != 0
    finally:
        p.abort_transaction(30)


def test_mutual_tls_and_cluster_reassign(scram_broker: Any, certs: Certs, tmp_path: Path) -> None:
    """The MTLS listener requires a client certificate: PEM key store, PKCS12 trust store. ``cluster reassign
    --list`` gets through TLS (Metadata, ApiVersions and ListPartitionReassignments at the controller; a single
    node answers it as a one-broker Kafka: nothing in progress); without a certificate the listener drops the
    handshake."""
    b = scram_broker
    mtls = f"127.0.0.1:{b.ports['MTLS']}"
    props = tmp_path / "mtls.properties"
    props.write_text("security.protocol=SSL\n"
                     f"ssl.truststore.type=PKCS12\nssl.truststore.location={certs.path('trust.p12')}\n"
                     f"ssl.truststore.password={PASSWORD}\n"
                     f"ssl.keystore.type=PEM\nssl.keystore.location={certs.path('client-bundle.pem')}\n")
    r = _cli("transactions", "list", "-b", mtls, "--command-config", str(props))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split()[:2] == ["TransactionalId", "Coordinator"], r.stdout
    r = _cli("cluster", "reassign", "--list", "-b", mtls, "--command-config", str(props))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "No partition reassignments found.", r.stdout
    # a client without a certificate is refused by the listener
    props.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={certs.path('ca.pem')}\n")
    for args in (["transactions", "list"], ["cluster", "reassign", "--list"]):
        r = _cli(*args, "-b", mtls, "--command-config", str(props), "--timeout", "5")
        assert r.returncode == 1, r.stderr
        # the broker drops the handshake (reset, or a TLS alert): one line, nothing listed
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", r.stderr


def test_wrong_password_is_one_clear_line(scram_broker: Any, certs: Certs, tmp_path: Path) -> None:
    b = scram_broker
    props = str(_props(tmp_path, certs, password="not-it", name="wrong.properties"))
    for args in (["transactions", "list"], ["cluster", "reassign", "--list"]):
        r = _cli(*args, "-b", _sasl_ssl(b), "--command-config", props)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "SASL authentication failed" in lines[0] and "SCRAM-SHA-512" in lines[0], lines
        assert "not-it" not in r.stderr
    # a bad setting names its key
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    r = _cli("transactions", "list", "-b", _sasl_ssl(b), "--command-config", str(bad))
    assert r.returncode == 2 and "sasl.mechanism" in r.stderr, r.stderr


def test_raw_fetcher_speaks_sasl_ssl(scram_broker: Any, certs: Certs) -> None:
    """The Spark source's raw-fetch client, with Java-client option names (as a Spark Kafka job has them)."""
    b = scram_broker
    topic = _topic(b)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(5):
        p.produce(topic, b"v%d" % i)
    assert p.flush(30) == 0
    conf = client_config({"kafka.bootstrap.servers": f"SASL_SSL://{_sasl_ssl(b)}",
                          "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                          "kafka.sasl.jaas.config": SCRAM_JAAS.format(u=USER, p=USER_PW),
                          "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certs.path("ca.pem")})
    assert raw_fetch_allowed(conf, include_headers=False, fetch_client="raw")
    f = PartitionFetcher(conf, topic, 0, timeout_s=10)
    try:
        assert f.watermarks() == (0, 5)
    finally:
        f.close()
    f = PartitionFetcher({**conf, "sasl.password": "wrong"}, topic, 0, timeout_s=10)
    try:
        with pytest.raises(ConnectionError, match="SASL authentication failed"):
            f.watermarks()
    finally:
        f.close()


def test_raw_producer_speaks_sasl_ssl(scram_broker: Any, certs: Certs) -> None:
    """The Spark sink's raw producer, idempotent and transactional, with Java-client option names."""
    pa = pytest.importorskip("pyarrow")
    b = scram_broker
    topic = _topic(b)
    conf = producer_config({"kafka.bootstrap.servers": f"SASL_SSL://{_sasl_ssl(b)}",
                            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                            "kafka.sasl.jaas.config": SCRAM_JAAS.format(u=USER, p=USER_PW),
                            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certs.path("ca.pem")})
    assert raw_produce_unsupported(conf) is None
    batch = pa.RecordBatch.from_arrays([pa.array([b"v%d" % i for i in range(5)], pa.binary())], names=["value"])
    for tid in (None, f"own-tx-{uuid.uuid4().hex[:6]}"):
        prod = RawProducer(conf, transactional_id=tid)
        try:
            if tid is not None:
                prod.init_producer_id()
                prod.begin()
            assert prod.produce_arrow(iter([batch]), topic) == 5
            prod.flush()
            if tid is not None:
                prod.end_transaction(True)
        finally:
            prod.close()
    f = PartitionFetcher(conf, topic, 0, timeout_s=10)
    try:
        assert f.watermarks() == (0, 11)  # 10 records and the transaction's commit marker
    finally:
        f.close()
    prod = RawProducer({**conf, "sasl.password": "wrong"})
    try:
        with pytest.raises(ConnectionError, match="SASL authentication failed"):
            prod.produce_arrow(iter([batch]), topic)
    finally:
        prod.close()


# -- Spark: one small job per path (Spark is slow) ----------------------------------------------------------------

def _spark_fixture() -> Any:
    path = Path(__file__).resolve().parents[2] / "spark" / "conftest.py"
    spec = importlib.util.spec_from_file_location("tidelog_spark_fixtures_for_security", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.spark


if importlib.util.find_spec("pyspark") is not None and importlib.util.find_spec("pyarrow") is not None:
    spark = _spark_fixture()


def _spark_options(b: Any, certs: Certs) -> dict[str, str]:
    return {"kafka.bootstrap.servers": _sasl_ssl(b), "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": SCRAM_JAAS.format(u=USER, p=USER_PW),
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certs.path("ca.pem")}


def test_spark_write_and_read_both_paths_over_sasl_ssl(scram_broker: Any, certs: Certs, request: Any) -> None:
    pytest.importorskip("pyspark")
    session = request.getfixturevalue("spark")
    b = scram_broker
    topic = _topic(b, partitions=2)
    opts = _spark_options(b, certs)
    df = session.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
    # the sink's producers: raw (at-least-once and exactly-once) and librdkafka, 20 records each
    for sink in ({}, {"exactlyOnce": "true"}, {"produceClient": "librdkafka"}):
        df.write.mode("append").format("tidelog").options(**opts).option("topic", topic).options(**sink).save()
    expected = sorted(f"v{i}" for i in range(20) for _ in range(3))
    for client in ("raw", "librdkafka"):
        rows = (session.read.format("tidelog").options(**opts).option("subscribe", topic)
                .option("fetchClient", client).load().selectExpr("CAST(value AS STRING) AS v").collect())
        assert sorted(r.v for r in rows) == expected, client

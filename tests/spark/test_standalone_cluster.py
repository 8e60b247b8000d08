"""The exactly-once pipeline on a real Spark standalone cluster (issue 15, item 5): a master and two workers, each
its own JVM started from the pyspark install (``bin/spark-class``), executors launched by the workers as JVMs of
their own with their own Python workers, and the driver started by ``spark-submit --master spark://...`` in a
process of its own (tests/spark/standalone_job.py). What works in ``local[*]`` must work when executors are other
processes: tidelog is imported on the executors from the venv ``PYSPARK_PYTHON`` names, the data source instances
and the sink's writer are pickled on the driver and run there.

Checked: the output topic holds each input record exactly once (a read_committed consumer here, and the job's
batch read through the ``tidelog`` source on the executors), every transaction committed its batch id, and every
record was transformed by a Python worker whose parent chain leads to an executor JVM under one of the two worker
JVMs started here, both workers taking part (the pids come from /proc, written into a header by the job)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import venv
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from helpers import read_to_end

import tidelog

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]  # ~90 s idle; CI machines are shared

JOB = Path(__file__).with_name("standalone_job.py")
START_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 300.0  # about 45 s on an idle 2-core machine; CI machines are shared
# every JVM here (master, workers, driver, executors) runs a short job on a shared 2-core machine: C1 only and the
# serial GC start sooner (the flags of tests/java/jars4.py's client runs)
JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


def site_packages(venv_dir: Path) -> Path:
    return venv_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


class SparkStandalone:
    """A master and ``workers`` workers (``--cores 1 --memory 1g`` each), one JVM apiece, every one in a process
    group of its own so that ``kill`` takes the executors and Python workers a worker started with it."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.home = _spark_home()
        self.n_workers = workers
        self.url = ""
        self.ui_port = 0
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.work_dirs = [root / f"work-{i}" for i in range(workers)]
        conf = root / "conf"  # no spark-defaults.conf, no log4j2 file: Spark's own defaults
        conf.mkdir(parents=True, exist_ok=True)
        self.env = dict(
            os.environ, SPARK_HOME=str(self.home), SPARK_CONF_DIR=str(conf), SPARK_LOG_DIR=str(root),
            SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=JVM_FLAGS,
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",  # no REST server on the fixed port 6066
            PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
        )

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        out = open(self.root / f"{name}.log", "wb")  # noqa: SIM115  (owned by the process)
        # spark-class execs the JVM: the pid is the JVM's
        return subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def _wait(self, what: str, fn: Any) -> Any:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            got = fn()
            if got:
                return got
            dead = [p.args for p in [self.master, *self.workers] if p is not None and p.poll() is not None]
            assert not dead, f"{dead} exited while waiting for {what}; logs in {self.root}"
            time.sleep(0.2)  # polling interval of a bounded wait for the JVMs' start
        raise AssertionError(f"timed out waiting for {what}; logs in {self.root}")

    def _master_log(self) -> str:
        return (self.root / "master.log").read_text(errors="replace")

    def start(self) -> SparkStandalone:
        self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", "0", "--webui-port", "0")
        self.url = self._wait("the master's URL", lambda: (m := _MASTER_URL.search(self._master_log())) and m[1])
        self.ui_port = int(self._wait("the master's UI", lambda: (m := _MASTER_UI.search(self._master_log())) and m[1]))
        for i, work in enumerate(self.work_dirs):
            work.mkdir(parents=True, exist_ok=True)
            self.workers.append(self._spawn(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", "0",
                "--cores", "1", "--memory", "1g", "--work-dir", str(work), self.url))
        self._wait(f"{self.n_workers} alive workers", lambda: self.state().get("aliveworkers") == self.n_workers)
        return self

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return dict(json.loads(r.read()))
        except (OSError, ValueError):  # not listening yet, or an empty answer while the UI starts
            return {}

    def submit(self, *args: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None,
               during: Callable[[subprocess.Popen[bytes]], None] | None = None,
               timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess[bytes]:
        """``spark-submit --master <url> <options> job.py <args>`` (``env`` on top of the cluster's), calling
        ``during(process)`` while it runs; the driver's log is ``submit.log``."""
        cmd = [str(self.home / "bin" / "spark-submit"), "--master", self.url, "--driver-memory", "512m",
               "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
               "--driver-java-options", JVM_FLAGS, "--conf", f"spark.executor.extraJavaOptions={JVM_FLAGS}",
               "--conf", f"spark.cores.max={self.n_workers}", "--conf", "spark.ui.enabled=false",
               # schedule only once both executors are registered, so both workers take tasks
               "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
               "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=60s",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.streaming.pollingDelay=10ms",
               *options, str(JOB), *args]
        with open(self.root / "submit.log", "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**self.env, **(env or {})},
                                    start_new_session=True)
            try:
                if during is not None:
                    during(proc)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"spark-submit did not finish in {timeout:.0f}s; log: {self.root}/submit.log") from None
            finally:
                _killpg(proc)  # the driver JVM and its Python process, whatever happened
        return subprocess.CompletedProcess(cmd, proc.returncode)

    def executors(self) -> dict[int, str]:
        """The executor JVMs the workers have running now: pid -> executor id (from /proc)."""
        workers = {w.pid for w in self.workers}
        found: dict[int, str] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                args = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if ppid in workers and "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
                found[int(d.name)] = args[args.index("--executor-id") + 1]
        return found

    def kill(self) -> None:
        for p in [*self.workers, self.master]:
            if p is not None:
                _killpg(p)


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group: a worker's executors and Python workers too
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.fixture(scope="module")
def standalone() -> Iterator[SparkStandalone]:
    if shutil.which("java") is None or not (_spark_home() / "bin" / "spark-class").exists():
        pytest.skip("no java, or pyspark without bin/spark-class")
    root = Path(tempfile.mkdtemp(prefix="tidelog-standalone-"))
    cluster = SparkStandalone(root)
    try:
        yield cluster.start()
    finally:
        cluster.kill()  # every JVM, even when start() or the test failed
        if os.environ.get("TIDELOG_KEEP_TEST_DIRS") is None:
            shutil.rmtree(root, ignore_errors=True)


def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[str, str, dict[str, bytes]]]:
    """Every record of ``topic`` to its end (the LSO for read_committed): (key, value, headers)."""
    return [(m.key().decode(), m.value().decode(), dict(m.headers() or []))
            for m in read_to_end(bootstrap, topic, isolation)]


def _marker(bootstrap: str, group: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])], require_stable=True)[group].result(30)
    (tp,) = res.topic_partitions
    return int(tp.offset)


def _committed_batches(ck: Path) -> int:
    d = ck / "commits"
    return len([f for f in d.iterdir() if f.name.isdigit()]) if d.exists() else 0


def _run_pipeline(standalone: SparkStandalone, kt: Any, tmp_path: Path, n: int, **submit: Any
                  ) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Run standalone_job.py on ``n`` records and check what must hold however tidelog reached the executors: each
    input record exactly once in the output (a read_committed consumer here, and the job's batch read on the
    executors), both tasks' markers at the last batch id, every record transformed by a Python worker under an
    executor JVM under one of the worker JVMs started here, both workers taking part. Returns the job's result and
    the processes each record went through."""
    src, dst = kt.new_topic(2, prefix="sa-in"), kt.new_topic(2, prefix="sa-out")
    kt.produce(src, [(f"k{i}".encode(), f"{i}".encode(), i % 2) for i in range(n)])
    result_path = tmp_path / "result.json"
    done = standalone.submit(kt.bootstrap, src, dst, str(tmp_path / "ck"), str(result_path), **submit)
    assert done.returncode == 0, (standalone.root / "submit.log").read_text(errors="replace")[-4000:]
    result = json.loads(result_path.read_text())
    assert result["master"] == standalone.url
    # 100 offsets per micro-batch, each written by 2 tasks in 2 transactions
    assert [(b["batchId"], b["numInputRows"]) for b in result["batches"]] == [(b, 100) for b in range(n // 100)]

    expected = sorted((f"k{i}", f"out-{i}") for i in range(n))
    committed = _read(kt.bootstrap, dst, "read_committed")
    assert sorted((k, v) for k, v, _h in committed) == expected  # each input record exactly once
    assert sorted(map(tuple, result["batch_read"])) == expected  # the batch read on the executors, too
    last = n // 100 - 1
    assert [_marker(kt.bootstrap, f"tidelog-spark-{result['query_id']}-{p}", dst) for p in (0, 1)] == [last, last]

    # who did the work: pyworker=<pid>;executor=<pid>:<executor id>;worker=<pid>;... per record
    procs = [dict(kv.split("=", 1) for kv in h["proc"].decode().split(";")) for _k, _v, h in committed]
    worker_pids = [str(w.pid) for w in standalone.workers]
    seen = {p["worker"] for p in procs}
    assert seen == set(worker_pids), (seen, worker_pids)  # both worker JVMs ran tasks, and nothing else did
    not_ours = {result["driver_pid"], os.getpid()}
    for p in procs:
        exec_pid, exec_id = p["executor"].split(":")
        assert int(p["pyworker"]) not in not_ours and int(exec_pid) not in not_ours, p
        # the executor's own directory in the work dir of the worker that launched it
        work = standalone.work_dirs[worker_pids.index(p["worker"])]
        assert (work / result["app_id"] / exec_id / "stderr").is_file(), (p, sorted(work.rglob("*")))
    assert len({p["executor"] for p in procs}) == 2  # two executors, one per worker
    return result, procs


def test_exactly_once_pipeline_on_a_standalone_cluster(standalone: SparkStandalone, kt: Any, tmp_path: Path) -> None:
    """tidelog installed in the interpreter ``PYSPARK_PYTHON`` names (this venv): the executors import it from
    there, C accelerators included. Mid-stream (2 of 6 micro-batches committed) one executor JVM is killed -9, its
    Python workers with it: its task fails, an open transaction of it is fenced by the retry on the other executor
    (the worker launches a new executor meanwhile), and the output is still exactly once."""
    n = 600
    killed: list[tuple[str, int]] = []  # (executor id, micro-batches committed when it was killed)

    def kill_an_executor(proc: subprocess.Popen[bytes]) -> None:
        ck = tmp_path / "ck"
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not (_committed_batches(ck) >= 2 and (running := standalone.executors())):
            assert proc.poll() is None, "the job ended before an executor could be killed"
            assert time.monotonic() < deadline, "no second micro-batch committed"
            time.sleep(0.05)  # polling interval: the driver writes the commit log, the workers launch executors
        pid, exec_id = sorted(running.items())[0]
        before = _committed_batches(ck)
        os.kill(pid, signal.SIGKILL)
        killed.append((exec_id, before))

    result, procs = _run_pipeline(standalone, kt, tmp_path, n, during=kill_an_executor)
    ((exec_id, before),) = killed
    assert before < n // 100, "the query had ended when the executor was killed"
    assert exec_id in {p["executor"].split(":")[1] for p in procs}  # it had written records before it died
    here = str(Path(tidelog.__file__).parent)
    assert result["driver_tidelog"] == here
    assert {(p["tidelog"], p["c"]) for p in procs} == {(here, "1")}


def test_tidelog_shipped_with_py_files(standalone: SparkStandalone, kt: Any, tmp_path: Path) -> None:
    """tidelog shipped as ``--py-files tidelog.zip`` to an interpreter that has the dependencies (pyspark,
    pyarrow, confluent-kafka, ...) but not tidelog: the pipeline works, exactly once, but the executors import
    tidelog from the zip without its C accelerators (Python cannot load extension modules from a zip): the pure
    Python fallback runs. ``--py-files`` alone is not enough: PySpark 4.3 plans a Python data source in Python
    processes the driver's JVM starts, which do not get the ``--py-files`` (ModuleNotFoundError: No module named
    'tidelog' when the streaming source is initialised); they take the JVM's ``PYTHONPATH``, so the zip is named
    there too. What docs/SPARK.md says about shipping tidelog rests on this."""
    if not any((Path(tidelog.__file__).parent / "client").glob("_columnar*.so")):
        pytest.skip("tidelog's C accelerators are not built here")
    # an interpreter with every dependency of this venv but not tidelog: a .pth naming this venv's site-packages
    # (the .pth files inside it, such as tidelog's editable install, are not read from there)
    bare = tmp_path / "bare-venv"
    venv.create(bare, with_pip=False)
    (site_packages(bare) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(bare / "bin" / "python")
    assert subprocess.run([python, "-c", "import tidelog"], capture_output=True).returncode != 0
    assert subprocess.run([python, "-c", "import confluent_kafka, pyarrow, pyspark"]).returncode == 0
    archive = tmp_path / "tidelog.zip"
    pkg = Path(tidelog.__file__).parent
    with zipfile.ZipFile(archive, "w") as z:
        for f in pkg.rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f.relative_to(pkg.parent))
    result, procs = _run_pipeline(standalone, kt, tmp_path, 200, options=("--py-files", str(archive)),
                                  env={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                                       "PYTHONPATH": str(archive)})
    assert result["driver_tidelog"].endswith("tidelog.zip/tidelog"), result["driver_tidelog"]
    # on the executors: the copy Spark fetched into the executor's work dir, a zip, so no C extension
    print("XX", result["driver_tidelog"], procs[0])
    assert all(p["tidelog"].endswith("tidelog.zip/tidelog") and p["c"] == "0" for p in procs), procs[:3]

"""Listener security benchmark: produce and consume throughput over SSL and SASL_SSL (SCRAM-SHA-512) against
PLAINTEXT, 1 KiB records, one broker, one run side by side.

    .venv/bin/python bench/security_bench.py [--records 200000] [--rounds 1]

One ``tidelog serve`` with three listeners (certificates made with the ``openssl`` CLI in a temporary dir). For
each listener, in turn, on a fresh topic of one partition: a confluent-kafka producer sends ``--records``
records of 1 KiB (acks=all, lz4 off, linger 5 ms, 1 MiB batches) and waits for all acknowledgements; then a
consumer reads them all from the beginning (``consume()`` in batches of 10,000). Reported: MB/s, the ratio to
PLAINTEXT, and the broker's CPU seconds per GB moved (from /proc; the client runs in this process, so the CPU
column is what tells the broker's cost apart from the client's). Goal (issue 16): produce >= 0.7x, consume >=
0.5x of PLAINTEXT. Everything talks to 127.0.0.1; the broker is stopped at the end (and bounded by a timeout).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench-ca", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "1", "-extfile", "ext", cwd=d)
    (d / "server-bundle.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(work: Path) -> tuple[subprocess.Popen, dict[str, int], Path]:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(work / "server-bundle.pem"),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "tidelog.metrics.listener": "off",
    }
    cmd = [sys.executable, "-m", "tidelog.cli.main", "serve", "--data-dir", str(work / "data"), "--log-level", "INFO"]
    for k, v in props.items():
        cmd += ["--override", f"{k}={v}"]
    log = work / "broker.log"
    sink = open(log, "w")  # noqa: SIM115 - the broker's output, open for its lifetime
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(r"listeners=(\S+)", log.read_text())
        if m:
            ports = {n: int(p) for n, p in re.findall(r"([A-Z_]+)\([A-Z_]+\)://[^:]+:(\d+)", m.group(1))}
            return proc, ports, log
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"broker did not start:\n{log.read_text()[-3000:]}")


def produce(bootstrap: str, topic: str, n: int, conf: dict) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all",
                  "queue.buffering.max.kbytes": 1 << 20, "queue.buffering.max.messages": 1_000_000, **conf})
    value = os.urandom(SIZE)
    failed = []
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise SystemExit(f"produce failed: {left} left, errors {failed[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, n: int, conf: dict) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                  "queued.max.messages.kbytes": 1 << 20, **conf})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 180
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error():
                raise SystemExit(f"consume failed: {m.error()}")
            got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    if got < n:
        raise SystemExit(f"consumed {got} of {n}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=1, help="repeat the three listeners this many times (best kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-sec-bench-") as tmp:
        work = Path(tmp)
        make_certs(work)
        proc, ports, _ = start_broker(work)
        try:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-pw",
                    secrets.token_bytes(16))]).values():
                f.result(30)
            tls = {"ssl.ca.location": str(work / "ca.pem")}
            modes = {
                "PLAINTEXT": {},
                "SSL": {"security.protocol": "SSL", **tls},
                "SASL_SSL": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "bench", "sasl.password": "bench-pw", **tls},
            }
            best: dict[str, list[float]] = {}
            for r in range(args.rounds):
                for name, conf in modes.items():
                    bootstrap = f"127.0.0.1:{ports[name]}"
                    topic = f"bench-{name.lower()}-{r}"
                    c0 = cpu_seconds(proc.pid)
                    tp = produce(bootstrap, topic, args.records, conf)
                    c1 = cpu_seconds(proc.pid)
                    tc = consume(bootstrap, topic, args.records, conf)
                    c2 = cpu_seconds(proc.pid)
                    mb = args.records * SIZE / 1e6
                    row = [mb / tp, mb / tc, (c1 - c0) / mb * 1000, (c2 - c1) / mb * 1000]
                    old = best.get(name)
                    best[name] = row if old is None else [max(row[0], old[0]), max(row[1], old[1]),
                                                          min(row[2], old[2]), min(row[3], old[3])]
            del admin  # its connections end before the broker does
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    base = best["PLAINTEXT"]
    print(f"{args.records} records of {SIZE} B, one partition, acks=all; broker CPU in s per GB")
    print(f"{'listener':<10} {'produce MB/s':>13} {'ratio':>6} {'consume MB/s':>13} {'ratio':>6} "
          f"{'CPU/GB prod':>12} {'CPU/GB cons':>12}")
    for name, (p, c, cp, cc) in best.items():
        print(f"{name:<10} {p:>13.1f} {p / base[0]:>6.2f} {c:>13.1f} {c / base[1]:>6.2f} {cp:>12.2f} {cc:>12.2f}")
    print("goal: produce >= 0.70x, consume >= 0.50x of PLAINTEXT")


if __name__ == "__main__":
    main()

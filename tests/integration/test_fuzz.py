"""Fuzz a real ``tidelog serve`` with random and mutated frames over many connections.

Valid requests of several APIs and versions (built by ``tidelog.protocol.codec``) are mutated: bytes flipped or
overwritten with boundary values, truncated, duplicated, spliced, given random or lying size prefixes, or
replaced by pure noise. A few thousand frames go out over many connections (several at once), bounded to ~30 s.
Afterwards the broker process is alive, answers ApiVersions, serves a produce/consume round trip, and its RSS
grew by less than 64 MiB.

The random seed is fixed (override with TIDELOG_FUZZ_SEED) and printed, so a failure reproduces.
The broker runs with auto-creation off and without admin APIs in the corpus: a mutated CreateTopics could
legitimately ask for millions of partitions, which is a quota question, not a parsing one.
"""

from __future__ import annotations

import os
import random
from typing import Any

import helpers as h
import pytest
from fuzzing import corpus, run_fuzz

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("TIDELOG_FUZZ_SEED", "1337"))
FRAMES = 15000
TIME_BUDGET = 30.0
RSS_LIMIT_KIB = 64 * 1024


def test_fuzz_frames_leave_the_broker_healthy(broker_factory: Any) -> None:
    print(f"fuzz seed {SEED} (set TIDELOG_FUZZ_SEED to reproduce)")
    b = broker_factory({"auto.create.topics.enable": "false", "socket.request.max.bytes": str(1 << 20),
                        "connections.max.idle.ms": "2000"})
    topic = h.new_topic("fuzz")
    with h.RawClient(b.port) as c:
        assert h.create_topic_raw(c, topic)["error_code"] == 0
    frames_corpus = corpus(topic)
    # warm the broker up with one pass of valid traffic, so lazily compiled codecs are not counted as growth
    with h.RawClient(b.port) as c:
        for frame in frames_corpus:
            c.send(frame)
            c.recv_frame()
    assert b.proc is not None
    rss_before = h.rss_kib(b.proc.pid)

    sent, closed, answered = run_fuzz(b.port, frames_corpus, random.Random(SEED), FRAMES, TIME_BUDGET)
    assert sent >= 1000, f"only {sent} frames in the time budget"
    assert answered >= 50 and closed >= 50, "the corpus should produce both answers and closed connections"

    assert b.running, f"broker died:\n{b.log_text()[-3000:]}"
    assert h.api_versions_ok(b.port)
    # a produce/consume round trip with a real client
    leo = h.log_end_offset(b.port, topic)
    delivered = h.confluent_produce(b.bootstrap, topic, [{"value": b"after-fuzz-%d" % i} for i in range(10)],
                                    acks="all")
    assert [m.offset() for m in delivered] == list(range(leo, leo + 10))
    got = h.confluent_consume(b.bootstrap, topic, 10, offset=leo)
    assert [m.value() for m in got] == [b"after-fuzz-%d" % i for i in range(10)]
    rss_after = h.rss_kib(b.proc.pid)
    print(f"fuzz: RSS {rss_before} KiB -> {rss_after} KiB")
    assert rss_after - rss_before < RSS_LIMIT_KIB
    # a request that decoded must be answered (or refused) by its handler, never crash it
    crashes = [ln for ln in b.log_text().splitlines() if "handler failed" in ln or "connection failed" in ln]
    assert crashes == [], "\n".join(crashes[:10])

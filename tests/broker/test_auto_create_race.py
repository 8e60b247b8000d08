"""Metadata requests racing to auto-create the same topic (issue 25 item 2): the loser of the race must not answer
TOPIC_ALREADY_EXISTS (36), which no Kafka broker returns inside Metadata (Kafka's KafkaApis takes the lost race as
success and answers LEADER_NOT_AVAILABLE until the topic is ready). The Spark sink writing to a topic that did
not exist yet failed on it. A real ``tidelog serve``, many connections sending their Metadata at once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from helpers import racing_metadata

pytestmark = pytest.mark.integration

NONE, LEADER_NOT_AVAILABLE, TOPIC_ALREADY_EXISTS = 0, 5, 36


def test_concurrent_auto_creation_never_answers_topic_already_exists(broker_factory: Any) -> None:
    b = broker_factory({"num.partitions": "4"})
    for _ in range(8):
        topic = f"race-{uuid.uuid4().hex[:8]}"
        topics = racing_metadata(b.port, topic, clients=12)
        codes = sorted({t["error_code"] for t in topics})
        assert TOPIC_ALREADY_EXISTS not in codes, topics
        assert set(codes) <= {NONE, LEADER_NOT_AVAILABLE}, topics
        # one node: the topic is ready once created, so every answer names its partitions
        assert all(len(t["partitions"]) == 4 for t in topics if t["error_code"] == NONE)

"""Which ``__consumer_offsets`` partition holds a group: Kafka's ``Utils.abs(groupId.hashCode()) % n``.

tidelog used ``hashCode & 0x7fffffff`` before (the producer partitioner's ``Utils.toPositive``), which differs for
every negative hash.
"""

from __future__ import annotations

import pytest

from tidelog.broker.group.records import (
    java_string_hash,
    legacy_partition_for,
    partition_for,
)

N = 50  # Kafka's default offsets.topic.num.partitions


# ------------------------------------------------------------------------------------------- the rule


def test_known_kafka_placements() -> None:
    # "my-group": hashCode -1906497762; Kafka puts it in __consumer_offsets-12 (tidelog used to say 36)
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", N) == 12
    assert legacy_partition_for("my-group", N) == 36
    assert partition_for("kafka-txn-0", N) == 30  # same rule as the transaction coordinator's, known value


def test_hash_of_integer_min_value_goes_to_partition_zero() -> None:
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", N) == 0
    assert partition_for("polygenelubricants", 7) == 0  # Utils.abs maps it to 0, whatever n


@pytest.mark.parametrize("group", ["test-group", "console-consumer-1"])
def test_positive_hash_unchanged(group: str) -> None:
    h = java_string_hash(group)
    assert h > 0
    assert partition_for(group, N) == h % N == legacy_partition_for(group, N)


def test_negative_hash_is_math_abs() -> None:
    for group in ("my-group", "g-positive", "kafka-txn-0"):
        h = java_string_hash(group)
        assert h < 0
        assert partition_for(group, N) == (-h) % N

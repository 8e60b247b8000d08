"""Error-code table and api keys (framing: tests/protocol/test_framing.py)."""

from __future__ import annotations

import inspect

import kafka.errors
import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import (
    ERRORS,
    ERRORS_BY_CODE,
    ERRORS_BY_NAME,
    KafkaErrorCode,
    error_code,
    error_for_code,
)
from tidelog.protocol.schema import spec_index

# kafka-python spells a few names its own way; the codes are what matter on the wire.
KP_NAME = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


def test_brief_codes() -> None:
    expect = {
        "NONE": 0, "UNKNOWN_SERVER_ERROR": -1, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3, "INVALID_FETCH_SIZE": 4, "LEADER_NOT_AVAILABLE": 5,
        "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7, "MESSAGE_TOO_LARGE": 10,
        "INVALID_TOPIC_EXCEPTION": 17, "RECORD_LIST_TOO_LARGE": 18, "NOT_ENOUGH_REPLICAS": 19,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "INVALID_REQUIRED_ACKS": 21, "UNSUPPORTED_VERSION": 35,
        "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38,
        "INVALID_CONFIG": 40, "INVALID_REQUEST": 42, "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
        "POLICY_VIOLATION": 44, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "DUPLICATE_SEQUENCE_NUMBER": 46,
        "INVALID_PRODUCER_EPOCH": 47, "KAFKA_STORAGE_ERROR": 56, "UNKNOWN_PRODUCER_ID": 59,
        "FENCED_LEADER_EPOCH": 74, "UNSUPPORTED_COMPRESSION_TYPE": 76, "INVALID_RECORD": 87,
        "UNKNOWN_TOPIC_ID": 100, "TRANSACTION_ABORTABLE": 120,
    }
    for name, code in expect.items():
        assert error_code(name) == code == ERRORS_BY_NAME[name].code == KafkaErrorCode[name]
    assert ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"].retriable
    assert not ERRORS_BY_NAME["INVALID_RECORD"].retriable


def test_table_is_contiguous_and_unique() -> None:
    codes = [e.code for e in ERRORS]
    assert codes == list(range(-1, 134))
    assert len(ERRORS_BY_NAME) == len(ERRORS) == len(ERRORS_BY_CODE)
    assert error_for_code(9999).name == "UNKNOWN_SERVER_ERROR"
    with pytest.raises(KeyError):
        error_code("NO_SUCH_ERROR")


def test_agrees_with_kafka_python() -> None:
    kp = {}
    for _, cls in inspect.getmembers(kafka.errors, inspect.isclass):
        if issubclass(cls, kafka.errors.BrokerResponseError) and getattr(cls, "errno", None) is not None:
            kp[cls.errno] = cls
    assert len(kp) > 120
    for code, cls in kp.items():
        ours = ERRORS_BY_CODE[code]
        assert KP_NAME.get(ours.name, ours.name) == cls.message, code
        if code != 2:  # Kafka's CorruptRecordException is a RetriableException; kafka-python says no
            assert ours.retriable == cls.retriable, ours.name


def test_api_keys_match_specs() -> None:
    names = {ApiKey.OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch"}
    for (key, kind), spec in spec_index().items():
        if kind != "request":
            continue
        camel = "".join(p.title() for p in ApiKey(key).name.split("_"))
        assert spec.name == names.get(ApiKey(key), camel) + "Request"

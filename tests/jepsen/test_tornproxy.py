"""tornproxy's frame parsing against frames encoded by tidelog's codec (pure, < 1 s): the transactional id and the
EndTxn fields of every EndTxn version (v0-2 classic, v3+ flexible), the transactional id of Produce v3-v13, and
the error code (and v5's epoch) of EndTxn answers; other requests are not parsed."""

from __future__ import annotations

import pytest
from tornproxy import END_TXN, PRODUCE, parse_request, response_error

from tidelog.protocol import codec


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_end_txn_request(version: int) -> None:
    from tornproxy import end_txn_fields

    frame = codec.encode_request(END_TXN, version, 77, "rdkafka", {
        "transactional_id": "jt-tx-1", "producer_id": 1000, "producer_epoch": 57, "committed": True})
    key, v, corr, tid, _, at = parse_request(frame)  # type: ignore[misc]
    assert (key, v, corr, tid) == (END_TXN, version, 77, "jt-tx-1")
    assert end_txn_fields(frame, at) == (1000, 57, True)


@pytest.mark.parametrize("version", [3, 8, 9, 10, 11, 12, 13])
def test_produce_request_transactional_id(version: int) -> None:
    body = {"transactional_id": "jt-tx-0", "acks": -1, "timeout_ms": 1000, "topic_data": []}
    got = parse_request(codec.encode_request(PRODUCE, version, 5, None, body))
    assert got is not None and got[:4] == (PRODUCE, version, 5, "jt-tx-0")
    body["transactional_id"] = None
    got = parse_request(codec.encode_request(PRODUCE, version, 6, None, body))
    assert got is not None and got[3] is None


def test_other_requests_are_not_parsed() -> None:
    assert parse_request(codec.encode_request(18, 3, 1, "x", {"client_software_name": "a",
                                                               "client_software_version": "1"})) is None
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1, "topic_data": []}
    assert parse_request(codec.encode_request(PRODUCE, 2, 1, "x", {k: v for k, v in body.items()
                                                                   if k != "transactional_id"})) is None


@pytest.mark.parametrize("version,error", [(1, 0), (4, 48), (5, 90)])
def test_end_txn_answer_error(version: int, error: int) -> None:
    body = {"throttle_time_ms": 0, "error_code": error, "producer_id": 1000, "producer_epoch": 58}
    frame = b"".join(bytes(c) for c in codec.encode_response(END_TXN, version, 9, body))
    if frame[:4] != len(frame[4:]).to_bytes(4, "big"):  # encode_response may leave the size prefix out
        frame = len(frame).to_bytes(4, "big") + frame
    assert response_error(frame, END_TXN, version) == error

"""The replica fetcher's error codes are Kafka's (a wrong literal once made UNKNOWN_LEADER_EPOCH, 75, read as 76 =
UNSUPPORTED_COMPRESSION_TYPE, so a follower waited the full replica.fetch.backoff.ms after every failover)."""

from __future__ import annotations

from tidelog.cluster import fetcher
from tidelog.protocol.errors import error_for_code


def test_fetcher_codes_are_kafkas() -> None:
    assert error_for_code(fetcher.UNKNOWN_LEADER_EPOCH).name == "UNKNOWN_LEADER_EPOCH"
    assert error_for_code(fetcher.NOT_LEADER_OR_FOLLOWER).name == "NOT_LEADER_OR_FOLLOWER"
    assert error_for_code(fetcher.OFFSET_OUT_OF_RANGE).name == "OFFSET_OUT_OF_RANGE"
    # the answers after which a follower retries within ~10 ms: the leader has not seen the new term yet
    assert {error_for_code(c).name for c in fetcher._LEADER_BEHIND} == {"NOT_LEADER_OR_FOLLOWER",
                                                                       "UNKNOWN_LEADER_EPOCH"}

"""RENEW (KIP-1222) and the record-limit acquire mode (KIP-1206) in the share-partition state machine on its own
(broker/group/share_partition.py), the v2 request checks (broker/group/share_renew.py) and the group config
``share.renew.acknowledge.enable`` (broker/group_configs.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tidelog.broker.group import share_renew
from tidelog.broker.group.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    AVAILABLE,
    RELEASE,
    RENEW,
    AckError,
    SharePartition,
)
from tidelog.broker.group_configs import GroupConfigError, GroupConfigs
from tidelog.errors import ErrorCode


def _sp() -> SharePartition:
    return SharePartition(0, lock_ms=1000, delivery_limit=3, max_locks=100)


def _refused(call: Callable[[], None]) -> ErrorCode:
    with pytest.raises(AckError) as e:
        call()
    return e.value.name


def test_renew_extends_the_lock_of_its_holder_only() -> None:
    sp = _sp()
    assert sp.acquire("a", [(0, 4, False)], 10, 0.0, 5) == [(0, 4, 1)]
    sp.acknowledge("a", 0, 1, [RENEW], renew_until=1.8)  # at t=0.8, a 1 s lock
    assert sp.expire(1.5) == 3  # 2-4 lapse at their first deadline (1.0); 0-1 were renewed
    assert sp.state_of(0) == (ACQUIRED, 1) and sp.state_of(2) == (AVAILABLE, 1)
    assert _refused(lambda: sp.acknowledge("b", 0, 0, [RENEW], renew_until=9.0)) == ErrorCode.INVALID_RECORD_STATE
    assert _refused(lambda: sp.acknowledge("a", 2, 2, [RENEW], renew_until=9.0)) == ErrorCode.INVALID_RECORD_STATE
    assert sp.expire(1.9) == 2  # the renewed lock lapses too: available with the same count
    assert sp.acquire("b", [(0, 4, False)], 10, 2.0, 5) == [(0, 1, 2), (2, 4, 2)]  # a second delivery, not a third


def test_renew_mixed_per_offset_and_disabled() -> None:
    sp = _sp()
    sp.acquire("a", [(0, 2, False)], 10, 0.0, 3)
    # a group refusing renewals: the whole batch is refused, nothing applies
    assert _refused(lambda: sp.acknowledge("a", 0, 2, [RENEW, ACCEPT, RELEASE])) == ErrorCode.INVALID_RECORD_STATE
    assert [sp.state_of(o) for o in range(3)] == [(ACQUIRED, 1)] * 3
    sp.acknowledge("a", 0, 2, [RENEW, ACCEPT, RELEASE], renew_until=5.0)
    assert [sp.state_of(o) for o in range(3)] == [(ACQUIRED, 1), (ACKNOWLEDGED, 1), (AVAILABLE, 1)]
    assert sp.expire(4.0) == 0 and sp.expire(5.0) == 1
    assert _refused(lambda: sp.acknowledge("a", 0, 0, [5], renew_until=9.0)) == ErrorCode.INVALID_REQUEST


def test_record_limit_splits_a_batch() -> None:
    sp = _sp()
    assert sp.acquire("a", [(0, 9, False)], 3, 0.0, 10, record_limit=True) == [(0, 2, 1)]
    assert sp.speo == 3
    assert sp.acquire("a", [(0, 9, False)], 3, 0.0, 10, record_limit=True) == [(3, 5, 1)]
    assert sp.acquire("a", [(0, 9, False)], 3, 0.0, 10) == [(6, 9, 1)]  # batch-optimized: the rest of the batch


def test_v2_request_checks() -> None:
    zero = {"max_bytes": 0, "min_bytes": 0, "max_records": 0, "max_wait_ms": 0}
    assert share_renew.fetch_refusal(2, {**zero, "is_renew_ack": True}) is None
    for key in zero:
        refused = share_renew.fetch_refusal(2, {**zero, key: 1, "is_renew_ack": True})
        assert refused is not None and refused[0] == ErrorCode.INVALID_REQUEST, key
    assert share_renew.fetch_refusal(2, {"share_acquire_mode": 2}) is not None
    assert share_renew.fetch_refusal(1, {"share_acquire_mode": 2, "is_renew_ack": True, "max_records": 5}) is None
    assert share_renew.record_limit(2, {"share_acquire_mode": 1}) and not share_renew.record_limit(1, {})
    batches = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [RENEW]}]
    assert share_renew.batches_refusal(1, batches) is not None and share_renew.batches_refusal(2, batches) is None


class _Store:
    def __init__(self) -> None:
        self.groups: dict[str, dict[str, str]] = {}

    def read(self) -> dict[str, dict[str, str]]:
        return dict(self.groups)

    def write(self, group: str, configs: dict[str, str]) -> None:
        self.groups[group] = dict(configs)

    def watch(self, on_change: Callable[[str, dict[str, str]], None]) -> None:
        pass


def test_group_config_share_renew_acknowledge_enable() -> None:
    gc = GroupConfigs({}, _Store())
    assert gc.defaults()["share.renew.acknowledge.enable"] == "true"
    assert gc.effective("g").share_renew_acknowledge_enable is True
    assert share_renew.renew_enabled(gc, "g") and share_renew.renew_enabled(None, "g")
    for bad in ("1", "yes", ""):
        with pytest.raises(GroupConfigError) as e:
            gc.alter("g", {"share.renew.acknowledge.enable": bad})
        assert "Expected value to be either true or false" in e.value.message
    gc.alter("g", {"share.renew.acknowledge.enable": " False "})
    assert gc.effective("g").share_renew_acknowledge_enable is False
    assert share_renew.renew_until(gc, "g", 1000, 0.0) is None
    assert share_renew.renew_until(gc, "other", 1000, 2.0) == 3.0

"""InitProducerId handler, in process, through the real codec (every supported version)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tidelog.broker.producer_ids import PRODUCER_ID_BLOCK_FILE
from tidelog.protocol import codec
from tidelog.protocol.api_keys import ApiKey

# the in-process harness lives in test_admin_handlers.py (pytest runs in importlib mode: load it by path)
_spec = importlib.util.spec_from_file_location(
    "tidelog_test_admin_harness", Path(__file__).with_name("test_admin_handlers.py")
)
assert _spec is not None and _spec.loader is not None
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
Harness, err, run_broker = _harness.Harness, _harness.err, _harness.run_broker

INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID


def _body(version: int, txn: str | None = None, pid: int = -1, epoch: int = -1) -> dict:
    body: dict = {"transactional_id": txn, "transaction_timeout_ms": 60000}
    if version >= 3:
        body.update(producer_id=pid, producer_epoch=epoch)
    return body


def test_new_ids_every_version(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        lo, hi = codec.SUPPORTED_VERSIONS[INIT_PRODUCER_ID]
        seen = set()
        for v in range(lo, hi + 1):
            for _ in range(3):
                r = await h.call(INIT_PRODUCER_ID, v, _body(v))
                assert r["error_code"] == 0
                assert r["producer_epoch"] == 0
                assert r["producer_id"] >= 0 and r["producer_id"] not in seen
                seen.add(r["producer_id"])
        assert (tmp_path / "data" / PRODUCER_ID_BLOCK_FILE).exists()

    run_broker(tmp_path, scenario)


def test_epoch_bump(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        first = await h.call(INIT_PRODUCER_ID, 4, _body(4))
        pid = first["producer_id"]
        bumped = await h.call(INIT_PRODUCER_ID, 4, _body(4, pid=pid, epoch=0))
        assert (bumped["error_code"], bumped["producer_id"], bumped["producer_epoch"]) == (0, pid, 1)
        bumped = await h.call(INIT_PRODUCER_ID, 3, _body(3, pid=pid, epoch=1))
        assert (bumped["producer_id"], bumped["producer_epoch"]) == (pid, 2)
        # a stale epoch, or an id this broker never issued, gets a fresh producer id
        stale = await h.call(INIT_PRODUCER_ID, 4, _body(4, pid=pid, epoch=0))
        assert stale["error_code"] == 0 and stale["producer_id"] != pid and stale["producer_epoch"] == 0
        unknown = await h.call(INIT_PRODUCER_ID, 4, _body(4, pid=10**12, epoch=0))
        assert unknown["error_code"] == 0 and unknown["producer_id"] < 10**12 and unknown["producer_epoch"] == 0
        # both or neither of producer id and epoch
        half = await h.call(INIT_PRODUCER_ID, 4, _body(4, pid=pid, epoch=-1))
        assert half["error_code"] == err("INVALID_REQUEST")

    run_broker(tmp_path, scenario)


def test_transactional_id_goes_to_the_transaction_coordinator(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        pids = set()
        for epoch, v in enumerate((0, 2, 4)):
            r = await h.call(INIT_PRODUCER_ID, v, _body(v, txn="my-txn"))
            assert (r["error_code"], r["producer_epoch"]) == (0, epoch)  # same id, the epoch bumped each time
            pids.add(r["producer_id"])
        assert len(pids) == 1 and pids.pop() >= 0

    run_broker(tmp_path, scenario)


def test_ids_unique_across_in_process_restarts(tmp_path: Path) -> None:
    got: list[int] = []

    async def scenario(h: Harness) -> None:
        for _ in range(5):
            got.append((await h.call(INIT_PRODUCER_ID, 1, _body(1)))["producer_id"])

    for _ in range(3):
        run_broker(tmp_path, scenario)
    assert len(set(got)) == 15

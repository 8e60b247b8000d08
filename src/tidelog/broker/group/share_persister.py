"""The share-partition leader's side of share-state persistence (Kafka's ``DefaultStatePersister``): Read, Initialize
and Write of one share partition's state at its share coordinator, the leader of the ``__share_group_state``
partition its coordinator key hashes to: this broker's :class:`ShareCoordinator` directly when it leads that
partition, else the other broker over the inter-broker channel (ZooKeeper mode's ``broker_request``) with the
ReadShareGroupState / InitializeShareGroupState / WriteShareGroupState / ReadShareGroupStateSummary requests
(84 / 83 / 85 / 87, v0).

Retriable answers (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, an unreachable broker)
are retried with a short backoff until ``share.coordinator.write.timeout.ms`` has passed; the last error is then
returned to the caller, which answers its client with it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from tidelog.broker.group.share_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NONE,
    NOT_COORDINATOR,
    REQUEST_TIMED_OUT,
    ShareCoordinator,
)
from tidelog.broker.group.share_state_records import STATE_TOPIC, ShareKey, ShareState, StateBatch

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
RETRIABLE = (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT)
BACKOFF_S = 0.1


def share_coordinator(broker: Broker) -> ShareCoordinator:
    """The broker's share coordinator (made by the broker at start; made here for brokers built without it)."""
    coord = broker.share_coordinator
    if coord is None:
        coord = broker.share_coordinator = ShareCoordinator(broker)
    return coord


def _partition_result(resp: dict[str, Any]) -> dict[str, Any]:
    return resp["results"][0]["partitions"][0]


class SharePersister:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.coordinator = share_coordinator(broker)
        self.timeout_s = self.coordinator.write_timeout_ms / 1000.0
        self.remote_calls = 0  # requests sent to another broker's share coordinator (tests)

    async def _leader(self, key: ShareKey) -> int | None:
        """The node id of the key's share coordinator (None: no topic or no leader yet)."""
        info = await self.coordinator.state_topic()
        if info is None:
            return None
        p = self.coordinator.partition_of(key)
        if p in self.coordinator.owned:
            return int(self.broker.node_id)
        md = self.broker.partition_metadata(STATE_TOPIC, p)
        leader = md.get("leader_id", -1) if md else -1
        return int(leader) if leader is not None and leader >= 0 else None

    async def _call(self, key: ShareKey, local: Any, api_key: int, partition: dict[str, Any]) -> dict[str, Any]:
        """One operation, retried while retriable: ``local()`` on this broker's coordinator, else the request."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            leader = await self._leader(key)
            if leader is None:
                result: dict[str, Any] = {"error_code": COORDINATOR_NOT_AVAILABLE, "error_message": None}
            elif leader == int(self.broker.node_id):
                result = await local()
            else:
                body = {"group_id": key.group, "topics": [{"topic_id": key.topic_id, "partitions": [partition]}]}
                try:
                    self.remote_calls += 1
                    resp = await self.broker.replica_manager.broker_request(leader, api_key, 0, body,
                                                                            timeout=self.timeout_s)
                    result = _partition_result(resp)
                except Exception as exc:  # unreachable, timed out, malformed: retried as the coordinator moving
                    result = {"error_code": COORDINATOR_NOT_AVAILABLE, "error_message": repr(exc)}
            code = int(result.get("error_code") or 0)
            if code not in RETRIABLE or time.monotonic() + BACKOFF_S > deadline or self.broker.stopping:
                return result
            await asyncio.sleep(BACKOFF_S)  # the coordinator moves or loads: asked again shortly

    async def read(self, key: ShareKey, leader_epoch: int) -> tuple[int, str | None, ShareState | None]:
        async def local() -> dict[str, Any]:
            err, msg, st = await self.coordinator.read(key, leader_epoch)
            return {"error_code": err, "error_message": msg, "state": st}

        r = await self._call(key, local, READ, {"partition": key.partition, "leader_epoch": leader_epoch})
        err = int(r.get("error_code") or 0)
        if err:
            return err, r.get("error_message"), None
        st = r.get("state")
        if st is None:  # a remote answer
            st = ShareState(state_epoch=int(r["state_epoch"]), start_offset=int(r["start_offset"]),
                            batches=[(int(b["first_offset"]), int(b["last_offset"]), int(b["delivery_state"]),
                                      int(b["delivery_count"])) for b in r.get("state_batches") or ()])
        return NONE, None, st

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> tuple[int, str | None]:
        async def local() -> dict[str, Any]:
            err, msg = await self.coordinator.initialize(key, state_epoch, start_offset)
            return {"error_code": err, "error_message": msg}

        r = await self._call(key, local, INITIALIZE, {"partition": key.partition, "state_epoch": state_epoch,
                                                       "start_offset": start_offset})
        return int(r.get("error_code") or 0), r.get("error_message")

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> tuple[int, str | None]:
        async def local() -> dict[str, Any]:
            err, msg = await self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches)
            return {"error_code": err, "error_message": msg}

        part = {"partition": key.partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
                "start_offset": start_offset,
                "state_batches": [{"first_offset": a, "last_offset": b, "delivery_state": s, "delivery_count": c}
                                  for a, b, s, c in batches]}
        r = await self._call(key, local, WRITE, part)
        return int(r.get("error_code") or 0), r.get("error_message")

    async def summary(self, key: ShareKey) -> tuple[int, int]:
        """(error, start offset) of ReadShareGroupStateSummary: -1 for a share partition never initialized."""
        async def local() -> dict[str, Any]:
            err, msg, st = self.coordinator.summary(key)
            return {"error_code": err, "error_message": msg, "start_offset": st.start_offset if st else -1}

        r = await self._call(key, local, SUMMARY, {"partition": key.partition, "leader_epoch": -1})
        return int(r.get("error_code") or 0), int(r.get("start_offset", -1))

    async def summary_epoch(self, key: ShareKey) -> tuple[int, int]:
        """(error, state epoch) of ReadShareGroupStateSummary (0 for a share partition never initialized)."""
        async def local() -> dict[str, Any]:
            err, msg, st = self.coordinator.summary(key)
            return {"error_code": err, "error_message": msg, "state_epoch": st.state_epoch if st else 0}

        r = await self._call(key, local, SUMMARY, {"partition": key.partition, "leader_epoch": -1})
        return int(r.get("error_code") or 0), int(r.get("state_epoch", 0))

    async def delete(self, key: ShareKey) -> tuple[int, str | None]:
        async def local() -> dict[str, Any]:
            err, msg = await self.coordinator.delete(key)
            return {"error_code": err, "error_message": msg}

        r = await self._call(key, local, DELETE, {"partition": key.partition})
        return int(r.get("error_code") or 0), r.get("error_message")

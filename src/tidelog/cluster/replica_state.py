"""The state ZooKeeper mode's replica manager keeps, shared by the rooms it is split into (issue 26 item 2):
:mod:`zk_session` (the ZooKeeper session and this broker's registration), :mod:`zk_watches` (what the watches
deliver, handed to the loop), :mod:`metadata_cache` (live brokers, controller, what Metadata answers), :mod:`isr`
(the leader side: follower progress, high watermark, ISR changes), :mod:`controlled_shutdown`, and
:mod:`replica_manager` itself (construction, lifecycle, role changes, the follower side's truncation).

Each room is a class over :class:`ZkReplicaState`; ``ZkReplicaManager`` is their union. The methods one room calls
in another are declared here for the type checker only, with the signature the owning room defines.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog.broker.leadership import LeadershipChanges
from tidelog.cluster import zkdata as zd
from tidelog.cluster.broker_channel import BrokerChannel

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.cluster.fetcher import ReplicaFetcherManager
    from tidelog.cluster.topics import ZkTopicBackend


@dataclass(slots=True)
class Replica:
    """This broker's view of one partition it hosts."""

    tp: tuple[str, int]
    log: Any
    replicas: list[int]
    leader: int = zd.NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = -1
    is_leader: bool = False
    leader_since: float = 0.0
    epoch_start_offset: int = 0
    follower_leo: dict[int, int] = field(default_factory=dict)
    last_caught_up: dict[int, float] = field(default_factory=dict)
    last_fetch_leo: dict[int, int] = field(default_factory=dict)
    last_fetch_time: dict[int, float] = field(default_factory=dict)
    isr_update_pending: bool = False
    pending_isr: tuple[int, ...] = ()  # an ISR change sent to ZooKeeper and not yet answered


class ZkReplicaState:
    """The attributes ``ZkReplicaManager.__init__`` sets (see there for what each means)."""

    broker: Broker
    leadership: LeadershipChanges
    config: Any
    node_id: int
    topic_backend: ZkTopicBackend
    zk_connect: str
    session_timeout_s: float
    lag_max_s: float
    fetchers: ReplicaFetcherManager
    unclean: bool
    zk: Any
    controller: Any
    live: dict[int, zd.BrokerInfo]
    _departed: dict[int, tuple[zd.BrokerInfo, float]]
    departed_broker_s: float
    close_previous_session: Any
    controller_node: int
    assignments: dict[str, zd.TopicAssignment]
    states: dict[tuple[str, int], zd.LeaderIsr]
    replicas: dict[tuple[str, int], Replica]
    _session_lost: bool
    _offline_replicas: set[tuple[str, int]]
    _offline_lock: threading.Lock
    _watched_topics: set[str]
    _watched_states: set[tuple[str, int]]
    _live_changed: asyncio.Event
    _loop: asyncio.AbstractEventLoop | None
    controlled_shutdown_retries: Any
    controlled_shutdown_backoff_s: float
    request_timeout_s: float
    _shutting_down: bool
    _state_seen: asyncio.Event
    _registration_zxid: float
    _state_zxid: dict[tuple[str, int], int]
    _last_config_change: int
    channel: BrokerChannel

    if TYPE_CHECKING:  # defined by the rooms named
        @property
        def stopping(self) -> bool: ...  # replica_manager

        def leader_log(self, topic: str, partition: int) -> Any: ...  # replica_manager

        def isr(self, topic: str, partition: int) -> tuple[int, ...]: ...  # replica_manager

        def _resign_all(self) -> None: ...  # replica_manager

        def _on_topic_deleted(self, topic: str) -> None: ...  # replica_manager

        def _on_assignment(self, topic: str, a: zd.TopicAssignment, config: dict[str, str],
                           config_version: int) -> None: ...  # replica_manager

        def _on_state(self, tp: tuple[str, int], s: zd.LeaderIsr, mzxid: int = 0) -> None: ...  # replica_manager

        def post(self, fn: Any, *args: Any) -> None: ...  # zk_session

        def _register(self) -> None: ...  # zk_session

        def _zookeeper_gone(self) -> str | None: ...  # zk_session

        async def _close_session(self, zk: Any) -> None: ...  # zk_session

        def _brokers_changed(self, children: list[str]) -> bool | None: ...  # zk_watches

        def _controller_moved(self, data: Any, _stat: Any) -> bool | None: ...  # zk_watches

        def _topics_changed(self, children: list[str]) -> bool | None: ...  # zk_watches

        def _config_changes(self, children: list[str]) -> bool | None: ...  # zk_watches

        def _set_live(self, live: dict[int, zd.BrokerInfo]) -> None: ...  # metadata_cache

        def _leader_progress(self, r: Replica, isr_changed: bool = True) -> None: ...  # isr

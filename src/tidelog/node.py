"""The composition root: the one place that decides which parts make up a broker, and runs it.

``build_broker(config)`` assembles a :class:`~tidelog.broker.broker.Broker` for the config's mode: alone (no
``zookeeper.connect``; the broker's own :class:`~tidelog.broker.replica_manager.LocalReplicaManager`) or in a
ZooKeeper cluster (:class:`~tidelog.cluster.replica_manager.ZkReplicaManager`, which brings the ZooKeeper
topic store, producer-id blocks, replica fetchers, the controller and the cluster-only APIs). ``broker`` never
imports ``cluster`` (``tests/test_layers.py``) and is mode-blind: the group and transaction coordinators follow the
partition leadership the replica manager announces (:class:`~tidelog.broker.leadership.LeadershipChanges`, made
here and given to it). This module imports ``cluster`` (and with it ``kazoo``) at module
level, so a single-node ``tidelog serve`` loads them too, without ever connecting to ZooKeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Callable

from tidelog.broker.broker import Broker
from tidelog.broker.config import BrokerConfig
from tidelog.broker.leadership import LeadershipChanges
from tidelog.broker.replica_manager import LocalReplicaManager, ReplicaManager
from tidelog.broker.server import install_event_loop_policy
from tidelog.broker.txn.coordinator import TransactionCoordinator
from tidelog.cluster.replica_manager import ZkReplicaManager
from tidelog.protocol.schema import spec_index
from tidelog.storage.progress import RecoveryProgress

log = logging.getLogger("tidelog.node")


def build_broker(config: BrokerConfig, recovery_progress: RecoveryProgress | None = None) -> Broker:
    """The broker of ``config``'s mode; the transaction coordinator is the same part in both (it follows the
    replica manager's leadership of ``__transaction_state`` in ZooKeeper mode). ``recovery_progress`` shows a
    long log recovery (``tidelog serve`` on a terminal: a progress bar)."""
    leadership = LeadershipChanges()  # the replica manager announces, the coordinators listen

    def replica_manager(broker: Broker) -> ReplicaManager:  # called by the broker's constructor, given itself
        if config.get("zookeeper.connect"):
            return ZkReplicaManager(config, broker, leadership)
        return LocalReplicaManager(broker, leadership)

    return Broker(config, replica_manager, txn_coordinator=TransactionCoordinator, recovery_progress=recovery_progress)


async def serve(
    config: BrokerConfig,
    *,
    ready: asyncio.Event | None = None,
    on_started: Callable[[Broker], None] | None = None,
    before_start: Callable[[], None] | None = None,
    recovery_progress: RecoveryProgress | None = None,
) -> None:
    """Run a broker until SIGTERM/SIGINT (Ctrl-C), then shut down gracefully. ``before_start`` is called once the
    broker is built, before it loads its logs and binds (:func:`run`: :func:`settle_heap`); ``on_started`` once
    the listener is bound (``tidelog serve`` prints how to reach the broker)."""
    broker = build_broker(config, recovery_progress)
    if before_start is not None:
        before_start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except BaseException:
        # a start that failed half-way (ZooKeeper lost mid-start, a cluster id that does not match...) must leave
        # nothing behind: no ZooKeeper session whose watches re-register the broker, no threads keeping the process
        # alive (seen: a broker registered in ZooKeeper that served nothing). Kafka: "Fatal error during
        # KafkaServer startup. Prepare to shutdown", then shutdown() and exit.
        log.warning("broker start failed: shutting down what was started")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(broker.shutdown(), 30)
        raise
    if on_started is not None:
        on_started(broker)
    if ready is not None:
        ready.set()
    await stop.wait()
    await broker.shutdown()


def settle_heap() -> None:
    """Before a broker process loads its logs: load what the first request would otherwise load on the event loop
    (the protocol spec index, ~15 ms), collect, and move every object alive now into the permanent generation
    (``gc.freeze``). That heap (modules, protocol specs, config: ~42 k objects, nearly all a broker without
    thousands of partitions ever holds) lives as long as the process and is no longer walked by the cyclic
    collector: without this a full (generation 2) collection, which comes every 10-20 s under a steady request
    rate, walked all of it on the loop thread, 20-60 ms in which no request was answered (the p99 of a paced
    producer). What is made later (partition logs, connections, groups) is collected as before, so a deleted
    topic's objects are still reclaimed. For the process that owns the interpreter (:func:`run`), not for a
    broker started inside another program."""
    spec_index()
    gc.collect()
    gc.freeze()


def run(
    config: BrokerConfig,
    *,
    use_uvloop: bool | None = None,
    on_started: Callable[[Broker], None] | None = None,
    recovery_progress: RecoveryProgress | None = None,
) -> None:
    if use_uvloop is None:
        use_uvloop = os.environ.get("TIDELOG_LOOP", "uvloop") != "asyncio"
    install_event_loop_policy(use_uvloop)
    asyncio.run(serve(config, on_started=on_started, before_start=settle_heap, recovery_progress=recovery_progress))

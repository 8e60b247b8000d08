"""Two ``tidelog serve`` brokers on one real ZooKeeper (replication factor 1 everywhere), for tests of state that
ZooKeeper mode keeps in ZooKeeper (SCRAM credentials, ACLs, client quotas): ``zk_broker_pair(broker_factory,
props, prefix)`` yields ``(zookeeper, [broker1, broker2])`` and stops them all at the end (the brokers first, while
ZooKeeper still answers, so their controlled shutdown is quick). Skips when ZooKeeper or kazoo is missing."""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_CLUSTER_CONFTEST = Path(__file__).resolve().parents[1] / "cluster" / "conftest.py"


def cluster_support() -> Any:
    spec = importlib.util.spec_from_file_location("tidelog_test_zkpair_cluster", _CLUSTER_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zk_broker_pair(broker_factory: Any, props: dict[str, str], prefix: str,
                   ready: Callable[[Any], None] | None = None) -> Iterator[tuple[Any, list[Any]]]:
    """``ready(broker)`` runs on each broker once started (e.g. to read its listener ports)."""
    pytest.importorskip("kazoo")
    support = cluster_support()
    if not support.ZK_SERVER.exists() or shutil.which("java") is None:
        pytest.skip("ZooKeeper is not installed")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    zk = support.ZooKeeper(root)
    zk.start()
    brokers: list[Any] = []
    try:
        for i in (1, 2):
            b = broker_factory({
                "broker.id": str(i), "zookeeper.connect": zk.connect, "default.replication.factor": "1",
                "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1", **props})
            if ready is not None:
                ready(b)
            brokers.append(b)
        yield zk, brokers
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)

"""Dynamic broker configs in ZooKeeper, where Kafka's ZooKeeper mode keeps them (``AdminZkClient.changeBrokerConfig``,
``ConfigType.BROKER``, ``ZkConfigs``):

============================================= =====================================================
``/config/brokers/<id>``                        ``{"version":1,"config":{"log.cleaner.threads":"2"}}``
``/config/brokers/<default>``                   the same, the cluster-wide default
``/config/changes/config_change_<seq>``         ``{"version":2,"entity_path":"brokers/<id>"}``
============================================= =====================================================

Every broker reads its own znode and the default one before its storage opens (so the topic defaults they set
hold from the start) and then follows ``/config/changes``: a notification naming ``brokers/<its id>`` or
``brokers/<default>`` makes it read both again and apply what changed (Kafka's ``BrokerConfigHandler``). A change
made through any broker reaches all; a password config is stored encoded with ``password.encoder.secret`` (and
refused without one), as Kafka does: broker/password_encoder.py, used by broker/dynamic_config.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidelog.cluster import zkdata as zd
from tidelog.cluster.zk_bounded import log_zk_failure, watch_callback

log = logging.getLogger("tidelog.cluster.broker_configs")

CONFIG_BROKERS = "/config/brokers"
DEFAULT_ENTITY = "<default>"


class ZkBrokerConfigStore:
    """The dynamic-config store of ZooKeeper mode, with the interface of ``dynamic_config.FileStore`` (``read``,
    ``write``), made with the ``listener`` it calls (on kazoo's thread) when this broker's or the default znode
    changed."""

    def __init__(self, zk: Any, node_id: int, listener: Callable[[], None] | None = None) -> None:
        self.zk = zk
        self.node_id = node_id
        self.listener = listener
        # read as the broker starts: retried across a connection loss (KazooRetry), as zk_session does
        zk.retry(zk.ensure_path, CONFIG_BROKERS)
        zk.retry(zk.ensure_path, zd.CONFIG_CHANGES)
        first = zk.retry(zk.get_children, zd.CONFIG_CHANGES)
        self._last_change = max((s for s in map(zd.config_change_sequence, first) if s is not None), default=-1)
        self._watched = {f"brokers/{DEFAULT_ENTITY}", f"brokers/{node_id}"}

    def start_watching(self) -> None:
        self.zk.ChildrenWatch(zd.CONFIG_CHANGES, self._changes)

    def _get(self, entity: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.retry(self.zk.get, f"{CONFIG_BROKERS}/{entity}")
        except NoNodeError:
            return {}
        return zd.decode_entity_config(data)

    def read(self) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        return self._get(DEFAULT_ENTITY), {str(self.node_id): self._get(str(self.node_id))}

    @watch_callback("reading broker config changes", log)
    def _changes(self, children: list[str]) -> bool | None:
        self._last_change, paths = zd.new_config_changes(self.zk, children, self._last_change)
        if any(path in self._watched for path in paths) and self.listener is not None:
            try:
                self.listener()
            except Exception as exc:
                log_zk_failure(log, "applying dynamic broker configs failed", exc)
        return None

    def write(self, resource_name: str, node_id: int, layer: dict[str, str]) -> None:
        """Blocking: the entity's znode replaced by ``layer`` with a change notification, in one transaction
        (``AdminZkClient.changeBrokerConfig``)."""
        entity = DEFAULT_ENTITY if resource_name == "" else str(node_id)
        zd.write_entity_config(self.zk, f"{CONFIG_BROKERS}/{entity}", layer, f"brokers/{entity}")

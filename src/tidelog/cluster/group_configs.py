"""Dynamic group configs in ZooKeeper (tidelog's choice: Kafka keeps them only in KRaft's metadata log).

============================================= =====================================================
``/config/groups/<sanitized group>``            ``{"version":1,"config":{"share.auto.offset.reset":"earliest"}}``
``/config/changes/config_change_<seq>``         ``{"version":2,"entity_path":"groups/<sanitized group>"}``
============================================= =====================================================

The layout follows Kafka's other ZooKeeper config entities (topics, users, clients, brokers): a znode per entity
and a sequential change notification written in the same transaction. Every broker reads all of them at start and
then follows ``/config/changes``: a notification naming ``groups/<g>`` makes it read that znode again, so a change
made through any broker reaches the coordinator of the group, wherever it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidelog.cluster import zkdata as zd
from tidelog.cluster.zk_bounded import log_zk_failure, watch_callback

log = logging.getLogger("tidelog.cluster.group_configs")

CONFIG_GROUPS = "/config/groups"


class ZkGroupConfigStore:
    """The group-config store of ZooKeeper mode (``read`` / ``write`` as ``FileGroupConfigStore``); ``listener``
    is called on kazoo's thread with (group, configs) when another broker changed a group's configs."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk
        self.listener: Callable[[str, dict[str, str]], None] | None = None
        # read as the broker starts: retried across a connection loss (KazooRetry), as zk_session does
        zk.retry(zk.ensure_path, CONFIG_GROUPS)
        zk.retry(zk.ensure_path, zd.CONFIG_CHANGES)
        first = zk.retry(zk.get_children, zd.CONFIG_CHANGES)
        self._last_change = max((s for s in map(zd.config_change_sequence, first) if s is not None), default=-1)

    def watch(self, on_change: Callable[[str, dict[str, str]], None]) -> None:
        self.listener = on_change
        self.zk.ChildrenWatch(zd.CONFIG_CHANGES, self._changes)

    def _get(self, entity: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.retry(self.zk.get, f"{CONFIG_GROUPS}/{entity}")
        except NoNodeError:
            return {}
        return zd.decode_entity_config(data)

    def read(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for entity in self.zk.retry(self.zk.get_children, CONFIG_GROUPS):
            config = self._get(entity)
            if config:
                out[zd.desanitize(entity)] = config
        return out

    @watch_callback("reading group config changes", log)
    def _changes(self, children: list[str]) -> bool | None:
        self._last_change, paths = zd.new_config_changes(self.zk, children, self._last_change)
        for path in paths:
            if not path.startswith("groups/"):
                continue
            entity = path[len("groups/"):]
            try:
                config = self._get(entity)
                if self.listener is not None:
                    self.listener(zd.desanitize(entity), config)
            except Exception as exc:
                log_zk_failure(log, "reading a group's configs failed", exc, {"entity": entity})
        return None

    def write(self, group: str, configs: dict[str, str]) -> None:
        """Blocking: the group's znode replaced by ``configs`` (deleted when empty) with a change notification,
        in one transaction."""
        entity = zd.sanitize(group)
        zd.write_entity_config(self.zk, f"{CONFIG_GROUPS}/{entity}", configs, f"groups/{entity}", delete_when_empty=True)

"""ZooKeeper mode's replica manager, its watches: ``/brokers/ids``, ``/controller``, ``/brokers/topics`` and each
topic's assignment, each partition's ``state`` znode, ``/config/changes``. Callbacks run on kazoo's thread and only
hand the decoded value to the loop (``post``). Part of ``ZkReplicaManager`` (:mod:`tidelog.cluster.replica_state`)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from tidelog.cluster import zkdata as zd
from tidelog.cluster.replica_state import ZkReplicaState
from tidelog.cluster.zk_bounded import watch_callback

log = logging.getLogger("tidelog.cluster.broker")

CONFIG_CHANGE_EXPIRATION_S = 15 * 60  # Kafka's ZkNodeChangeNotificationListener changeExpirationMs


class ZkWatches(ZkReplicaState):
    """What ZooKeeper's watches deliver, posted to the loop."""

    def _brokers_changed(self, children: list[str]) -> bool | None:
        if self.zk is None:
            return False
        live: dict[int, zd.BrokerInfo] = {}
        for c in children:
            with contextlib.suppress(Exception):
                data, _ = self.zk.get(zd.broker_path(int(c)))
                live[int(c)] = zd.decode_broker(int(c), data)
        self.post(self._set_live, live)
        return None

    def _controller_moved(self, data: Any, _stat: Any) -> bool | None:
        if self.zk is None:
            return False
        self.post(setattr, self, "controller_node", zd.decode_controller(data))
        return None

    @watch_callback("watching new topics", log)
    def _topics_changed(self, children: list[str]) -> bool | None:
        if self.zk is None:
            return False
        for topic in children:
            if topic not in self._watched_topics:
                self._watched_topics.add(topic)
                self.zk.DataWatch(zd.topic_path(topic), self._assignment_watch(topic))
        return None

    def _assignment_watch(self, topic: str):
        def changed(data: Any, _stat: Any) -> bool | None:
            if self.zk is None:
                return False
            if data is None:
                self.post(self._on_topic_deleted, topic)
                return None
            a = zd.decode_topic(data)
            try:
                cfg_data, cfg_stat = self.zk.get(zd.topic_config_path(topic))
                cfg_version = cfg_stat.version
            except Exception:
                cfg_data, cfg_version = None, -1
            self.post(self._on_assignment, topic, a, zd.decode_topic_config(cfg_data), cfg_version)
            for p in a.partitions:
                if (topic, p) not in self._watched_states:
                    self._watched_states.add((topic, p))
                    self.zk.DataWatch(zd.state_path(topic, p), self._state_watch((topic, p)))
            return None

        return changed

    @watch_callback("reading topic config changes", log)
    def _config_changes(self, children: list[str]) -> bool | None:
        """Kafka's config change listener (``ZkNodeChangeNotificationListener`` with ``DynamicConfigManager``'s
        handler): every notification newer than the last one processed names a topic whose
        ``/config/topics/<t>`` is read again and handed to the loop (:meth:`ZkTopicBackend.config_changed`);
        at start every notification present is processed (re-reading a config is harmless). Notifications
        older than ``CONFIG_CHANGE_EXPIRATION_S`` are deleted, by whichever broker sees them first."""
        from kazoo.exceptions import NoNodeError

        if self.zk is None:
            return False
        expired_before = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_S * 1000
        topics: dict[str, None] = {}
        for name in sorted(children):
            seq = zd.config_change_sequence(name)
            if seq is None:
                continue
            path = zd.config_change_path(name)
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue  # purged by another broker
            if seq > self._last_config_change:
                self._last_config_change = seq
                topic = zd.decode_config_change(data)
                if topic is not None:
                    topics[topic] = None
            if stat.ctime < expired_before:
                with contextlib.suppress(NoNodeError):
                    self.zk.delete(path)
        for topic in topics:
            try:
                data, stat = self.zk.get(zd.topic_config_path(topic))
                overrides = zd.decode_topic_config(data)
            except NoNodeError:
                continue  # the topic is gone (its assignment watch deals with that)
            except ValueError:
                log.error("unreadable topic config in ZooKeeper", extra={"kv": {"topic": topic}})
                continue
            self.post(self.topic_backend.config_changed, topic, overrides, stat.version)
            controller = self.controller
            if controller is not None and str(overrides.get("unclean.leader.election.enable", "")).lower() == "true":
                controller.topic_unclean_enabled(topic)  # Kafka's TopicConfigHandler: elect its offline partitions
        return None

    def _state_watch(self, tp: tuple[str, int]):
        def changed(data: Any, stat: Any) -> bool | None:
            if self.zk is None:
                return False
            if data:
                self.post(self._on_state, tp, zd.decode_state(data, stat.version), stat.mzxid)
            return None

        return changed

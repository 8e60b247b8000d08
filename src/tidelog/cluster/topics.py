"""The topic registry in ZooKeeper mode: topics are created in ZooKeeper (``/config/topics/<t>`` and the
assignment ``/brokers/topics/<t>``, as Kafka's AdminZkClient does, from whichever broker got the request); the
controller then elects leaders, and every broker adopts the topic (and creates the logs of its replicas) when
its watch sees the assignment."""

from __future__ import annotations

import logging
from typing import Any

from tidelog.broker.topics import TopicError, TopicInfo, TopicManager, new_topic_id
from tidelog.cluster import zkdata as zd

log = logging.getLogger("tidelog.cluster.topics")


class ClusterTopicManager(TopicManager):
    def log_manager_kwargs(self) -> dict[str, Any]:
        kwargs = super().log_manager_kwargs()
        kwargs["cluster_id"] = self.broker.cluster_id or kwargs.get("cluster_id")  # ZooKeeper's /cluster/id
        return kwargs

    def adopt(self, name: str, topic_id: bytes | None, num_partitions: int, overrides: dict[str, str],
              local_partitions: list[int]) -> TopicInfo:
        """Make ``name`` known here as ZooKeeper has it; create the logs of the replicas hosted here."""
        info = self._topics.get(name)
        changed = False
        if info is None:
            try:
                cfg = self._log_config(overrides)
            except ValueError:
                cfg = self.default_log_config()
            info = TopicInfo(name, bytes(topic_id) if topic_id else new_topic_id(), num_partitions, overrides, cfg)
            self._topics[name] = info
            self._by_id[info.topic_id] = info
            changed = True
        elif num_partitions > info.num_partitions:
            info.num_partitions = num_partitions
            changed = True
        if changed:
            self._persist()
        for p in local_partitions:
            if (name, p) not in self._logs:
                lg = self.broker.logs.get_log(name, p) if hasattr(self.broker.logs, "get_log") else None
                self._logs[(name, p)] = lg or self.broker.logs.create_log(name, p, info.log_config, info.topic_id)
        return info

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str | None] | None = None, validate_only: bool = False) -> TopicInfo:
        from kazoo.exceptions import NodeExistsError

        self._validate_new_name(name)
        broker: Any = self.broker
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if num_partitions <= 0:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions was set to an invalid non-positive value.")
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        live = sorted(broker.live)
        if replication_factor <= 0 or replication_factor > len(live):
            raise TopicError(
                "INVALID_REPLICATION_FACTOR",
                f"Replication factor: {replication_factor} larger than available brokers: {len(live)}.",
            )
        overrides, cfg = self._validate_configs(configs)
        info = TopicInfo(name, new_topic_id(), num_partitions, overrides, cfg)
        if validate_only:
            return info
        assignment = zd.assign_replicas(live, num_partitions, replication_factor)
        zk = broker.zk
        t = zk.transaction()
        t.create(zd.topic_config_path(name), zd.encode_topic_config(overrides))
        t.create(zd.topic_path(name), zd.encode_topic(zd.TopicAssignment(assignment, info.topic_id)))
        results = t.commit()
        for res in results:
            if isinstance(res, NodeExistsError):
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
            if isinstance(res, Exception) and type(res).__name__ != "RolledBackError":
                raise res
        log.info("topic created in ZooKeeper", extra={"kv": {"topic": name, "partitions": num_partitions,
                                                             "assignment": str(assignment)}})
        return info

    def maybe_auto_create(self, name: str) -> TopicInfo | None:
        try:
            return super().maybe_auto_create(name)
        except TopicError as exc:
            if exc.kafka_error == "TOPIC_ALREADY_EXISTS":  # created elsewhere; our watch has not seen it yet
                raise TopicError("LEADER_NOT_AVAILABLE", f"Topic '{name}' is being created.") from None
            raise

    def delete_topic(self, name: str) -> TopicInfo:
        raise TopicError("INVALID_REQUEST", "DeleteTopics is not implemented in ZooKeeper mode yet")

    def create_partitions(self, name: str, total_count: int, validate_only: bool = False) -> TopicInfo:
        """Extend the assignment in ``/brokers/topics/<t>`` (a write conditional on the znode's version), placed
        as Kafka's ``AdminZkClient.addPartitions`` does: the rack-unaware assignment continued from the partition
        count, starting at (and shifting by) the index of partition 0's first replica among the live brokers.
        The controller then elects leaders of the new partitions and every broker adopts them via its watch."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        broker: Any = self.broker
        zk = broker.zk
        for _attempt in range(10):
            try:
                data, stat = zk.get(zd.topic_path(name))
            except NoNodeError:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{name}' does not exist.") from None
            a = zd.decode_topic(data)
            current = len(a.partitions)
            if total_count == current:
                raise TopicError("INVALID_PARTITIONS", f"Topic already has {current} partitions.")
            if total_count < current:
                raise TopicError("INVALID_PARTITIONS", f"Topic currently has {current} partitions, which is higher "
                                                       f"than the requested {total_count}.")
            first = a.partitions.get(0) or next(iter(a.partitions.values()))
            live = sorted(broker.live)
            if len(first) > len(live):
                raise TopicError("INVALID_REPLICATION_FACTOR",
                                 f"Replication factor: {len(first)} larger than available brokers: {len(live)}.")
            start = max(0, next((i for i, b in enumerate(live) if b >= first[0]), 0))
            added = zd.assign_replicas(live, total_count - current, len(first), start_index=start,
                                       start_partition=current, next_shift=start)
            info = self._topics.get(name) or TopicInfo(name, a.topic_id or new_topic_id(), current, {},
                                                       self.default_log_config())
            if validate_only:
                return info
            new = zd.TopicAssignment({**a.partitions, **added}, a.topic_id, a.adding, a.removing)
            try:
                zk.set(zd.topic_path(name), zd.encode_topic(new), version=stat.version)
            except BadVersionError:
                continue  # changed meanwhile (another CreatePartitions): decide again on the new assignment
            log.info("partitions added in ZooKeeper", extra={"kv": {"topic": name, "from": current,
                                                                    "to": total_count, "assignment": str(added)}})
            return info
        raise TopicError("REQUEST_TIMED_OUT",
                         f"the assignment of '{name}' kept changing")

"""The replica manager of a broker that runs alone: every partition it hosts, it leads, alone in the ISR.

A replica manager is the part of a :class:`~tidelog.broker.broker.Broker` that knows partition state and the
cluster around it (Kafka's ``ReplicaManager`` with ``Partition`` and the ``MetadataCache``):

* the leadership check and the partition's leader epoch (``leader_log``, ``leader_epoch``), its ISR and high
  watermark (``isr``, ``maybe_increment_high_watermark``, ``high_watermark``, ``become_leader``);
* what Metadata answers about partitions, brokers and the controller (``partition_metadata``,
  ``metadata_brokers``, ``metadata_controller_id``; ``None`` means "this node alone");
* the leader side of follower fetches for the read service (``followers``: ``None`` when there are none);
* which topic manager, producer-id manager, SCRAM credential store and client-quota store the broker uses, the extra APIs it serves (``handlers``), and what
  it does around the broker's start and shutdown.

This is the single-node one. ZooKeeper mode's (``tidelog.cluster.replica_manager.ZkReplicaManager``) has the
same methods; the composition root (``tidelog.node``) chooses one and hands it to the broker. The broker binds
the partition-state methods as its own attributes (``broker.leader_log`` is ``replica_manager.leader_log``), so
handlers call them without a second hop on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.errors import PartitionError
from tidelog.broker.fetch import FollowerFetchHooks
from tidelog.broker.handlers import Handler
from tidelog.broker.producer_ids import ProducerIdManager
from tidelog.broker.quotas import QUOTAS_FILE, LocalQuotaStore, QuotaStore
from tidelog.broker.security.authorizer import ACLS_FILE, FileAclStore
from tidelog.broker.security.scram import USERS_FILE, ScramCredentialStore
from tidelog.broker.topics import LocalTopicBackend, TopicManager
from tidelog.errors import ErrorCode
from tidelog.storage.log.partition_log import PartitionLog

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker


class ReplicaManager(Protocol):
    """What the broker, its handlers and its coordinators use of a replica manager: this module's
    :class:`LocalReplicaManager` and ZooKeeper mode's ``ZkReplicaManager`` both are one. What only ZooKeeper
    mode has is not here: the broker probes ``make_broker_config_store``, ``on_log_dir_failure`` and
    ``broker_request`` (issue 26 item 2), and the handlers only that mode serves state what they need
    (``tidelog.cluster.handlers.ClusterReplicaManager``)."""

    @property
    def handlers(self) -> Mapping[int, Handler]:
        """The APIs served beyond every broker's own."""
        ...

    @property
    def followers(self) -> FollowerFetchHooks | None:
        """The leader side of follower fetches for the read service; None: no followers."""
        ...

    def attach(self, broker: Broker) -> None: ...

    def make_topic_manager(self, broker: Broker) -> TopicManager: ...

    def make_producer_id_manager(self, broker: Broker) -> ProducerIdManager: ...

    def make_scram_store(self, broker: Broker) -> object: ...

    def make_quota_store(self, broker: Broker) -> QuotaStore: ...

    def make_acl_store(self, broker: Broker) -> object: ...

    async def before_storage(self) -> None: ...

    async def after_listen(self) -> None: ...

    async def before_shutdown(self) -> None: ...

    def leader_log(self, topic: str, partition: int) -> PartitionLog: ...

    def isr(self, topic: str, partition: int) -> tuple[int, ...]: ...

    def leader_epoch(self, topic: str, partition: int) -> int: ...

    def maybe_increment_high_watermark(self, tp: tuple[str, int], log_: PartitionLog) -> bool: ...

    def become_leader(self, tp: tuple[str, int], log_: PartitionLog) -> None: ...

    def high_watermark(self, tp: tuple[str, int]) -> int: ...

    def partition_metadata(self, topic: str, partition: int) -> dict | None: ...

    def metadata_brokers(self, listener: str | None = None) -> list[dict] | None: ...

    def metadata_controller_id(self) -> int: ...

    def live_brokers(self) -> set[int]: ...


class LocalReplicaManager:
    """One node: it leads every partition it hosts, the ISR is itself, HW = LEO after each append."""

    handlers: dict[int, Handler] = {}  # no APIs beyond the broker's own
    followers: FollowerFetchHooks | None = None  # no follower fetches

    def __init__(self) -> None:
        self.broker: Broker = None  # type: ignore[assignment]  # set by attach

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    # -- parts the broker is built with ----------------------------------------------------------------------

    def make_topic_manager(self, broker: Broker) -> TopicManager:
        return TopicManager(broker, LocalTopicBackend())  # the registry file is the source of truth

    def make_producer_id_manager(self, broker: Broker) -> ProducerIdManager:
        return ProducerIdManager(broker.config.log_dirs)

    def make_scram_store(self, broker: Broker) -> ScramCredentialStore:
        """SCRAM credentials: a file in the first log dir (ZooKeeper mode: ``/config/users``)."""
        return ScramCredentialStore(broker.config.log_dirs[0] / USERS_FILE)

    def make_quota_store(self, broker: Broker) -> LocalQuotaStore:
        """Client quotas: a file in the first log dir (ZooKeeper mode: ``/config/users``, ``/config/clients``)."""
        return LocalQuotaStore(broker.config.log_dirs[0] / QUOTAS_FILE)

    def make_acl_store(self, broker: Broker) -> FileAclStore:
        """ACLs: a file in the first log dir (ZooKeeper mode: ``/kafka-acl`` and ``/kafka-acl-extended``)."""
        return FileAclStore(broker.config.log_dirs[0] / ACLS_FILE)

    # -- lifecycle hooks -------------------------------------------------------------------------------------

    async def before_storage(self) -> None:
        """Before storage opens (cluster mode: join ZooKeeper, learn the cluster id)."""

    async def after_listen(self) -> None:
        """Once the listener is bound and the broker serves (cluster mode: register, watch, elect)."""

    async def before_shutdown(self) -> None:
        """First step of the broker's shutdown (cluster mode: controlled shutdown, leave ZooKeeper)."""

    # -- partition state ---------------------------------------------------------------------------------------

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        """The PartitionLog of (topic, partition) if this broker leads it; raises :class:`PartitionError`
        (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER) otherwise. The one leadership check."""
        log_ = self.broker.topics.get_log(topic, partition)
        if log_ is None:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here")
        if log_.offline:  # its log directory failed (storage/manager.py): KAFKA_STORAGE_ERROR, as Kafka
            raise PartitionError(ErrorCode.KAFKA_STORAGE_ERROR, log_.failed or f"{topic}-{partition}: its log directory is offline")
        return log_

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        return (self.broker.node_id,)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's current leader epoch (one node, never re-elected: 0)."""
        return 0

    def maybe_increment_high_watermark(self, tp: tuple[str, int], log_: PartitionLog) -> bool:
        """HW = min LEO over the ISR. With this node alone in the ISR that is the local LEO. Returns True if it
        moved (then waiting produces/fetches are re-checked)."""
        new_hw = log_.log_end_offset  # min over ISR LEOs: only ourselves
        if new_hw > log_.high_watermark:
            log_.high_watermark = new_hw
            return True
        return False

    def become_leader(self, tp: tuple[str, int], log_: PartitionLog) -> None:
        """Take leadership of a partition (at start, or when a topic/partition is created). Kafka's
        ``Partition.makeLeader`` ends with ``maybeIncrementLeaderHW``: alone in the ISR, the HW catches up with
        the LEO at once, so after a crash everything recovered to the LEO is readable (the checkpointed HW may
        lag by up to ``replica.high.watermark.checkpoint.interval.ms``)."""
        self.maybe_increment_high_watermark(tp, log_)

    def high_watermark(self, tp: tuple[str, int]) -> int:
        return self.leader_log(*tp).high_watermark

    # -- what Metadata says about the cluster: None means "this node alone" (handlers/metadata.py answers) ----------

    def partition_metadata(self, topic: str, partition: int) -> dict | None:
        return None

    def metadata_brokers(self, listener: str | None = None) -> list[dict] | None:
        return None

    def metadata_controller_id(self) -> int:
        return self.broker.node_id

    def live_brokers(self) -> set[int]:
        """The ids of the brokers alive now (registered, in ZooKeeper mode): this one alone."""
        return {self.broker.node_id}

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

Both announce partition leadership to the coordinators through :class:`~tidelog.broker.leadership.LeadershipChanges`
(this one: every hosted partition at start, and every partition created later; see
docs/decisions/0065-coordinators-driven-by-partition-leadership.md).

This is the single-node one. ZooKeeper mode's (``tidelog.cluster.replica_manager.ZkReplicaManager``) has the
same methods; the composition root (``tidelog.node``) chooses one and hands the broker a factory of it, which the
broker calls with itself as it is constructed (:data:`ReplicaManagerFactory`: no ``attach`` afterwards). The broker binds
the partition-state methods as its own attributes (``broker.leader_log`` is ``replica_manager.leader_log``), so
handlers call them without a second hop on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.errors import PartitionError
from tidelog.broker.fetch import FollowerFetchHooks
from tidelog.broker.group_configs import STORE_FILE as GROUP_CONFIGS_FILE
from tidelog.broker.group_configs import FileGroupConfigStore, GroupConfigStore
from tidelog.broker.handlers import Handler
from tidelog.broker.leadership import LeadershipChanges
from tidelog.broker.producer_ids import ProducerIdManager
from tidelog.broker.quotas import QUOTAS_FILE, LocalQuotaStore, QuotaListener, QuotaStore
from tidelog.broker.security.authorizer import ACLS_FILE, AclListener, AclStore, FileAclStore
from tidelog.broker.security.scram import USERS_FILE, ScramCredentialStore
from tidelog.broker.topics import LocalTopicBackend, TopicManager
from tidelog.errors import ErrorCode
from tidelog.storage.log.partition_log import PartitionLog

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker


class ReplicaManager(Protocol):
    """What the broker, its handlers and its coordinators use of a replica manager: this module's
    :class:`LocalReplicaManager` and ZooKeeper mode's ``ZkReplicaManager`` both are one. What only ZooKeeper
    mode and every part needs is stated here with the single-node answer (``make_broker_config_store``: None,
    ``on_log_dir_failure``: nothing to tell, ``broker_request``: no other broker); the handlers only that mode
    serves state what they need (``tidelog.cluster.handlers.ClusterReplicaManager``)."""

    @property
    def handlers(self) -> Mapping[int, Handler]:
        """The APIs served beyond every broker's own."""
        ...

    @property
    def followers(self) -> FollowerFetchHooks | None:
        """The leader side of follower fetches for the read service; None: no followers."""
        ...

    @property
    def leadership(self) -> LeadershipChanges:
        """Where this replica manager announces the partitions it leads (the coordinators listen)."""
        ...

    def make_topic_manager(self, broker: Broker) -> TopicManager: ...

    def make_producer_id_manager(self, broker: Broker) -> ProducerIdManager: ...

    def make_scram_store(self, broker: Broker) -> object: ...

    def make_quota_store(self, broker: Broker, listener: QuotaListener) -> QuotaStore:
        """The client-quota store, calling ``listener`` after each change (the broker's ClientQuotaManager)."""
        ...

    def make_acl_store(self, broker: Broker, changes: AclListener) -> AclStore:
        """The ACL store, announcing its content to ``changes`` (the authorizer listens)."""
        ...

    def make_broker_config_store(self, broker: Broker, listener: Callable[[], None]) -> object | None:
        """Where dynamic broker configs live beyond the broker's own file (ZooKeeper mode: ``/config/brokers``),
        calling ``listener`` when this broker's or the default layer changed elsewhere."""
        ...

    def make_group_config_store(self, broker: Broker) -> GroupConfigStore:
        """Where dynamic group configs live (one node: a file; ZooKeeper mode: ``/config/groups``)."""
        ...

    def on_log_dir_failure(self, root: Path, tps: list[tuple[str, int]], offline: bool, reason: str) -> None:
        """A log directory failed (a ``LogManager`` listener, on the thread that hit the error)."""
        ...

    async def broker_request(self, node_id: int, api_key: int, version: int, body: dict,
                             timeout: float = 30.0) -> dict:
        """An inter-broker request to ``node_id``; raises ConnectionError when there is no such broker."""
        ...

    def internal_topic_replication_factor(self, configured: int) -> int:
        """The replication factor the coordinators create their internal topics with (one node: 1)."""
        ...

    @property
    def internal_topics_led_on_creation(self) -> bool:
        """True when a topic created here is led here as soon as its creation returns (one node): a coordinator
        may then create its internal topic on a request's path. False: the controller elects leaders later."""
        ...

    @property
    def coordinating(self) -> bool:
        """False while what this broker believes it leads may already be led elsewhere (ZooKeeper mode: its
        connection to ZooKeeper is down, so the controller may have elected others): its coordinators (group,
        transaction, share) then answer NOT_COORDINATOR instead of serving a view that may be stale. One node: always
        True."""
        ...

    def start_leadership(self) -> None:
        """Once the coordinators listen (broker start): announce what this node leads now (one node: every hosted
        partition; ZooKeeper mode: nothing, its elections arrive through the watches after registration)."""
        ...

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


ReplicaManagerFactory = Callable[["Broker"], ReplicaManager]
"""Makes the broker's replica manager, given the broker being constructed (``tidelog.node`` chooses it)."""


class LocalReplicaManager:
    """One node: it leads every partition it hosts, the ISR is itself, HW = LEO after each append."""

    handlers: dict[int, Handler] = {}  # no APIs beyond the broker's own
    internal_topics_led_on_creation = True  # created here, led here at once
    coordinating = True  # nobody else can lead what this node leads
    followers: FollowerFetchHooks | None = None  # no follower fetches

    def __init__(self, broker: Broker, leadership: LeadershipChanges | None = None) -> None:
        self.broker = broker  # built by the broker's constructor (a part of it): its topics, node id
        #: where leadership is announced (the broker's coordinators listen)
        self.leadership = leadership if leadership is not None else LeadershipChanges()

    # -- parts the broker is built with ----------------------------------------------------------------------

    def make_topic_manager(self, broker: Broker) -> TopicManager:
        # the registry file is the source of truth; partitions it creates or deletes are led here at once
        return TopicManager(broker, lambda store: LocalTopicBackend(store, on_partitions=self._partitions_changed))

    def make_broker_config_store(self, broker: Broker, listener: Callable[[], None]) -> None:
        """No store beyond the broker's own file (``dynamic_config.FileStore``)."""
        return None

    def make_group_config_store(self, broker: Broker) -> FileGroupConfigStore:
        """Group configs: a file in the first log dir (ZooKeeper mode: ``/config/groups``)."""
        return FileGroupConfigStore(broker.config.log_dirs[0] / GROUP_CONFIGS_FILE)

    def make_producer_id_manager(self, broker: Broker) -> ProducerIdManager:
        return ProducerIdManager(broker.config.log_dirs)

    def make_scram_store(self, broker: Broker) -> ScramCredentialStore:
        """SCRAM credentials: a file in the first log dir (ZooKeeper mode: ``/config/users``)."""
        return ScramCredentialStore(broker.config.log_dirs[0] / USERS_FILE)

    def make_quota_store(self, broker: Broker, listener: QuotaListener) -> LocalQuotaStore:
        """Client quotas: a file in the first log dir (ZooKeeper mode: ``/config/users``, ``/config/clients``)."""
        return LocalQuotaStore(broker.config.log_dirs[0] / QUOTAS_FILE, listener)

    def make_acl_store(self, broker: Broker, changes: AclListener) -> FileAclStore:
        """ACLs: a file in the first log dir (ZooKeeper mode: ``/kafka-acl`` and ``/kafka-acl-extended``)."""
        return FileAclStore(broker.config.log_dirs[0] / ACLS_FILE, changes)

    # -- lifecycle hooks -------------------------------------------------------------------------------------

    def on_log_dir_failure(self, root: Path, tps: list[tuple[str, int]], offline: bool, reason: str) -> None:
        """No controller to tell: the partitions answer KAFKA_STORAGE_ERROR (``leader_log``)."""

    async def broker_request(self, node_id: int, api_key: int, version: int, body: dict,
                             timeout: float = 30.0) -> dict:
        raise ConnectionError(f"broker {node_id} is not known here (one node)")

    def internal_topic_replication_factor(self, configured: int) -> int:
        """One node: 1, whatever ``offsets.topic.replication.factor`` / ``transaction.state.log.replication.factor``
        say (tidelog differs from Kafka, which refuses to create them with fewer brokers)."""
        return 1

    # -- leadership --------------------------------------------------------------------------------------------

    def start_leadership(self) -> None:
        """Leader of every hosted partition, epoch 0: announced once the coordinators listen (Kafka's
        ``onLeadershipChange`` after a LeaderAndIsr naming this broker leader of everything)."""
        topics = self.broker.topics
        for info in topics.all_topics():
            for p in range(info.num_partitions):
                if topics.get_log(info.name, p) is not None:
                    self.leadership.changed(info.name, p, True, 0)

    def _partitions_changed(self, tps: Iterable[tuple[str, int]], created: bool) -> None:
        """On the loop: partitions created (led here at once) or deleted (no longer led)."""
        for topic, partition in tps:
            self.leadership.changed(topic, partition, created, 0 if created else -1)

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

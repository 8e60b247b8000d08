"""Replication and the cluster (issue 7): ZooKeeper-coordinated leaders, followers, ISR and high watermark.

Everything here is used only when ``zookeeper.connect`` is set; without it ``tidelog serve`` is the single-node
embedded broker and never connects to ZooKeeper. It still imports this package (and ``kazoo``): the composition
root, :mod:`tidelog.node`, imports :class:`ZkReplicaManager` at module level to choose between the modes.

* :mod:`tidelog.cluster.zkdata`: the znode paths and JSON values, as Kafka's ZooKeeper mode writes them.
* :mod:`tidelog.cluster.controller`: the controller (elected through the ephemeral ``/controller``).
* :mod:`tidelog.cluster.replica_manager`: :class:`ZkReplicaManager`, the broker's replica manager in ZooKeeper mode
  (partition state from ZooKeeper watches, ISR, high watermark, controlled shutdown; the replica fetchers).
"""

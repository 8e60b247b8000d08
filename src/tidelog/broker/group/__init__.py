"""The group coordinator: classic consumer-group protocol, committed offsets in ``__consumer_offsets``.

* :mod:`.records`: the ``__consumer_offsets`` key/value schemas (as Kafka writes them) and group -> partition.
* :mod:`.state`: members, groups and the group state machine's data.
* :mod:`.coordinator`: :class:`GroupCoordinator` (membership, rebalances, offsets, loading, retention).
* :mod:`.assignment`: reading the "consumer" protocol payloads (subscriptions, assignments).
"""

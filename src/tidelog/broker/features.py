"""Feature versioning (KIP-584 / KIP-1022): what a broker advertises in ApiVersions and UpdateFeatures validates.

A Kafka 4 broker answers ApiVersions v3+ with ``SupportedFeatures`` (the levels its software can run),
``FinalizedFeatures`` (the levels the cluster runs at) and ``FinalizedFeaturesEpoch``; clients switch protocols on
from the finalized levels (the Java producer's transactions v2 from ``transaction.version`` >= 2, share consumers
from ``share.version``; a KIP-848 consumer gets UNSUPPORTED_VERSION when ``group.version`` is 0 because the broker
then does not advertise ConsumerGroupHeartbeat). ``kafka-features.sh describe`` prints both.

tidelog runs exactly one level of each feature: the behaviour it implements. So every supported range is one
level, the finalized level is that level, and the table never changes while a broker runs:

* ``metadata.version`` 29 (``4.2-IV1``): the protocol of Kafka 4.2 (tidelog keeps no KRaft metadata log, so the
  level only names the release whose APIs it speaks; the levels' names are Kafka's ``MetadataVersion``).
* ``group.version`` 1 when the broker's handler table serves ConsumerGroupHeartbeat (API 68, KIP-848), else 0.
* ``transaction.version`` supported 0-2, finalized at 2 (Kafka 4's level for a new cluster): transactions v2
  (KIP-890 part 2, :mod:`tidelog.broker.txn.tv2`); UpdateFeatures may lower it (per broker, in memory: the one
  feature whose level can change here; each change bumps ``FinalizedFeaturesEpoch``).
* ``share.version`` 1 when the handler table serves ShareGroupHeartbeat (API 76, KIP-932 share groups), else 0.
* ``streams.version`` 0 (no streams groups, KIP-1071),
  ``eligible.leader.replicas.version`` 0 (no ELR, KIP-966: DescribeTopicPartitions answers empty ELR lists).
* ``kraft.version`` is not advertised: tidelog has no KRaft quorum (a ZooKeeper-mode Kafka broker did not
  advertise it either).

Kafka lists in ``FinalizedFeatures`` only the features finalized above level 0 (level 0 is "off"), and omits
from ``SupportedFeatures`` of ApiVersions v0-3 the features whose minimum is 0 (KAFKA-17492: older clients fail
to parse them); v4 lists them all. Both are reproduced.

UpdateFeatures (API 57) validates as Kafka's ``FeatureControlManager``: ALTER on the cluster, a known feature, a
level >= 0 inside the supported range, the upgrade type consistent with the direction. Since each supported range
is one level, the only valid update is to the current level: it succeeds and changes nothing, so no finalized
level is ever stored (not in ZooKeeper's ``/feature`` either). ``transaction.version`` (0-2) is the exception: its
level is kept per broker in memory (:func:`tidelog.broker.txn.tv2.set_finalized_level`). Every other update is INVALID_UPDATE_VERSION with
Kafka's message ("Local controller N only supports versions 29": each broker is its own controller here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.api_keys import ApiKey

CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
SHARE_GROUP_HEARTBEAT = ApiKey.SHARE_GROUP_HEARTBEAT
STREAMS_GROUP_HEARTBEAT = ApiKey.STREAMS_GROUP_HEARTBEAT

METADATA_VERSION = "metadata.version"
METADATA_VERSION_LEVEL = 29
FINALIZED_FEATURES_EPOCH = 0
"""The epoch of the finalized levels: they never change while a broker runs (Kafka's KRaft brokers answer the
metadata log offset, ZooKeeper-mode ones the ``/feature`` znode version)."""

# Kafka's MetadataVersion feature levels and their names (server-common MetadataVersion, Kafka 4.2)
_METADATA_VERSIONS = {
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1",
    14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4", 20: "3.8-IV0",
    21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1",
    28: "4.2-IV0", 29: "4.2-IV1",
}

# UpdateFeatures UpgradeType (FeatureUpdate.UpgradeType)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_version: int
    max_version: int
    finalized: int


def metadata_version_name(level: int) -> str:
    """Kafka's name of a metadata.version level (``29`` -> ``4.2-IV1``); the number itself when unknown."""
    return _METADATA_VERSIONS.get(level, str(level))


TRANSACTION_VERSION = "transaction.version"
TRANSACTION_VERSION_MAX = 2  # TV_2 (KIP-890 part 2); Kafka 4 finalizes it on a new cluster


@dataclass
class FinalizedFeatures:
    """A broker's finalized feature levels, kept in memory (``Broker.finalized_features``): ``transaction.version``
    (lowered by UpdateFeatures, see :mod:`tidelog.broker.txn.tv2`) and ``FinalizedFeaturesEpoch``, how many times
    they changed."""

    transaction_version: int = TRANSACTION_VERSION_MAX
    epoch: int = 0


def broker_features(handlers: Mapping[int, Any], txn_version: int = TRANSACTION_VERSION_MAX) -> list[Feature]:
    """The features of a broker whose handler table is ``handlers``, sorted by name (``txn_version``: the
    finalized ``transaction.version``)."""
    group = 1 if CONSUMER_GROUP_HEARTBEAT in handlers else 0
    share = 1 if SHARE_GROUP_HEARTBEAT in handlers else 0
    streams = 1 if STREAMS_GROUP_HEARTBEAT in handlers else 0
    table = [
        Feature("eligible.leader.replicas.version", 0, 0, 0),
        Feature("group.version", group, group, group),
        Feature(METADATA_VERSION, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
        Feature("share.version", share, share, share),
        Feature("streams.version", streams, streams, streams),
        Feature(TRANSACTION_VERSION, 0, TRANSACTION_VERSION_MAX, txn_version),
    ]
    return sorted(table, key=lambda f: f.name)


_FIELDS: dict[tuple[frozenset[int], bool, int, int], dict[str, Any]] = {}


def api_versions_fields(handlers: Mapping[int, Any], version: int, txn_version: int = TRANSACTION_VERSION_MAX,
                        epoch: int = FINALIZED_FEATURES_EPOCH) -> dict[str, Any]:
    """The feature fields of an ApiVersions response of ``version`` (none below v3). Built once per table."""
    if version < 3:
        return {}
    key = (frozenset(handlers), version >= 4, txn_version, epoch)
    fields = _FIELDS.get(key)
    if fields is None:
        feats = broker_features(handlers, txn_version)
        fields = _FIELDS[key] = {
            # KAFKA-17492: v0-3 omit the features whose minimum is 0
            "supported_features": [{"name": f.name, "min_version": f.min_version, "max_version": f.max_version}
                                   for f in feats if version >= 4 or f.min_version > 0],
            "finalized_features_epoch": epoch,
            "finalized_features": [{"name": f.name, "max_version_level": f.finalized,
                                    "min_version_level": f.finalized} for f in feats if f.finalized > 0],
        }
    return fields


def validate_update(node_id: int, features: list[Feature], name: str, level: int, upgrade_type: int) -> str | None:
    """Why an update of ``name`` to ``level`` is refused (Kafka's INVALID_UPDATE_VERSION message), or None."""
    def invalid(why: str) -> str:
        return f"Invalid update version {level} for feature {name}. {why}"

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid("The controller does not support the given upgrade type.")
    current = {f.name: f for f in features}.get(name)
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    lo, hi = (current.min_version, current.max_version) if current is not None else (0, 0)
    if not lo <= level <= hi:  # QuorumFeatures.reasonNotSupported, VersionRange's toString
        if hi == 0:
            return invalid(f"Local controller {node_id} does not support this feature.")
        return invalid(f"Local controller {node_id} only supports versions {lo if lo == hi else f'{lo}-{hi}'}")
    finalized = current.finalized if current is not None else 0
    if level < finalized and upgrade_type == UPGRADE:
        return invalid("Can't downgrade the version of this feature without setting the upgrade type to either "
                       "safe or unsafe downgrade.")
    if level > finalized and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    return None

"""UpdateFeatures (API 57): Kafka's validation of feature level changes (``FeatureControlManager``).

The broker's feature table (:mod:`tidelog.broker.features`) has one supported level per feature but
``transaction.version`` (0-2), so an update is either to the current level (valid: NONE, nothing changes and nothing
is stored), a change of ``transaction.version`` (this broker's level, in memory: transactions v2 on or off,
:mod:`tidelog.broker.txn.tv2`), or refused with INVALID_UPDATE_VERSION and Kafka's message. As Kafka's ``QuorumController.updateFeatures``: the first refused
update fails them all ("The update failed for all features since the following feature had an error: ...",
top-level error, no per-feature results); on success v0-1 list each feature with NONE, v2 no results.
Authorization: ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise). A feature named twice is
INVALID_REQUEST (Kafka's request is a map keyed by feature name).
"""

from __future__ import annotations

from tidelog.broker.features import TRANSACTION_VERSION, UPGRADE, broker_features, validate_update
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.broker.txn import tv2
from tidelog.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey

_FAILED_ALL = "The update failed for all features since the following feature had an error: "
# v0 AllowDowngrade: true means a safe downgrade (Kafka's UpdateFeaturesRequest.upgradeType for v0)
_V0_DOWNGRADE = 2


def _refused(code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": []}


@handles(ApiKey.UPDATE_FEATURES)
async def update_features(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    updates = request.get("feature_updates") or []
    names = [u.get("feature") for u in updates]
    seen: set[str | None] = set()
    for n in names:  # linear: a request may name many features
        if n in seen:
            return _refused(ErrorCode.INVALID_REQUEST, f"Feature {n} appears more than once in the request.")
        seen.add(n)
    features = broker_features(ctx.broker.handlers, tv2.finalized_level(ctx.broker))
    node = int(ctx.broker.node_id)
    for u in updates:
        if ctx.api_version == 0:
            upgrade_type = _V0_DOWNGRADE if u.get("allow_downgrade") else UPGRADE
        else:
            upgrade_type = int(u.get("upgrade_type", UPGRADE))
        why = validate_update(node, features, str(u.get("feature") or ""), int(u.get("max_version_level", 0)),
                              upgrade_type)
        if why is not None:
            return _refused(ErrorCode.INVALID_UPDATE_VERSION, _FAILED_ALL + why)
    if not request.get("validate_only"):
        for u in updates:  # transaction.version is the one level that can change (transactions v2 on / off)
            if u.get("feature") == TRANSACTION_VERSION:
                tv2.set_finalized_level(ctx.broker, int(u.get("max_version_level", 0)))
    results = ([{"feature": n, "error_code": 0, "error_message": None} for n in names]
               if ctx.api_version <= 1 else [])
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}

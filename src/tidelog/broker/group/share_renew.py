"""ShareFetch / ShareAcknowledge v2 (Kafka 4.2/4.3): the RENEW acknowledge type of KIP-1222 and the acquire mode of
KIP-1206, as the share handlers (broker/handlers/share_group.py) check and apply them.

* **RENEW** (acknowledge type 4): a member still processing a record it holds extends that record's acquisition
  lock. The record stays ACQUIRED by the same member, its delivery count is unchanged, and its lock deadline
  becomes now + the group's ``share.record.lock.duration.ms``. Only the member holding the record may renew it:
  anything else (a record not acquired, or acquired by another member) is INVALID_RECORD_STATE, as for the other
  types. A request may mix RENEW with the other types, per batch or per offset.
* The group config ``share.renew.acknowledge.enable`` (Kafka's ``GroupConfig``, BOOLEAN, default ``true``, no
  broker-level synonym): when ``false`` a batch holding a RENEW is refused with INVALID_RECORD_STATE (the Java
  client reports ``InvalidRecordStateException`` for that partition), the other batches apply.
* ``IsRenewAck`` (both requests, v2+): the client says the request carries RENEW acknowledgements. A ShareFetch
  with it set is an acknowledgement only: Kafka's ``KafkaApis`` refuses it with a top-level INVALID_REQUEST unless
  ``MaxBytes``, ``MinBytes``, ``MaxRecords`` and ``MaxWaitMs`` are all 0, and acquires nothing.
* ``ShareAcquireMode`` (ShareFetch v2+): 0 batch-optimized (``MaxRecords`` a soft limit: whole batches are
  acquired), 1 record-limit (at most ``MaxRecords`` records are acquired, a batch may be split); any other value
  is INVALID_REQUEST.
* Version 1 knows types 0-3 only: a type 4 in a v1 request is INVALID_REQUEST (tidelog's choice; the Java client
  never sends one below v2).
* ShareAcknowledge v2's answer carries ``AcquisitionLockTimeoutMs`` (the group's lock duration), as ShareFetch's.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.group_configs import GroupConfigs
from tidelog.errors import ErrorCode

RENEW = 4
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
RENEW_CONFIG = "share.renew.acknowledge.enable"
RENEW_DEFAULT = True


def _types(batches: list[dict]) -> set[int]:
    return {int(t) for b in batches for t in (b.get("acknowledge_types") or ())}


def fetch_refusal(version: int, request: dict[str, Any]) -> tuple[int, str] | None:
    """A ShareFetch that Kafka refuses as a whole (top-level error), or None."""
    if version < 2:
        return None
    mode = int(request.get("share_acquire_mode") or 0)
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        return ErrorCode.INVALID_REQUEST, f"Invalid share acquire mode {mode}."
    if request.get("is_renew_ack") and any(int(request.get(k) or 0) for k in
                                           ("max_bytes", "min_bytes", "max_records", "max_wait_ms")):
        return ErrorCode.INVALID_REQUEST, ("A renew acknowledgement request must have MaxBytes, MinBytes, MaxRecords "
                                           "and MaxWaitMs set to 0.")
    return None


def record_limit(version: int, request: dict[str, Any]) -> bool:
    """Whether MaxRecords is a strict limit (ShareAcquireMode record-limit, v2+)."""
    return version >= 2 and int(request.get("share_acquire_mode") or 0) == RECORD_LIMIT


def batches_refusal(version: int, batches: list[dict]) -> tuple[int, str] | None:
    """One partition's acknowledgement batches refused before any applies: a RENEW below version 2."""
    if version < 2 and RENEW in _types(batches):
        return ErrorCode.INVALID_REQUEST, "The acknowledge type RENEW needs version 2."
    return None


def renew_enabled(configs: GroupConfigs | None, group_id: str) -> bool:
    """The group's ``share.renew.acknowledge.enable`` (Kafka's default, true, without group configs)."""
    return RENEW_DEFAULT if configs is None else configs.effective(group_id).share_renew_acknowledge_enable


def renew_until(configs: GroupConfigs | None, group_id: str, lock_ms: int, now: float) -> float | None:
    """The lock deadline a RENEW gives (monotonic seconds), None when the group refuses renewals."""
    return now + lock_ms / 1000.0 if renew_enabled(configs, group_id) else None

"""What the admin handlers (``admin.py``, ``configs.py``) share: authorization answers, topic ids, duplicate
names, the node id, a config value's wire string."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

from tidelog.broker.handlers import RequestContext
from tidelog.errors import ErrorCode
from tidelog.protocol.errors import error_for_code

_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------------------------------
# helpers


TOPIC_AUTHORIZATION_FAILED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def auth_message(code: int) -> str:
    return error_for_code(code).message


def topic_uuid(value: object) -> uuid.UUID:
    """Topic ids are 16 raw bytes in the TopicManager and ``uuid.UUID`` in protocol bodies."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(int=0)


def duplicates(names: Iterable[_T]) -> set[_T]:
    return {n for n, c in Counter(names).items() if c > 1}


def node_id(ctx: RequestContext) -> int:
    return int(ctx.broker.node_id)


def str_value(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


"""The console's view of group types and KIP-848 consumer groups (issue 27 item 6), through tidelog's own client
as ``tidelog groups`` has them (cli/group_kip848.py): ListGroups v5 at every broker for the list (Kafka's type and
state names: librdkafka reports a consumer group's ``Assigning`` / ``Reconciling`` as UNKNOWN), and
ConsumerGroupDescribe at the coordinator for a consumer group's epochs, members and current / target
assignments."""

from __future__ import annotations

from typing import Any, Protocol

from tidelog.cli.group_kip848 import (
    CONSUMER_GROUP_DESCRIBE_VERSION,
    LIST_GROUPS_VERSION,
    as_console,
    describe_request,
    find_coordinator_request,
    list_groups_request,
    listed_groups,
    parse_described,
)
from tidelog.protocol.api_keys import ApiKey


class Broker(Protocol):
    def peer_call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict: ...
    def any_broker(self, api_key: int, version: int, body: dict) -> dict: ...
    def brokers(self) -> dict[int, tuple[str, int]]: ...


def list_all(cluster: Broker) -> list[dict[str, Any]]:
    """Every group of the cluster: ``{"group", "type", "state", "simple"}`` with Kafka's names (Classic /
    Consumer; Stable, Empty, Assigning, Reconciling...); ``simple``: a classic group without a protocol type
    (offsets only)."""
    from tidelog.console.kafka import ConsoleError

    answers = []
    down: ConsoleError | None = None
    for _node, (host, port) in sorted(cluster.brokers().items()):
        try:
            answers.append(cluster.peer_call(host, port, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                             list_groups_request()))
        except ConsoleError as exc:  # a broker down: the others' groups are still listed
            if exc.status == 403:
                raise
            down = exc
    if not answers and down is not None:
        raise down
    rows, _errors = listed_groups(answers)
    protocol = {g["group_id"]: g.get("protocol_type") or "" for a in answers for g in a.get("groups") or []}
    return [{**r, "simple": r["type"] == "Classic" and not protocol.get(r["group"])} for r in rows]


def describe(cluster: Broker, group: str) -> dict[str, Any] | None:
    """A consumer group's KIP-848 side (epochs, members with epochs, current and target assignments); None when
    the group is not a consumer group (GROUP_ID_NOT_FOUND) or has no coordinator now."""
    found = cluster.any_broker(ApiKey.FIND_COORDINATOR, 3, find_coordinator_request(group))
    if found["error_code"]:
        return None
    resp = cluster.peer_call(found["host"], found["port"], ApiKey.CONSUMER_GROUP_DESCRIBE,
                             CONSUMER_GROUP_DESCRIBE_VERSION, describe_request(group))
    (g,) = resp["groups"]
    if g["error_code"]:
        return None
    return as_console(parse_described(g))

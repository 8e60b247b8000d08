"""DescribeGroups and ListGroups answers of the group coordinator (classic groups, and KIP-848 groups in the
listing), moved out of ``coordinator.py``; ``self`` is the group coordinator, seen through
:class:`DescribedCoordinator`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.group.results import DescribedGroup, ListedGroup
from tidelog.broker.group.state import GroupState
from tidelog.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.broker import Broker
    from tidelog.broker.group.consumer_group import ConsumerGroupManager
    from tidelog.broker.group.state import Group


class DescribedCoordinator(Protocol):
    """What describing and listing groups reads of the group coordinator."""

    broker: Broker
    groups: dict[str, Group]
    consumer: ConsumerGroupManager
    active: bool
    loading_partitions: set[int]

    def check(self, group_id: str | None) -> int: ...

NONE = 0  # "no error" stays a plain int (docs/decisions/0066)
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
COORDINATOR_LOAD_IN_PROGRESS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
INVALID_GROUP_ID = ErrorCode.INVALID_GROUP_ID


def describe_group(self: DescribedCoordinator, group_id: str) -> DescribedGroup:
    err = self.check(group_id)
    out: DescribedGroup = {
        "error_code": err, "error_message": None, "group_id": group_id, "group_state": "",
        "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648,
    }
    if err:
        return out
    g = self.groups.get(group_id)
    if g is None or self.consumer.is_consumer_group(group_id):
        out["group_state"] = GroupState.DEAD.value
        if g is not None:  # KIP-848 group: DescribeGroups v6+ answers GROUP_ID_NOT_FOUND (the handler)
            out["error_message"] = f"Group {group_id} is not a classic group."
        return out
    stable = g.state == GroupState.STABLE
    out["group_state"] = g.state.value
    out["protocol_type"] = g.protocol_type or ""
    out["protocol_data"] = (g.protocol_name or "") if stable else ""
    out["members"] = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata_for(g.protocol_name) if stable else b"",
            "member_assignment": m.assignment if stable else b"",
        }
        for m in g.members.values()
    ]
    return out


def list_groups(self: DescribedCoordinator, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[ListedGroup]]:
    # every broker lists the groups of the partitions it leads (clients ask them all)
    err: int = NOT_COORDINATOR if not self.active or self.broker.stopping else (
        COORDINATOR_LOAD_IN_PROGRESS if self.loading_partitions else NONE)
    if err:
        return err, []
    wanted_states = {s.lower() for s in states}
    wanted_types = {t.lower() for t in types}
    out: list[ListedGroup] = []
    for g in self.groups.values():
        if g.state == GroupState.DEAD or self.consumer.is_consumer_group(g.group_id):
            continue
        if wanted_states and g.state.value.lower() not in wanted_states:
            continue
        if wanted_types and "classic" not in wanted_types:
            continue
        out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                    "group_state": g.state.value, "group_type": "classic"})
    out += self.consumer.list_groups(wanted_states, wanted_types)
    share = getattr(self.broker, "share_groups", None)  # KIP-932 share groups (broker/group/share_group.py)
    if share is not None:
        out += share.list_groups(wanted_states, wanted_types)
    return NONE, out

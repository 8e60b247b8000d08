"""The answers of the group coordinator that are parts of a response body (JoinGroup, SyncGroup, LeaveGroup's
members, DescribeGroups' groups, ListGroups' groups), typed as Kafka's JSON specs name their fields (issue 26,
item 1). The handlers (``broker/handlers/group.py``) add the version-specific fields (throttle time, null/empty
strings of old versions) and fit the body to the request's version. Plain dicts at run time."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class JoinGroupResponseMember(TypedDict):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


class JoinResult(TypedDict):
    """JoinGroupResponse without ``throttle_time_ms``; ``leader``/``protocol_name`` None until a generation has
    one (the handler writes "" where the version has a non-nullable string)."""

    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    skip_assignment: bool
    member_id: str
    members: list[JoinGroupResponseMember]


class SyncResult(TypedDict):
    """SyncGroupResponse without ``throttle_time_ms``."""

    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


class MemberResponse(TypedDict):
    """LeaveGroupResponse v3+ ``members`` entry."""

    member_id: str
    group_instance_id: str | None
    error_code: int


class DescribedGroupMember(TypedDict):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


class DescribedGroup(TypedDict):
    """DescribeGroupsResponse ``groups`` entry."""

    error_code: int
    error_message: NotRequired[str | None]
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedGroupMember]
    authorized_operations: NotRequired[int]


class ListedGroup(TypedDict):
    """ListGroupsResponse ``groups`` entry."""

    group_id: str
    protocol_type: str
    group_state: str
    group_type: str

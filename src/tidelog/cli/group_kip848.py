"""KIP-848 (``consumer`` type) groups as ``kafka-consumer-groups.sh`` of Kafka 4 shows them (issue 27 item 6).

confluent-kafka's ``describe_consumer_groups`` gives a consumer group's type, members and target assignments but no
epochs, and its state enum has no ``Assigning`` / ``Reconciling`` (they come back as UNKNOWN); so the group is
described here with ConsumerGroupDescribe (API 69) at its coordinator, and listed with ListGroups v5 (group types) at
every broker, through tidelog's own client. The functions that turn the answers into Kafka's rows are pure, shared by
``tidelog groups`` (cli/groups.py) and the web console (console/kafka.py).

Kafka's layouts (ConsumerGroupCommand, Kafka 4): ``--describe --state [--verbose]`` prints ``GROUP COORDINATOR (ID)
ASSIGNMENT-STRATEGY STATE [GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH] #MEMBERS``, ``--members --verbose`` adds
``CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT`` (TARGET-EPOCH is the group's target assignment
epoch), an assignment printed ``topic:0,1;other:2`` and ``-`` when empty; ``--list --type`` prints the type as
``GroupType.toString()``: ``Classic``, ``Consumer``, ``Share``, ``Unknown``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidelog.cli._client import bootstrap_request, broker_addresses, peer_request
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE

# GroupType.toString(), by the lower-case name ListGroups v5 carries
GROUP_TYPE_NAMES = {"classic": "Classic", "consumer": "Consumer", "share": "Share"}
# the types kafka-consumer-groups.sh --list --type accepts (ConsumerGroupCommand.consumerGroupTypesFromString)
LISTABLE_TYPES = ("classic", "consumer")
# KIP-848 group states that kafka-consumer-groups.sh reports as a rebalance in progress
REBALANCING_STATES = {"Assigning", "Reconciling", "PreparingRebalance", "CompletingRebalance"}

CONSUMER_GROUP_DESCRIBE_VERSION = 0
LIST_GROUPS_VERSION = 5


def type_name(group_type: str | None) -> str:
    """ListGroups' ``group_type`` (``classic``...) as Kafka's tool prints it (``Classic``...); ``Unknown`` else."""
    return GROUP_TYPE_NAMES.get((group_type or "").lower(), "Unknown")


def parse_types(value: str) -> set[str]:
    """``--type`` as Kafka's tool parses it: a comma list of classic / consumer, any case; ``all`` (or nothing)
    for every type. Raises ValueError naming the valid types."""
    if value.strip().lower() in ("", "all"):
        return set()
    types = {t.strip().lower() for t in value.split(",") if t.strip()}
    bad = sorted(types - set(LISTABLE_TYPES))
    if bad or not types:
        raise ValueError(f"Invalid types list '{value}'. Valid types are: {', '.join(LISTABLE_TYPES)}")
    return types


def assignment_text(partitions: Iterable[tuple[str, int]]) -> str:
    """ConsumerGroupCommand.getAssignmentString: ``topic:0,1;other:2`` (topics and partitions sorted), ``-`` when
    empty."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    if not by_topic:
        return MISSING
    return ";".join(sorted(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in by_topic.items()))


def _partitions(assignment: dict[str, Any] | None) -> list[tuple[str, int]]:
    out = []
    for tp in (assignment or {}).get("topic_partitions") or []:
        out += [(str(tp.get("topic_name") or tp.get("topic_id")), int(p)) for p in tp.get("partitions") or []]
    return sorted(out)


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    host: str
    epoch: int
    subscribed_topics: list[str]
    subscribed_regex: str | None
    assignment: list[tuple[str, int]]
    target_assignment: list[tuple[str, int]]


@dataclass
class ConsumerGroup:
    """One group of a ConsumerGroupDescribe answer."""
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[Member] = field(default_factory=list)


def parse_described(group: dict[str, Any]) -> ConsumerGroup:
    """A ConsumerGroupDescribe ``groups`` entry (no error) as a :class:`ConsumerGroup`; members sorted by id."""
    members = [Member(m["member_id"], m.get("instance_id"), m.get("rack_id"), m.get("client_id") or "",
                      m.get("client_host") or "", int(m.get("member_epoch", -1)),
                      list(m.get("subscribed_topic_names") or []), m.get("subscribed_topic_regex"),
                      _partitions(m.get("assignment")), _partitions(m.get("target_assignment")))
               for m in group.get("members") or []]
    return ConsumerGroup(group["group_id"], group.get("group_state") or "Unknown", int(group.get("group_epoch", -1)),
                         int(group.get("assignment_epoch", -1)), group.get("assignor_name") or "",
                         sorted(members, key=lambda m: m.member_id))


def describe_request(group: str) -> dict[str, Any]:
    return {"group_ids": [group], "include_authorized_operations": False}


def find_coordinator_request(group: str) -> dict[str, Any]:
    return {"key": group, "key_type": 0}


def list_groups_request(types: Iterable[str] = ()) -> dict[str, Any]:
    return {"states_filter": [], "types_filter": sorted(types)}


def listed_groups(responses: Iterable[dict[str, Any]], types: Iterable[str] = ()) -> tuple[list[dict[str, str]],
                                                                                          list[str]]:
    """The groups of every broker's ListGroups v5 answer: ``{"group", "type", "state"}`` (Kafka's names), sorted
    and deduplicated, kept to ``types`` when given (the broker filters too; a broker that ignores the filter does
    not widen the list); and the brokers' errors."""
    wanted = {t.lower() for t in types}
    rows: dict[str, dict[str, str]] = {}
    errors = []
    for resp in responses:
        if resp.get("error_code"):
            errors.append(error_for_code(resp["error_code"]).name)
            continue
        for g in resp.get("groups") or []:
            gtype = (g.get("group_type") or "").lower()
            if wanted and gtype not in wanted:
                continue
            rows[g["group_id"]] = {"group": g["group_id"], "type": type_name(gtype),
                                   "state": g.get("group_state") or "Unknown"}
    return [rows[k] for k in sorted(rows)], errors


# ------------------------------------------------------------------------------------------------- the views

STATE_HEADERS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
STATE_EPOCH_HEADERS = ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]


def state_view(g: ConsumerGroup, coordinator: str, verbose: bool) -> tuple[list[str], list[Any], tuple[int, ...]]:
    """``--describe --state [--verbose]`` of Kafka 4: headers, the row, the minimum widths
    (``%-Gs %-Cs %-20s %-20s [%-15s %-25s] %s``, G at least 15, C at least 25)."""
    headers = STATE_HEADERS + (STATE_EPOCH_HEADERS if verbose else []) + ["#MEMBERS"]
    row: list[Any] = [g.group_id, coordinator, g.assignor or MISSING, g.state]
    if verbose:
        row += [g.group_epoch, g.assignment_epoch]
    widths = (15, max(25, len(coordinator)), 20, 20) + ((15, 25) if verbose else ())
    return headers, row + [len(g.members)], widths


def members_view(g: ConsumerGroup, verbose: bool) -> tuple[list[str], list[list[Any]], tuple[int, ...]]:
    """``--describe --members [--verbose]`` of Kafka 4: GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID
    #PARTITIONS, and with --verbose CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT (minimum widths
    15, 15, [17,] 15, 15, 15, then 15, 20, 15, 20)."""
    with_instance = any(m.instance_id for m in g.members)
    headers = (["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else [])
               + ["HOST", "CLIENT-ID", "#PARTITIONS"]
               + (["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"] if verbose else []))
    rows: list[list[Any]] = []
    for m in g.members:
        row: list[Any] = ([g.group_id, m.member_id] + ([m.instance_id or ""] if with_instance else [])
                          + [m.host, m.client_id, len(m.assignment)])
        if verbose:
            row += [m.epoch, assignment_text(m.assignment), g.assignment_epoch, assignment_text(m.target_assignment)]
        rows.append(row)
    widths: tuple[int, ...] = (15, 15) + ((17,) if with_instance else ()) + (15, 15, 15)
    if verbose:
        widths += (15, 20, 15, 20)
    return headers, rows, widths


def owners_of(g: ConsumerGroup) -> dict[tuple[str, int], Member]:
    """Each partition's current owner (the offsets view's CONSUMER-ID / HOST / CLIENT-ID)."""
    return {tp: m for m in g.members for tp in m.assignment}


def as_console(g: ConsumerGroup) -> dict[str, Any]:
    """The console's JSON of a consumer group's KIP-848 side: epochs, members with epochs, current and target
    assignments."""
    return {"group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
            "state": g.state,
            "members": [{"member": m.member_id, "instance": m.instance_id, "rack": m.rack_id, "client": m.client_id,
                         "host": m.host, "epoch": m.epoch, "subscribed": m.subscribed_topics,
                         "regex": m.subscribed_regex,
                         "assignment": [f"{t}-{p}" for t, p in m.assignment],
                         "target_assignment": [f"{t}-{p}" for t, p in m.target_assignment],
                         "target_epoch": g.assignment_epoch} for m in g.members]}


# ------------------------------------------------------------------------------------------------- over the wire

async def describe_consumer_group(bootstrap: str, group: str, timeout: float) -> tuple[ConsumerGroup | None,
                                                                                     str | None]:
    """ConsumerGroupDescribe of ``group`` at its coordinator: the group, or None and the error's name (e.g.
    GROUP_ID_NOT_FOUND for a classic group or none)."""
    found = await bootstrap_request(bootstrap, ApiKey.FIND_COORDINATOR, 3, find_coordinator_request(group), timeout)
    if found["error_code"]:
        return None, error_for_code(found["error_code"]).name
    resp = await peer_request(found["host"], found["port"], ApiKey.CONSUMER_GROUP_DESCRIBE,
                              CONSUMER_GROUP_DESCRIBE_VERSION, describe_request(group), timeout)
    (g,) = resp["groups"]
    if g["error_code"]:
        return None, error_for_code(g["error_code"]).name
    return parse_described(g), None


async def list_groups(bootstrap: str, types: Sequence[str], timeout: float) -> tuple[list[dict[str, str]], list[str]]:
    """ListGroups v5 at every broker of the cluster (a group is listed by its coordinator)."""
    brokers = await broker_addresses(bootstrap, timeout)
    answers = []
    errors = []
    for node, (host, port) in sorted(brokers.items()):
        try:
            answers.append(await peer_request(host, port, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                                              list_groups_request(types), timeout))
        except (OSError, TimeoutError) as exc:
            errors.append(f"broker {node} ({host}:{port}): {exc}")
    rows, refused = listed_groups(answers, types)
    return rows, errors + refused

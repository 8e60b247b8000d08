"""The pure parts of cli/group_kip848.py: Kafka 4's assignment strings, ``--type`` parsing and the merge of every
broker's ListGroups v5 answer (issue 27 item 6). The layouts against a broker are in test_groups_kip848.py."""

from __future__ import annotations

import pytest

from tidelog.cli.group_kip848 import assignment_text, listed_groups, parse_described, parse_types, state_view


def test_assignment_text_is_kafka_get_assignment_string() -> None:
    assert assignment_text([("b", 2), ("a", 10), ("a", 2), ("b", 0)]) == "a:2,10;b:0,2"  # numeric order per topic
    assert assignment_text([]) == "-"


def test_types_parse_as_kafka_consumer_group_types_from_string() -> None:
    assert parse_types("all") == set() and parse_types("") == set()
    assert parse_types("Consumer, CLASSIC") == {"consumer", "classic"}
    with pytest.raises(ValueError, match="Valid types are: classic, consumer"):
        parse_types("share")


def test_listed_groups_merge_brokers_and_keep_the_filter() -> None:
    answers = [{"error_code": 0, "groups": [{"group_id": "b", "group_type": "consumer", "group_state": "Reconciling"},
                                            {"group_id": "a", "group_type": "classic", "group_state": "Empty"}]},
               {"error_code": 0, "groups": [{"group_id": "c", "group_type": "", "group_state": "Stable"}]},
               {"error_code": 15, "groups": []}]
    rows, errors = listed_groups(answers)
    assert rows == [{"group": "a", "type": "Classic", "state": "Empty"},
                    {"group": "b", "type": "Consumer", "state": "Reconciling"},
                    {"group": "c", "type": "Unknown", "state": "Stable"}]
    assert errors == ["COORDINATOR_NOT_AVAILABLE"]
    assert [r["group"] for r in listed_groups(answers, ["consumer"])[0]] == ["b"]


def test_state_view_dashes_an_empty_assignor() -> None:
    g = parse_described({"group_id": "g", "group_state": "Empty", "group_epoch": 3, "assignment_epoch": 3,
                         "assignor_name": "", "members": []})
    headers, row, widths = state_view(g, "h:1  (0)", verbose=True)
    assert row == ["g", "h:1  (0)", "-", "Empty", 3, 3, 0] and widths == (15, 25, 20, 20, 15, 25)
    assert headers[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]

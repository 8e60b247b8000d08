"""The console's filter expressions: what they match, and what they refuse (nothing but the allowed syntax is
ever evaluated)."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.console.filters import FilterError, compile_filter


def rec(**kw: Any) -> dict[str, Any]:
    base = {"key": "k1", "value": '{"total": 120, "items": [{"sku": "a"}], "ok": true}', "headers": {"trace": "abc"},
            "partition": 1, "offset": 42, "timestamp": 1700000000000}
    return {**base, **kw}


@pytest.mark.parametrize(("expr", "expected"), [
    ('headers["trace"] == "abc"', True),
    ('headers["trace"] == "abd"', False),
    ('json["total"] > 100 and offset >= 40', True),
    ('json["total"] > 100 and offset >= 43', False),
    ('json["items"][0]["sku"] in ["a", "b"]', True),
    ('"total" in value and partition in [0, 1]', True),
    ('not (key == "k1") or timestamp < 0', False),
    ("1 < offset < 50", True),
    ('json["missing"] == 1', False),  # a missing key does not match
    ('headers["nope"] == "x"', False),
    ("json > 3", False),  # a comparison that fails does not match
    ("offset != -42", True),
])
def test_matches(expr: str, expected: bool) -> None:
    assert compile_filter(expr)(rec()) is expected


def test_value_not_json() -> None:
    assert compile_filter("json == None")(rec(value="plain text"))
    assert compile_filter("json == None")(rec(value=None))


@pytest.mark.parametrize("expr", [
    "__import__('os').system('true')",
    "key.upper() == 'K1'",
    "[x for x in value]",
    "lambda: 1",
    "offset + 1 == 43",
    "open",
    "headers['a'] if key else value",
    "x == 1",
    "(",
    "a" * 3000,
])
def test_refused(expr: str) -> None:
    with pytest.raises(FilterError):
        compile_filter(expr)

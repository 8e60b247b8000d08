"""Plain-text tables as Kafka's tools print them (issue 25, item 7).

Two layouts, both from Kafka's source:

* ``kafka-consumer-groups.sh`` (and the other Scala-era tools): every column left-aligned and padded with spaces
  to the widest of its header, its values and the tool's minimum width (``%-15s``...), one space between columns,
  the last column not padded. :func:`aligned_lines` with the minimums of the table at hand.
* ``kafka-transactions.sh`` (``ToolsUtils.prettyPrintTable``): every cell padded to its column's width and followed
  by a tab. :func:`tabbed_lines`.

Trailing whitespace is not printed (Kafka's layouts leave some at the end of a padded last column or after the last
tab); a reader splitting lines on whitespace sees the same fields.
"""

from __future__ import annotations

from collections.abc import Sequence


def _widths(headers: Sequence[str], rows: Sequence[Sequence[str]], minimums: Sequence[int] = ()) -> list[int]:
    widths = [max(len(h), minimums[i] if i < len(minimums) else 0) for i, h in enumerate(headers)]
    for row in rows:
        for i, value in enumerate(row[:len(widths)]):
            widths[i] = max(widths[i], len(value))
    return widths


def aligned_lines(headers: Sequence[str], rows: Sequence[Sequence[str]], minimums: Sequence[int] = ()) -> list[str]:
    """kafka-consumer-groups' layout: ``%-Ws`` columns (W = widest of header, values and ``minimums[i]``) joined
    by one space; the last column unpadded."""
    widths = _widths(headers, rows, minimums)

    def line(cells: Sequence[str]) -> str:
        return " ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(headers)] + [line(r) for r in rows]


def tabbed_lines(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """kafka-transactions' layout (ToolsUtils.prettyPrintTable): each cell padded to its column's width, then a
    tab."""
    widths = _widths(headers, rows)

    def line(cells: Sequence[str]) -> str:
        return "\t".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(headers)] + [line(r) for r in rows]


# kafka-consumer-groups' minimum column widths, by view (ConsumerGroupCommand's format strings)
GROUP_OFFSETS_WIDTHS = (15, 15, 10, 15, 15, 15, 15, 15)
GROUP_MEMBERS_WIDTHS = (15, 15, 15, 15, 15)  # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
GROUP_MEMBERS_INSTANCE_WIDTHS = (15, 15, 17, 15, 15, 15)  # with GROUP-INSTANCE-ID
RESET_OFFSETS_WIDTHS = (30, 30, 10, 15)
DELETE_OFFSETS_WIDTHS = (30, 15, 15)


def group_state_widths(coordinator: str) -> tuple[int, ...]:
    """``--describe --state``: Kafka pads the first column to the coordinator's width (at least 25)."""
    return (max(25, len(coordinator)), 25, 20, 15)


def group_list_widths(groups: Sequence[str]) -> tuple[int, ...]:
    """``--list --state``: the group column is the longest id (at least 15) plus 10, the others 20."""
    return (max([15, *map(len, groups)]) + 10, 20, 20)


# ConsumerGroupState.toString() in Kafka's Java client, by confluent-kafka's ConsumerGroupState names
GROUP_STATE_NAMES = {"UNKNOWN": "Unknown", "PREPARING_REBALANCING": "PreparingRebalance",
                     "PREPARING_REBALANCE": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance",
                     "COMPLETING_REBALANCE": "CompletingRebalance", "STABLE": "Stable", "DEAD": "Dead",
                     "EMPTY": "Empty"}


def group_state_name(state: object) -> str:
    name = getattr(state, "name", str(state))
    return GROUP_STATE_NAMES.get(name, name.replace("_", " ").title().replace(" ", ""))

"""The regular-expression subscriptions of a KIP-848 consumer group, resolved per group as Kafka 4's group
coordinator keeps them (``ConsumerGroup.resolvedRegularExpressions``, persisted as ConsumerGroupRegularExpression
records, key type 16, :mod:`consumer_records`).

* A regex a member subscribes to is resolved against the broker's topics (internal topics never match, a full
  match as RE2J's ``matches``) the first time the group needs it, and again on the group's metadata checks (at most
  once a second, :meth:`ConsumerGroupManager._metadata_changed`); the group keeps the resolution (topics, a metadata
  version, the time in ms) and assigns from it. A resolution whose topics changed replaces the old one (its record
  is rewritten); an unchanged one is kept as it is (no record: Kafka rewrites the record on each of its refreshes,
  at most every 10 s).
* A regex no member subscribes to any more (a member changed its regex, left or was removed) loses its resolution:
  its record gets a tombstone in the group's next write. Deleting or converting the group tombstones them all.
* At load the resolutions come back with the group (:func:`consumer_install.install`), so after a restart or a
  coordinator move the members' regex topics are the ones they were assigned from: no new group epoch unless the
  topics really changed meanwhile.

*Version*: Kafka writes the offset of the KRaft metadata image the regex was resolved against. tidelog has no
metadata log; it writes a count of the changes to the topic set this coordinator has seen (raised at load to the
largest version loaded, so it only grows on one coordinator). Kafka reads it only to decide whether to resolve
again, which a tidelog-written version can at most make it do once more.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from tidelog.broker.group.consumer_records import ResolvedRegex

if TYPE_CHECKING:
    import re

    from tidelog.broker.group.consumer_model import ConsumerGroup


class RegexHost(Protocol):
    """What the resolution uses of the :class:`ConsumerGroupManager`."""

    topics_version: int
    _regex_matches: dict[str, frozenset[str]]

    def _compiled(self, pattern: str) -> re.Pattern[str]: ...


def matches(mgr: RegexHost, regex: str, existing: dict[str, int]) -> frozenset[str]:
    """The topics ``regex`` matches now (shared by all groups while the topic list is cached)."""
    matched = mgr._regex_matches.get(regex)
    if matched is None:
        rx = mgr._compiled(regex)
        matched = frozenset(t for t in existing if not t.startswith("__") and rx.fullmatch(t))
        mgr._regex_matches[regex] = matched
    return matched


def _resolve(mgr: RegexHost, g: ConsumerGroup, regex: str, existing: dict[str, int]) -> ResolvedRegex:
    r = ResolvedRegex(tuple(sorted(matches(mgr, regex, existing))), mgr.topics_version, int(time.time() * 1000))
    g.resolved[regex] = r
    g.regex_changes += 1
    return r


def topics(mgr: RegexHost, g: ConsumerGroup, regex: str, existing: dict[str, int]) -> tuple[str, ...]:
    """The topics the group assigns for ``regex``: its resolution (made now if the group has none)."""
    r = g.resolved.get(regex)
    if r is None:
        r = _resolve(mgr, g, regex, existing)
    return r.topics


def refresh(mgr: RegexHost, g: ConsumerGroup, existing: dict[str, int]) -> bool:
    """Resolve the group's regexes again and drop those no member uses; True when a resolution changed (its topics)
    or was dropped."""
    changed = prune(g)
    for regex in {m.subscribed_regex for m in g.members.values() if m.subscribed_regex}:
        old = g.resolved.get(regex)
        now = matches(mgr, regex, existing)
        if old is None or frozenset(old.topics) != now:
            _resolve(mgr, g, regex, existing)
            changed = True
    return changed


def prune(g: ConsumerGroup) -> bool:
    """Drop the resolutions of regexes no member subscribes to (their records are tombstoned); True if any."""
    used = {m.subscribed_regex for m in g.members.values() if m.subscribed_regex}
    gone = [rx for rx in g.resolved if rx not in used]
    for rx in gone:
        del g.resolved[rx]
    if gone:
        g.regex_changes += 1
    return bool(gone)

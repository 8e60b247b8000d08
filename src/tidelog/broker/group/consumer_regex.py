"""The regular-expression subscriptions of a KIP-848 consumer group, resolved per group as Kafka 4's group
coordinator keeps them (``ConsumerGroup.resolvedRegularExpressions``, persisted as ConsumerGroupRegularExpression
records, key type 16, :mod:`consumer_records`).

* Syntax: RE2J's, compiled with RE2 (:mod:`tidelog.broker.re2j`): matching is linear in the topic name; each
  resolution walks the topic list once per distinct regex (the matches are cached for all groups until the topic
  names change), and a group holds at most one regex per member (``group.consumer.max.size``).
* Asynchronous, as Kafka (``maybeUpdateRegularExpressions`` on the coordinator's executor): a due refresh asks
  :class:`~tidelog.broker.group.consumer_regex_async.RegexResolver`, which matches on a thread of its own (linear is
  not free: a regex whose RE2 DFA explodes took 3.4 s over 20,000 long names), at most one resolution in flight per
  group (requests meanwhile coalesce into one more), and applies the result on the loop (:func:`apply`; a new group
  epoch when a regex's topics changed, written through the group's persist). The heartbeat that brought the regex
  is answered at once: until its first resolution lands a regex matches nothing (:func:`topics`), as in Kafka.
* A regex a member subscribes to is resolved against the broker's topics (internal topics never match, a full
  match as RE2J's ``matches``) when the group first needs it, and again on the group's metadata checks (at most
  once a second, :meth:`ConsumerGroupManager._metadata_changed`) when due (:func:`due`); the group keeps the
  resolution (topics, a metadata version, the time in ms) and assigns from it. A resolution whose topics changed
  replaces the old one (its record is rewritten); an unchanged one is kept as it is (no record: Kafka rewrites the
  record on each of its refreshes, at most every 10 s).
* A regex no member subscribes to any more (a member changed its regex, left or was removed) loses its resolution:
  its record gets a tombstone in the group's next write. Deleting or converting the group tombstones them all.
* At load the resolutions come back with the group (:func:`consumer_install.install`), so after a restart or a
  coordinator move the members' regex topics are the ones they were assigned from: no new group epoch unless the
  topics really changed meanwhile.

*Version*: Kafka writes the offset of the KRaft metadata image the regex was resolved against. tidelog has no
metadata log; it writes a count of the changes to the topic set this coordinator has seen (raised at load to the
largest version loaded, so it only grows on one coordinator). Kafka reads it only to decide whether to resolve
again, which a tidelog-written version can at most make it do once more.

*ACLs* (Kafka's ``GroupMetadataManager.refreshRegularExpressions`` / ``filterTopicDescribeAuthorizedTopics``, KAFKA-18813):
with an authorizer, a resolution keeps only the matched topics the principal may DESCRIBE, so a member is never
assigned a topic it could not see in Metadata. The principal is the one of the heartbeat that triggers the refresh
(Kafka passes that request's context to the refresh; a refresh coalesced into a running one uses the newest
request's; the filter runs on the loop when the result is applied): a group has one resolution per regex, so when members with
different principals share a regex the topics are those the last refreshing member's principal may describe, for
every member (as in Kafka). A refresh resolves all the group's regexes together and is due when a regex is new,
the topic set changed (``topics_version``), or the last refresh is older than
``group.consumer.regex.refresh.interval.ms`` (Kafka 4.1's KAFKA-18961 time-based refresh, default 10 minutes), so a
topic an ACL makes visible later is assigned after that interval (a classic member's JoinGroup into the group
refreshes with its principal too). Without a request context (a timer, a load) no refresh is made when an authorizer
is on: an unresolved regex matches nothing until a heartbeat resolves it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.broker.group.consumer_records import ResolvedRegex
from tidelog.broker.re2j import PatternError
from tidelog.broker.security.acls import AclOperation, ResourceType

if TYPE_CHECKING:
    from tidelog.broker.group.consumer_model import ConsumerGroup
    from tidelog.broker.re2j import Pattern

log = logging.getLogger("tidelog.broker.group.consumer")

# (principal, client host) of the request that triggers a resolution (Kafka's AuthorizableRequestContext)
AuthContext = tuple[str, str]


class Resolver(Protocol):
    """What a refresh asks of :class:`~tidelog.broker.group.consumer_regex_async.RegexResolver` (a Protocol here:
    that module imports this one)."""

    def request(self, g: ConsumerGroup, existing: dict[str, int]) -> bool: ...


class RegexHost(Protocol):
    """What the resolution uses of the :class:`ConsumerGroupManager`."""

    topics_version: int
    regex_refresh_ms: int
    auth_context: AuthContext | None
    _regex_matches: dict[str, frozenset[str]]

    @property
    def coordinator(self) -> Any: ...

    def _compiled(self, pattern: str) -> Pattern: ...

    @property
    def regex_resolver(self) -> Resolver: ...


def compiled_or_none(mgr: RegexHost, regex: str) -> Pattern | None:
    """The compiled regex; None (logged) for one RE2 rejects, which only a regex loaded from records can be (a
    heartbeat's is validated): it matches nothing."""
    try:
        return mgr._compiled(regex)
    except PatternError as exc:
        log.warning("subscribed regex does not compile, it matches no topic",
                    extra={"kv": {"regex": regex[:200], "error": exc.description}})
        return None


# the resolver thread hands the GIL over at least this often (else only CPython's forced switch every 5 ms, after a
# match that may itself take ms): the loop's wake-ups wait less for it (bench/kip848_regex_async.py: p99 ~3 -> ~1-2
# ms on a quiet machine, for the same worker time; noisy under load)
YIELD_S = 0.001


def match_all(patterns: dict[str, Pattern | None], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """The topics each pattern fully matches among ``names`` (internal topics never; None matches nothing). Runs on
    the resolver thread (:mod:`consumer_regex_async`; without a loop, in :func:`matches`): reads only its arguments."""
    out: dict[str, set[str]] = {rx: set() for rx in patterns}
    live = [(rx, p) for rx, p in patterns.items() if p is not None]
    clock, pause = time.perf_counter, time.sleep
    last = clock()
    for name in names:
        if name.startswith("__"):
            continue
        for rx, p in live:
            if p.fullmatch(name) is not None:
                out[rx].add(name)
        now = clock()
        if now - last >= YIELD_S:  # hand the GIL to the loop now rather than at the next forced switch (5 ms)
            pause(0)
            last = clock()
    return {rx: frozenset(s) for rx, s in out.items()}


def matches(mgr: RegexHost, regex: str, existing: dict[str, int]) -> frozenset[str]:
    """The topics ``regex`` matches now, before any ACL (shared by all groups while the topic list is cached)."""
    matched = mgr._regex_matches.get(regex)
    if matched is None:
        matched = mgr._regex_matches[regex] = match_all({regex: compiled_or_none(mgr, regex)}, existing)[regex]
    return matched


def used(g: ConsumerGroup) -> set[str]:
    """The regexes the group's members subscribe to."""
    return {m.subscribed_regex for m in g.members.values() if m.subscribed_regex}


def _describable(mgr: RegexHost, topics: frozenset[str], ctx: AuthContext | None) -> frozenset[str] | None:
    """The topics the principal of ``ctx`` may DESCRIBE (all without an authorizer); None when an authorizer is on
    and no request context is known (nothing can be resolved then)."""
    auth = mgr.coordinator.broker.authorizer
    if auth is None:
        return topics
    if ctx is None:
        return None
    principal, host = ctx
    return frozenset(t for t in topics
                     if auth.authorize(principal, host, AclOperation.DESCRIBE, ResourceType.TOPIC, t))


def _now_ms() -> int:
    return int(time.time() * 1000)


def topics(g: ConsumerGroup, regex: str) -> tuple[str, ...]:
    """The topics the group assigns for ``regex``: its resolution, none until the first one lands (as Kafka)."""
    r = g.resolved.get(regex)
    return () if r is None else r.topics


def refresh(mgr: RegexHost, g: ConsumerGroup, existing: dict[str, int]) -> bool:
    """Drop the resolutions no member uses and, when a refresh is due (a new regex, the topic set changed, or
    ``group.consumer.regex.refresh.interval.ms`` since the last one), ask the resolver
    (:mod:`consumer_regex_async`) to resolve all the group's regexes again with the current request's principal,
    off the loop; True when a resolution was dropped (or, resolved at once without a loop, changed)."""
    changed = prune(g)
    if not due(mgr, g):
        return changed
    return mgr.regex_resolver.request(g, existing) or changed


def due(mgr: RegexHost, g: ConsumerGroup) -> bool:
    """Whether the group's regexes must be resolved again: a regex is new, the topic set changed, or
    ``group.consumer.regex.refresh.interval.ms`` passed since the last refresh."""
    regexes = used(g)
    return bool(regexes) and (any(rx not in g.resolved for rx in regexes) or g.regex_version != mgr.topics_version
                              or _now_ms() - g.regex_refreshed_ms >= mgr.regex_refresh_ms)


def apply(mgr: RegexHost, g: ConsumerGroup, found: dict[str, frozenset[str]], version: int,
          ctx: AuthContext | None) -> bool:
    """Apply a resolution (regex -> matched topics before ACLs, against topic-set ``version``) made with the
    principal of ``ctx``: the regexes still subscribed get their describable topics; True when a resolution's
    topics changed (a new one counts)."""
    allowed = _describable(mgr, frozenset().union(*found.values()), ctx)
    if allowed is None:
        return False
    now_ms = _now_ms()
    regexes = used(g)
    changed = False
    for regex, matched in found.items():
        if regex not in regexes:
            continue  # its member changed regex or left meanwhile
        now = matched & allowed
        old = g.resolved.get(regex)
        if old is None or frozenset(old.topics) != now:
            g.resolved[regex] = ResolvedRegex(tuple(sorted(now)), version, now_ms)
            g.regex_changes += 1
            changed = True
    if regexes <= found.keys():  # every regex resolved: the group is up to date
        g.regex_version = version
        g.regex_refreshed_ms = now_ms
    return changed


def prune(g: ConsumerGroup) -> bool:
    """Drop the resolutions of regexes no member subscribes to (their records are tombstoned); True if any."""
    regexes = used(g)
    gone = [rx for rx in g.resolved if rx not in regexes]
    for rx in gone:
        del g.resolved[rx]
    if gone:
        g.regex_changes += 1
    return bool(gone)

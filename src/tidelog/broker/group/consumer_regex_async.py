"""KIP-848 regex resolution off the network loop, as Kafka's group coordinator does it (branch regexloop).

Kafka resolves a consumer group's ``SubscribedTopicRegex`` subscriptions in the background
(``GroupMetadataManager.maybeUpdateRegularExpressions`` schedules ``refreshRegularExpressions`` on the coordinator's
``CoordinatorExecutor``, one task per group at a time; ``handleRegularExpressionsResult`` applies the result: the
ConsumerGroupRegularExpression records, a new group epoch when the topics changed). The heartbeat that triggers it
is answered at once with the member's current assignment; a regex not resolved yet matches nothing.

:class:`RegexResolver` does the same for tidelog:

* the match work (every regex not in the shared match cache against every topic name: linear, but 3.4 s for a
  regex whose RE2 DFA explodes over 20,000 long names, bench/kip848_regex_re2.py) runs on a thread of its own
  (``tidelog-regex-resolver``, at a lower CPU priority, as the heavy produce validations), never on the loop;
* at most one resolution per group is in flight; a refresh asked for meanwhile (a member changed its regex, the
  topic set changed) is remembered and made once more after it, with the newest request context (later requests
  coalesce into that one);
* back on the loop the result is applied only if the group is still the same object (not deleted, converted or
  rolled back meanwhile) and the topic set has not changed since it started (``topics_version``; else it resolves
  again, up to twice in a row, then applies the result as of its version, the next refresh being due then); the ACL filter (DESCRIBE, with the principal of the heartbeat that asked) runs there, over the matched
  topics only (cached authorizer lookups); applying bumps the group epoch when a regex's topics changed and writes
  the group's records through :meth:`ConsumerGroupStore.persist` (whose failed write rolls the group back);
* without a running loop (a unit test driving the manager directly) the resolution is made at once, as before.

The worker's time per resolution is logged at DEBUG and counted (``tidelog_consumer_regex_resolutions_total``,
``tidelog_consumer_regex_resolution_seconds_total``, ``tidelog_consumer_regex_resolutions_in_flight``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tidelog.broker.group import consumer_regex
from tidelog.broker.request_pool import HEAVY_NICE, _lower_priority

if TYPE_CHECKING:
    from tidelog.broker.group.consumer_model import ConsumerGroup
    from tidelog.broker.group.consumer_regex import AuthContext

log = logging.getLogger("tidelog.broker.group.consumer")

_UNSET: Any = object()
# results resolved again in a row because the topic set changed meanwhile; the next one is applied as of its version
# (the group's next metadata check resolves again), so topics created without pause cannot keep a group unresolved
MAX_STALE = 2
class RegexResolver:
    """The asynchronous regex resolutions of one :class:`ConsumerGroupManager` (see the module docstring)."""

    def __init__(self, mgr: Any, threads: int = 1) -> None:
        self.mgr = mgr
        self.threads = max(1, threads)
        self._executor: ThreadPoolExecutor | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: dict[str, AuthContext | None] = {}  # group -> context of the refresh asked while one ran
        self.resolutions = 0  # worker resolutions finished
        self.seconds = 0.0  # their worker time
        self.coalesced = 0  # refreshes asked for while one was in flight for the group
        self.stale = 0  # results not applied: the topic set changed meanwhile (resolved again)

    def in_flight(self, group_id: str) -> bool:
        return group_id in self._running

    def request(self, g: ConsumerGroup, existing: dict[str, int]) -> bool:
        """Ask for a resolution of the group's regexes with the current request's context; True when the group's
        resolutions changed now (only when resolved at once, without a running loop)."""
        ctx = self.mgr.auth_context
        if self.mgr.coordinator.broker.authorizer is not None and ctx is None:
            return False  # no principal to filter with (a timer, a load): a heartbeat resolves it
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            found = {rx: consumer_regex.matches(self.mgr, rx, existing) for rx in consumer_regex.used(g)}
            return consumer_regex.apply(self.mgr, g, found, self.mgr.topics_version, ctx)
        gid = g.group_id
        if gid in self._running:
            self._again[gid] = ctx
            self.coalesced += 1
            return False
        self._running[gid] = loop.create_task(self._run(g, ctx))
        return False

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="tidelog-regex-resolver",
                                                initializer=_lower_priority, initargs=(HEAVY_NICE,))
        return self._executor

    async def _run(self, g: ConsumerGroup, ctx: AuthContext | None) -> None:
        mgr, gid = self.mgr, g.group_id
        stale = 0
        try:
            while mgr.groups.get(gid) is g:
                regexes = consumer_regex.used(g)
                if not regexes:
                    return
                existing = mgr._existing_topics()
                version = mgr.topics_version
                found = {rx: mgr._regex_matches[rx] for rx in regexes if rx in mgr._regex_matches}
                todo = {rx: consumer_regex.compiled_or_none(mgr, rx) for rx in regexes - found.keys()}
                if todo:
                    t0 = time.perf_counter()
                    # the topic dict is replaced, never changed, when the topic list is read again: safe to walk
                    fut = asyncio.get_running_loop().run_in_executor(
                        self._pool(), functools.partial(consumer_regex.match_all, todo, existing))
                    got = await asyncio.shield(fut)
                    took = time.perf_counter() - t0
                    self.resolutions += 1
                    self.seconds += took
                    log.debug("consumer group regexes resolved", extra={"kv": {
                        "group": gid, "regexes": len(todo), "topics": len(existing), "ms": round(took * 1000, 3)}})
                    if mgr.topics_version == version:  # still the same topic set: share the matches
                        mgr._regex_matches.update(got)
                    found.update(got)
                if mgr.groups.get(gid) is not g:
                    return  # deleted, converted or rolled back meanwhile: a heartbeat asks again
                mgr._existing_topics()  # read again if its cache expired meanwhile (topics_version follows)
                if mgr.topics_version != version and stale < MAX_STALE:
                    self.stale += 1
                    stale += 1
                    continue  # the topic set changed meanwhile: resolve again
                stale = 0  # (past MAX_STALE it is applied as of its version: the next metadata check is due)
                if consumer_regex.apply(mgr, g, found, version, ctx):
                    mgr.regexes_applied(g)
                    await mgr.store.persist(gid)  # the group's write path (rolled back if the write fails)
                again = self._again.pop(gid, _UNSET)  # (after the write: a request during it counts too)
                if again is _UNSET or mgr.groups.get(gid) is not g or not consumer_regex.due(mgr, g):
                    return  # (a heartbeat that asked meanwhile for what this resolution brought: nothing more)
                ctx = again
        except Exception:  # never kill the loop's task silently: the next heartbeat asks again
            log.exception("consumer group regex resolution failed", extra={"kv": {"group": gid}})
        finally:  # synchronously with the task's end: a refresh asked after this starts a new task
            if self._running.get(gid) is asyncio.current_task():
                del self._running[gid]
            self._again.pop(gid, None)

    def shutdown(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        self._running.clear()
        self._again.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def rows(self) -> Iterable[tuple[str, str, dict[str, str], float]]:
        yield ("tidelog_consumer_regex_resolutions_total", "KIP-848 regex resolutions run on the resolver thread",
               {}, float(self.resolutions))
        yield ("tidelog_consumer_regex_resolution_seconds_total", "Time the resolver thread spent matching KIP-848 "
               "regexes against the topic names", {}, self.seconds)
        yield ("tidelog_consumer_regex_resolutions_in_flight", "Consumer groups with a regex resolution in flight "
               "(at most one each)", {}, float(len(self._running)))

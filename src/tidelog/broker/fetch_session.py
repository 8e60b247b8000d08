"""Incremental fetch sessions (KIP-227, Kafka's ``FetchSession`` / ``FetchSessionCache``).

A consumer that sends Fetch with ``session_id`` 0 and ``session_epoch`` 0 asks for a session: the broker
remembers the partitions of that full request (fetch offset, max bytes, leader epoch) and answers with a session
id. Later requests carry that id and the next epoch (1, 2, ...) and list only the partitions whose fetch state
changed (plus ``forgotten_topics_data`` to drop some); the broker fetches every partition of the session and
answers only those with something to say: records, an error, or a high watermark, last stable offset or log
start offset different from what it last sent for that partition. An unknown id is FETCH_SESSION_ID_NOT_FOUND,
a wrong epoch INVALID_FETCH_SESSION_EPOCH (the client then starts over with a full request); epoch -1 closes the
session (the request is then served as a sessionless full fetch), epoch 0 with an id replaces it.

Followers (``replica_id`` >= 0) open sessions too (issue 30; Kafka's replica fetchers do, through the same
``FetchSessionHandler``): a cached partition then also keeps the follower's ``last_fetched_epoch`` (KIP-320),
and a ``diverging_epoch`` answer always counts as news. The client side is :class:`FollowerSessionState`
(``cluster/fetcher.py``): which partitions an incremental request must list, which it forgets.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000). **Difference:**
when it is full, the least recently used session is evicted if it has been idle for
``min.incremental.fetch.session.eviction.ms`` (120 s), else the new request gets no session (id 0, as Kafka
answers when it cannot create one); Kafka also weighs sessions by their partition count.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

TopicPartition = tuple[str, int]


def _records_size(records: object) -> int:
    if records is None:
        return 0
    size = getattr(records, "size", None)  # RecordsChunks (file regions) carry their size
    return size if isinstance(size, int) else len(records)  # type: ignore[arg-type]


@dataclass(slots=True)
class CachedPartition:
    topic_id: bytes
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int = -1  # a follower's (KIP-320); -1 for consumers
    # what the last response that included this partition said (-2: never sent, so the first one is sent)
    high_watermark: int = -2
    last_stable_offset: int = -2
    log_start_offset: int = -2

    def must_respond(self, out: dict) -> bool:
        """Whether a response entry carries news (and remember what it said when it does)."""
        changed = (
            out["error_code"] != 0
            or _records_size(out["records"]) > 0
            or (out.get("diverging_epoch") or {}).get("epoch", -1) >= 0
            or out["high_watermark"] != self.high_watermark
            or out["last_stable_offset"] != self.last_stable_offset
            or out["log_start_offset"] != self.log_start_offset
        )
        if changed:
            self.high_watermark = out["high_watermark"]
            self.last_stable_offset = out["last_stable_offset"]
            self.log_start_offset = out["log_start_offset"]
        return changed


@dataclass(slots=True)
class FetchSession:
    session_id: int
    partitions: OrderedDict[TopicPartition, CachedPartition] = field(default_factory=OrderedDict)
    next_epoch: int = 1
    last_used: float = 0.0

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= _INT32_MAX else self.next_epoch + 1


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000.0
        self._clock = clock
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._rng = random.Random()
        self.evictions = 0
        self.created = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        s = self._sessions.get(session_id)
        if s is not None:
            s.last_used = self._clock()
            self._sessions.move_to_end(session_id)
        return s

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, partitions: OrderedDict[TopicPartition, CachedPartition]) -> FetchSession | None:
        """A new session holding ``partitions``, or None when the cache has no room for it."""
        if self.max_slots <= 0:
            return None
        now = self._clock()
        if len(self._sessions) >= self.max_slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < self.eviction_s:
                return None
            del self._sessions[oldest_id]
            self.evictions += 1
        session_id = self._rng.randint(1, _INT32_MAX)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, _INT32_MAX)
        s = FetchSession(session_id, partitions, 1, now)
        self._sessions[session_id] = s
        self.created += 1
        return s

    def rows(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Kafka's NumIncrementalFetchSessions / NumIncrementalFetchPartitionsCached gauges."""
        return [
            ("tidelog_fetch_sessions", "Incremental fetch sessions in the cache", {}, float(len(self))),
            ("tidelog_fetch_session_partitions", "Partitions held by the cached fetch sessions", {},
             float(self.partitions())),
            ("tidelog_fetch_session_evictions", "Fetch sessions evicted to make room", {}, float(self.evictions)),
            ("tidelog_fetch_sessions_created", "Fetch sessions created", {}, float(self.created)),
        ]


# ---------------------------------------------------------------------------------------------------- client side


@dataclass(slots=True)
class _Sent:
    """What the session on the leader holds for one partition: what this client last sent for it."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


class FollowerSessionState:
    """A replica fetcher's side of one incremental fetch session (Kafka's ``FetchSessionHandler``).

    :meth:`build` turns the partitions to fetch now into ``(session_id, session_epoch, partitions to list,
    forgotten)``: a full request (epoch 0, every partition) while there is no session, else only the partitions
    new to the session or whose fetch state changed, and the session's partitions not fetched now as forgotten
    (removed, truncating, backing off). :meth:`answered` takes the leader's answer: its session id (0: no
    session, stay with full requests), or the error that starts over (FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH). :meth:`reset` when the connection closes or a request was abandoned.
    """

    __slots__ = (
        "_pending",
        "_pending_forgotten",
        "_sent",
        "full_requests",
        "incremental_requests",
        "next_epoch",
        "session_id",
    )

    def __init__(self) -> None:
        self.session_id = 0
        self.next_epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, _Sent] = {}
        self._pending: dict[TopicPartition, _Sent] = {}
        self._pending_forgotten: list[TopicPartition] = []
        self.full_requests = 0
        self.incremental_requests = 0

    def reset(self) -> None:
        self.session_id = 0
        self.next_epoch = INITIAL_EPOCH
        self._sent.clear()
        self._pending.clear()
        self._pending_forgotten.clear()

    def build(
        self, wanted: dict[TopicPartition, tuple[int, int, int, int, int]]
    ) -> tuple[int, int, list[TopicPartition], list[TopicPartition]]:
        """``wanted``: partition -> (fetch_offset, current_leader_epoch, last_fetched_epoch, log_start_offset,
        max_bytes). Returns (session_id, session_epoch, partitions to list, partitions to forget)."""
        self._pending = {tp: _Sent(*state) for tp, state in wanted.items()}
        if self.session_id == 0:
            self._pending_forgotten = []
            self.full_requests += 1
            return 0, INITIAL_EPOCH, list(wanted), []
        listed = []
        sent = self._sent
        for tp, new in self._pending.items():
            old = sent.get(tp)
            if old is None or old != new:
                listed.append(tp)
        self._pending_forgotten = [tp for tp in sent if tp not in wanted]
        self.incremental_requests += 1
        return self.session_id, self.next_epoch, listed, self._pending_forgotten

    def answered(self, error_code: int, session_id: int) -> None:
        """The leader's answer to the request :meth:`build` made last."""
        if error_code:
            self.reset()  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...: a full request next
            return
        if self.session_id == 0:  # the answer to a full request: a new session, or none (id 0)
            self.session_id = session_id
            self._sent = self._pending
            self.next_epoch = 1 if session_id else INITIAL_EPOCH
        elif session_id != self.session_id:  # the leader dropped it: start over
            self.reset()
            return
        else:
            for tp in self._pending_forgotten:
                self._sent.pop(tp, None)
            self._sent.update(self._pending)
            self.next_epoch = 1 if self.next_epoch >= _INT32_MAX else self.next_epoch + 1
        self._pending = {}
        self._pending_forgotten = []

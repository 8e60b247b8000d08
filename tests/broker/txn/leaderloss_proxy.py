"""A Kafka proxy that makes a partition's leader look lost to one transactional client, for bug 9 of
docs/RELIABILITY.md (what a ZooKeeper session expiry did in Jepsen txn seed 21).

Armed with ``arm(transactional_id, topic, partition)``:

* every Produce answer to that transactional id is rewritten, for that partition, to NOT_LEADER_OR_FOLLOWER (6)
  with base offset -1 (what a Kafka leader that resigned answers a pending acks=all Produce, DelayedProduce) --
  the broker has appended the batch all the same;
* from the first such answer on, every Metadata answer (any client) shows the partition without a leader
  (LEADER_NOT_AVAILABLE, leader -1), as the controller's view did while the broker's session was gone; so the
  client keeps the message in its partition queue, waiting for a leader.

``release()`` ends both. Each answer is decoded and encoded again with tidelog's codec at the version the client
asked for (``produce_versions`` lists them). The frame reader is ``tests/cluster/faultproxy.py``'s; the proxy
plumbing (listening, connecting, the loop) ``FrameProxy`` and the request parser those of
``tests/jepsen/tornproxy.py`` (both loaded by path).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import struct
import sys
import threading
from pathlib import Path
from typing import Any

from tidelog.protocol import codec

PRODUCE, METADATA = 0, 3
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE = 6, 5
_HEAD = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_TESTS = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> Any:
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


_faultproxy = _load("tidelog_test_faultproxy", _TESTS / "cluster" / "faultproxy.py")
_tornproxy = _load("tidelog_test_tornproxy", _TESTS / "jepsen" / "tornproxy.py")
_read_frame = _faultproxy._read_frame
parse_request = _tornproxy.parse_request


def _encode(api_key: int, version: int, corr: int, body: dict[str, Any]) -> bytes:
    frame = b"".join(bytes(c) for c in codec.encode_response(api_key, version, corr, body))
    if frame[:4] != len(frame[4:]).to_bytes(4, "big"):  # the size prefix (encode_response includes it)
        frame = len(frame).to_bytes(4, "big") + frame
    return frame


class LeaderLossProxy(_tornproxy.FrameProxy):
    """Listens on 127.0.0.1 (a free port), forwards to ``target`` (set once the broker runs)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._armed: tuple[str, str, int] | None = None
        self.hiding = False
        self.produce_versions: set[int] = set()
        self.produce_rewritten = 0  # Produce answers turned into NOT_LEADER_OR_FOLLOWER
        self.metadata_hidden = 0  # Metadata answers showing the partition without a leader
        self.inflight_produce = 0  # Produce requests of the armed transactional id not answered yet
        self.hidden_since_rewrite = 0  # hidden Metadata answers asked for after the latest rewritten Produce answer

    # -- the test's thread --------------------------------------------------------------------------------------

    def arm(self, transactional_id: str, topic: str, partition: int) -> None:
        with self._lock:
            self._armed = (transactional_id, topic, partition)

    def release(self) -> None:
        with self._lock:
            self._armed = None
            self.hiding = False

    def settled(self) -> bool:
        """The client holds the message in its queue: a Produce answer was rewritten, nothing of the armed id is in
        flight, and two Metadata requests sent after that answer (the client asks once it has handled it) were
        answered without the leader."""
        with self._lock:
            return self.produce_rewritten > 0 and self.inflight_produce == 0 and self.hidden_since_rewrite >= 2

    # -- the proxies' loop ------------------------------------------------------------------------------------

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        asked: dict[int, tuple[int, int, bool, int]]) -> None:
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while (frame := await _read_frame(reader)) is not None:
                _size, key, version, corr = _HEAD.unpack_from(frame, 0)
                armed = False
                if key == PRODUCE:
                    p = parse_request(frame)
                    with self._lock:
                        self.produce_versions.add(version)
                        armed = self._armed is not None and p is not None and p[3] == self._armed[0]
                        if armed:
                            self.inflight_produce += 1
                if key in (PRODUCE, METADATA):
                    asked[corr] = (key, version, armed, self.produce_rewritten)
                writer.write(frame)
                await writer.drain()

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         asked: dict[int, tuple[int, int, bool, int]]) -> None:
        with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
            while (frame := await _read_frame(reader)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                what = asked.pop(corr, None)
                if what is not None:
                    frame = self._rewrite(frame, corr, *what)
                writer.write(frame)
                await writer.drain()

    def _rewrite(self, frame: bytes, corr: int, key: int, version: int, armed_produce: bool, gen: int) -> bytes:
        with self._lock:
            armed = self._armed
            if armed_produce:
                self.inflight_produce -= 1
            if armed is None or (key == METADATA and not self.hiding) or (key == PRODUCE and not armed_produce):
                return frame
            _tid, topic, partition = armed
            _corr, body = codec.decode_response(key, version, frame[4:])
            changed = False
            if key == PRODUCE:
                for t in body.get("responses") or ():
                    if t.get("name") != topic:
                        continue
                    for pr in t.get("partition_responses") or ():
                        if pr.get("index") == partition:
                            pr["error_code"], pr["base_offset"] = NOT_LEADER_OR_FOLLOWER, -1
                            pr["log_append_time_ms"], pr["log_start_offset"] = -1, -1
                            if version >= 8:
                                pr["error_message"] = "leadership lost (proxy)"
                            changed = True
                if changed:
                    self.produce_rewritten += 1
                    self.hidden_since_rewrite = 0
                    self.hiding = True
            else:
                for t in body.get("topics") or ():
                    if t.get("name") != topic:
                        continue
                    for part in t.get("partitions") or ():
                        if part.get("partition_index") == partition:
                            part["error_code"], part["leader_id"] = LEADER_NOT_AVAILABLE, -1
                            changed = True
                if changed:
                    self.metadata_hidden += 1
                    if gen == self.produce_rewritten:  # asked after the client had the latest NOT_LEADER answer
                        self.hidden_since_rewrite += 1
            return _encode(key, version, corr, body) if changed else frame

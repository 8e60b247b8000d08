"""Size-prefixed frames: every Kafka request and response is ``int32 size | payload``."""

from __future__ import annotations

from struct import Struct

from tidelog.protocol.exceptions import FrameTooLargeError

MAX_REQUEST_SIZE = 104857600
"""Default largest request payload accepted (Kafka's ``socket.request.max.bytes``, 100 MiB)."""

SIZE_PREFIX = 4
_I32 = Struct(">i")


def read_frame_size(buf: bytes | bytearray | memoryview, max_size: int = MAX_REQUEST_SIZE) -> int | None:
    """The payload size announced at the start of ``buf``, or None if fewer than 4 bytes are buffered.

    Raises FrameTooLargeError for a negative size or one above ``max_size``, before anything is allocated.
    """
    if len(buf) < SIZE_PREFIX:
        return None
    (size,) = _I32.unpack_from(buf, 0)
    if size < 0 or size > max_size:
        raise FrameTooLargeError(f"frame size {size} outside 0..{max_size}")
    return size


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _I32.pack(len(payload)) + payload


class FrameReader:
    """Sans-io splitter: feed received bytes, take complete frames (payloads without the size prefix)."""

    __slots__ = ("_buf", "max_size")

    def __init__(self, max_size: int = MAX_REQUEST_SIZE) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next complete payload, or None when more bytes are needed."""
        size = read_frame_size(self._buf, self.max_size)
        if size is None or len(self._buf) < SIZE_PREFIX + size:
            return None
        payload = bytes(self._buf[SIZE_PREFIX : SIZE_PREFIX + size])
        del self._buf[: SIZE_PREFIX + size]
        return payload

    def __iter__(self):  # type: ignore[no-untyped-def]
        while (f := self.next_frame()) is not None:
            yield f

    @property
    def buffered(self) -> int:
        return len(self._buf)

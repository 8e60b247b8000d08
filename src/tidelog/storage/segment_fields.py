"""A segment's append state under the names :class:`~tidelog.storage.segment.LogSegment` uses.

The fields an append changes (the ``.log``'s descriptor and size, the end of the reserved disk blocks, the index
counter and interval, the max and rolling timestamps, the created time and roll jitter) live in a
:class:`~tidelog.storage.segment_state.SegmentState` (a C type of the storage extension, whose append fast path
changes them, or its pure-Python twin): the properties below read and set them there, so that the segment's
Python code and the C code share one state. :class:`LogSegment` derives from :class:`SegmentStateFields`.
"""

from __future__ import annotations

from typing import Any

from tidelog.storage.file_handles import FileHandle


class SegmentStateFields:
    """The append state's fields of a segment as attributes (see the module docstring)."""

    _st: Any  # a SegmentState: the C type or its pure-Python twin
    _file_handle: FileHandle | None

    @property
    def _handle(self) -> FileHandle | None:
        return self._file_handle

    @_handle.setter
    def _handle(self, handle: FileHandle | None) -> None:
        self._file_handle = handle
        self._st.fd = -1 if handle is None else handle.fd

    @property
    def _size(self) -> int:
        return self._st.size

    @_size.setter
    def _size(self, value: int) -> None:
        self._st.size = value

    @property
    def _prealloc_end(self) -> int:
        return self._st.prealloc_end

    @_prealloc_end.setter
    def _prealloc_end(self, value: int) -> None:
        self._st.prealloc_end = value

    @property
    def _bytes_since_last_index_entry(self) -> int:
        return self._st.bytes_since_last_index_entry

    @_bytes_since_last_index_entry.setter
    def _bytes_since_last_index_entry(self, value: int) -> None:
        self._st.bytes_since_last_index_entry = value

    @property
    def index_interval_bytes(self) -> int:
        return self._st.index_interval_bytes

    @index_interval_bytes.setter
    def index_interval_bytes(self, value: int) -> None:
        self._st.index_interval_bytes = value

    @property
    def _max_ts_and_offset(self) -> tuple[int, int] | None:
        return self._st.max_ts_and_offset

    @_max_ts_and_offset.setter
    def _max_ts_and_offset(self, value: tuple[int, int] | None) -> None:
        self._st.max_ts_and_offset = value

    @property
    def _rolling_based_ts(self) -> int | None:
        return self._st.rolling_based_ts

    @_rolling_based_ts.setter
    def _rolling_based_ts(self, value: int | None) -> None:
        self._st.rolling_based_ts = value

    @property
    def created_ms(self) -> int:
        return self._st.created_ms

    @created_ms.setter
    def created_ms(self, value: int) -> None:
        self._st.created_ms = value

    @property
    def roll_jitter_ms(self) -> int:
        return self._st.roll_jitter_ms

    @roll_jitter_ms.setter
    def roll_jitter_ms(self, value: int) -> None:
        self._st.roll_jitter_ms = value

    @property
    def state(self) -> Any:
        """The append state (for the log's append fast path)."""
        return self._st

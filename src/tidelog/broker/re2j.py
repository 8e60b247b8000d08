"""Client-supplied regular expressions, compiled as Kafka compiles them: with RE2 (Kafka: Google's RE2J), never
with Python's backtracking ``re``.

Kafka reads the KIP-848 ``SubscribedTopicRegex`` of a ConsumerGroupHeartbeat (and KIP-1152's
``TransactionalIdPattern`` of ListTransactions) with ``com.google.re2j.Pattern``: matching takes time linear in the
pattern and the subject, so no pattern a client sends can stall the coordinator. Python's ``re`` backtracks (a
pattern like ``(a+)+$`` or ``(a|aa)*c`` against a topic named ``aaaa...a`` takes exponential time, all of it on the
broker's event loop), so tidelog compiles these patterns with Google's RE2 (``google-re2``, module ``re2``), whose
syntax is the one RE2J implements: no backreferences (``\\1``) nor lookaround (``(?=``, ``(?!``, ``(?<=``); such a
pattern fails to compile, as in Kafka. A match is a full match of the name (RE2J's ``matcher(name).matches()``).

Bounds: a compiled pattern (its program and its lazily built DFAs) is limited to RE2's default ``max_mem`` of 8 MiB
(a larger program fails to compile: "pattern too large"); a smaller budget is worse, not safer: the DFA runs out and
RE2 falls back to its NFA, 100-1000x slower (a 2 MiB budget made ``(?:\\w{1,40}){1,25}x`` take 17 ms per 249-character
name instead of 3 us). RE2's own error logging is off (a client could otherwise fill the broker's stderr). Linear
is not free: a pattern whose DFA explodes (``[ab]*a[ab]{30}c``) costs up to ~0.1 ms per long name
(bench/kip848_regex_re2.py).
"""

from __future__ import annotations

from typing import Any, Protocol

import re2

# RE2's budget for one compiled pattern (its program and its lazily built DFAs): RE2's default
MAX_MEM = 8 << 20


class Pattern(Protocol):
    """What tidelog uses of a compiled RE2 pattern."""

    def fullmatch(self, text: str) -> Any: ...


class PatternError(ValueError):
    """A pattern RE2 (and so RE2J) does not accept; ``description`` is RE2's reason (RE2J's ``getDescription``
    differs in wording)."""

    def __init__(self, pattern: str, description: str) -> None:
        super().__init__(f"{pattern!r}: {description}")
        self.pattern = pattern
        self.description = description


def _options() -> Any:
    opts = re2.Options()
    opts.log_errors = False
    opts.max_mem = MAX_MEM
    opts.never_capture = True  # only whether it matches is read: no submatch tracking
    return opts


_OPTIONS = _options()


try:  # google-re2's pybind11 object: one call per match, without the module's Python-level _Match building
    from re2 import _re2

    _ANCHOR_BOTH: Any = _re2.RE2.Anchor.ANCHOR_BOTH
except (ImportError, AttributeError):  # pragma: no cover - another google-re2 layout: the public API
    _ANCHOR_BOTH = None


class _FullMatcher:
    """A compiled pattern whose ``fullmatch`` calls RE2's ``Match`` (anchored at both ends) directly: ~1.3 us a
    topic name instead of ~4 us through ``re2._Regexp.fullmatch`` (bench/kip848_regex_re2.py)."""

    __slots__ = ("_match",)

    def __init__(self, compiled: Any) -> None:
        self._match = compiled._regexp.Match

    def fullmatch(self, text: str) -> bool | None:
        data = text.encode()
        return True if self._match(_ANCHOR_BOTH, data, 0, len(data))[0][0] >= 0 else None


def compile_pattern(pattern: str) -> Pattern:
    """``pattern`` compiled with RE2 (linear-time matching); raises :class:`PatternError` when RE2 rejects it.
    ``fullmatch(name)`` is truthy when the whole name matches (None otherwise)."""
    try:
        rx = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else ""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise PatternError(pattern, text or "invalid pattern") from None
    if _ANCHOR_BOTH is not None:
        try:
            return _FullMatcher(rx)
        except AttributeError:  # pragma: no cover - another google-re2 layout: the public API
            pass
    out: Pattern = rx
    return out

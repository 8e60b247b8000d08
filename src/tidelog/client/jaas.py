"""``sasl.jaas.config``: one JAAS login module and its options, as Kafka's ``JaasConfig`` parses it (client and
broker settings alike)."""

from __future__ import annotations

import re

_JAAS_RE = re.compile(
    r"\s*(?P<module>[A-Za-z0-9_.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*(?P<opts>.*?)\s*;\s*$",
    re.S,
)
_OPT_RE = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:\\.|[^"\\])*"|[^\s;"]+)')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``<LoginModule class> <flag> key="value" ...;`` -> (class, options). One login module, as Kafka requires
    for ``sasl.jaas.config``."""
    m = _JAAS_RE.fullmatch(text.strip())
    if not m:
        raise ValueError("expected '<LoginModule> required key=\"value\" ...;'")
    opts: dict[str, str] = {}
    rest = m.group("opts")
    pos = 0
    while pos < len(rest):
        om = _OPT_RE.match(rest, pos)
        if not om:
            if rest[pos:].strip():
                raise ValueError(f"cannot parse JAAS option near {rest[pos:pos + 20]!r}")
            break
        value = om.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        opts[om.group(1)] = value
        pos = om.end()
    return m.group("module"), opts

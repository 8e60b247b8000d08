"""Parts get what they need at construction (issue 26 item 2; the last section of
docs/decisions/0065-coordinators-driven-by-partition-leadership.md).

Checked on the source of ``broker/`` and ``cluster/``:

* no part points back through an ``attach`` method (``def attach``, ``def attach_store``, ``.attach(...)``): a part
  is given its collaborators (a narrow Protocol, a callback, an event object made first) by its constructor;
* no ``getattr(x, "name", default)`` / ``hasattr(x, "name")`` decides whether a part has a feature: an optional
  part is an explicit ``Optional`` attribute or argument, read directly. The reflective reads that are not such
  probes (exceptions' extra fields, log records, the protocol's version ranges, config specs, a library's or the
  OS's optional function, records that may or may not carry their size) are listed in ``LEGITIMATE`` with why.
  ``KNOWN_PROBES`` lists those left in rooms this change did not touch: shrink it, never grow it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tidelog"
PACKAGES = ("broker", "cluster")

# (module path under src/tidelog, object expression, attribute): not a probe of a part, and why
LEGITIMATE: dict[tuple[str, str, str], str] = {
    ("broker/config.py", "exc", "name"): "a config error's optional fields",
    ("broker/config.py", "exc", "value"): "a config error's optional fields",
    ("broker/config.py", "exc", "reason"): "a config error's optional fields",
    ("broker/connection.py", "exc", "quiet"): "a handler's deliberate close, marked on the exception",
    ("broker/errors.py", "exc", "message"): "an error's optional Kafka message",
    ("broker/connection_io.py", "c", "fd"): "an outgoing chunk: a file region or bytes",
    ("broker/connection_io.py", "c", "chunks"): "an outgoing chunk: a file region or bytes",
    ("broker/fetch_session.py", "records", "size"): "records: bytes, or file regions carrying their size",
    ("broker/quotas.py", "records", "length"): "records: bytes, or file regions carrying their length",
    ("broker/handlers/api_versions.py", "rng", "min"): "two spellings of a protocol version range",
    ("broker/handlers/api_versions.py", "rng", "max"): "two spellings of a protocol version range",
    ("broker/handlers/api_versions.py", "rng", "min_version"): "two spellings of a protocol version range",
    ("broker/handlers/api_versions.py", "rng", "max_version"): "two spellings of a protocol version range",
    ("broker/handlers/broker_configs.py", "key", "default"): "a config key's optional default",
    ("broker/handlers/configs.py", "sc", "_BY_NAME"): "the config spec table",
    ("broker/handlers/configs.py", "spec", "kind"): "a config spec's optional kind",
    ("broker/log_setup.py", "record", "kv"): "a logging.LogRecord's optional structured fields",
    ("broker/log_setup.py", "h", "_tidelog"): "marks the logging handlers tidelog installed",
    ("broker/metrics.py", "_prometheus_metrics", "_use_created"): "prometheus_client's setting, by version",
    ("broker/request_pool.py", "os", "setpriority"): "an OS function not every platform has",
    ("broker/connection_io.py", "socket", "MSG_MORE"): "a send flag only Linux has",
}

# probes of parts still there, in rooms another change owns (broker/group/, the share-group handlers): shrink only
KNOWN_PROBES: set[tuple[str, str, str]] = {
    ("broker/group/describe.py", "self.broker", "share_groups"),
    ("broker/group/share_group.py", "broker", "share_groups"),
    ("broker/group/share_group.py", "self.broker", "group_coordinator"),
    ("broker/group/share_group.py", "self.broker", "stopping"),
    ("broker/group/txn_offsets.py", "self.broker", "txn_coordinator"),
    ("broker/group/txn_offsets.py", "coord", "verify_transaction"),
    ("broker/group/txn_offsets.py", "coord", "verification_enabled"),
    ("broker/handlers/share_group.py", "ctx.broker", "group_coordinator"),
}


def _sources() -> list[tuple[str, str]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((SRC / pkg).rglob("*.py")):
            out.append((path.relative_to(SRC).as_posix(), path.read_text(encoding="utf-8")))
    return out


def _reads_in(rel: str, text: str) -> list[tuple[str, int, str, str]]:
    """(module, line, object expression, attribute) of every getattr with a default and every hasattr naming a
    constant attribute (a getattr of two arguments fails loudly when the attribute is missing: not a probe)."""
    found = []
    for node in ast.walk(ast.parse(text, rel)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        probe = (node.func.id == "getattr" and len(node.args) == 3) or node.func.id == "hasattr"
        if probe and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            found.append((rel, node.lineno, ast.unparse(node.args[0]), str(node.args[1].value)))
    return found


def _reflective_reads() -> list[tuple[str, int, str, str]]:
    return [read for rel, text in _sources() for read in _reads_in(rel, text)]


_ATTACH = re.compile(r"def attach\w*\s*\(|\.attach\w*\s*\(")


def _attach_lines(rel: str, text: str) -> list[str]:
    return [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if _ATTACH.search(line)]


def test_no_part_points_back_through_attach() -> None:
    found = [hit for rel, text in _sources() for hit in _attach_lines(rel, text)]
    found += _attach_lines("node.py", (SRC / "node.py").read_text(encoding="utf-8"))
    assert not found, "parts wired after construction (give them what they need in their constructor):\n" + \
        "\n".join(found)


def test_no_getattr_probe_of_a_part() -> None:
    probes = [f"{rel}:{line}: {obj}.{attr}" for rel, line, obj, attr in _reflective_reads()
              if (rel, obj, attr) not in LEGITIMATE and (rel, obj, attr) not in KNOWN_PROBES]
    assert not probes, ("getattr/hasattr deciding whether a part has a feature (state it: an Optional "
                        "attribute or constructor argument, a Protocol member, a no-op implementation):\n"
                        + "\n".join(probes))


def test_the_lists_hold_only_what_is_there() -> None:
    """An entry whose read is gone is removed (the known probes only shrink)."""
    present = {(rel, obj, attr) for rel, _, obj, attr in _reflective_reads()}
    assert set(LEGITIMATE) <= present, sorted(set(LEGITIMATE) - present)
    assert present >= KNOWN_PROBES, sorted(KNOWN_PROBES - present)


def test_the_finders_find_what_they_must_refuse() -> None:
    """The shapes removed by this change are seen (so an empty result above means something)."""
    sample = ('x = getattr(self.broker, "purgatory", None)\n'
              'if hasattr(b.logs, "get_log"):\n    pass\n'
              'y = getattr(obj, "must_exist")\n'
              'class S:\n    def attach(self, store):\n        pass\n'
              'quotas.attach_store(store, loop)\n')
    assert [(obj, attr) for _, _, obj, attr in _reads_in("x.py", sample)] == [("self.broker", "purgatory"),
                                                                             ("b.logs", "get_log")]
    assert [hit.split(": ", 1)[1] for hit in _attach_lines("x.py", sample)] == ["def attach(self, store):",
                                                                              "quotas.attach_store(store, loop)"]

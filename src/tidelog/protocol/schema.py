"""Kafka's declarative message specs, loaded at runtime.

The field layouts are Kafka's JSON message specs (``clients/src/main/resources/common/message/*.json``).
We do not vendor them: kafka-python 3 ships them as package data in ``kafka/protocol/schemas/resources``
and we read that data with importlib.resources. Only the data is used, never kafka-python's code. APIs whose
specs kafka-python does not ship (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69) have their field layouts
in the project's own ``tidelog/protocol/specs/`` (same JSON structure, no prose); a file there wins over
kafka-python's of the same name.

This module turns a spec into a small typed model (``MessageSpec`` / ``FieldSpec``) that the compiler
(``tidelog.protocol.compiler``) specialises per (api_key, version, request|response).
"""

from __future__ import annotations

import importlib.util
import json
import re
import uuid
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

SPEC_PACKAGE = "kafka.protocol.schemas.resources"
OWN_SPEC_DIR = Path(__file__).resolve().parent / "specs"

VersionRange = tuple[int, int]
"""Inclusive (low, high); an empty range is (0, -1)."""

NO_VERSIONS: VersionRange = (0, -1)
ALL_VERSIONS_HIGH = 32767

PRIMITIVE_TYPES = frozenset(
    {"int8", "int16", "uint16", "int32", "int64", "float64", "bool", "uuid", "string", "bytes", "records"}
)
FIXED_FORMATS = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
FIXED_SIZES = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1, "uuid": 16}

ZERO_UUID = uuid.UUID(int=0)

_CAMEL_BOUNDARY = re.compile(r"(?<!^)(?=[A-Z])")
_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*')


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as a dict key: an underscore before every capital, then lower case.

    The same simple rule kafka-python uses: ``PartitionIndex`` -> ``partition_index``, ``IsrNodes`` ->
    ``isr_nodes``, ``ThrottleTimeMs`` -> ``throttle_time_ms``. (Kafka's specs spell acronyms ``Id``/``Isr``,
    so no field has two capitals in a row.)
    """
    return _CAMEL_BOUNDARY.sub("_", name).lower()


def parse_versions(text: str | None) -> VersionRange | None:
    """``"3+"`` -> (3, 32767), ``"0-12"`` -> (0, 12), ``"5"`` -> (5, 5), ``"none"`` -> (0, -1)."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    if text == "none":
        return NO_VERSIONS
    if text.endswith("+"):
        return (int(text[:-1]), ALL_VERSIONS_HIGH)
    if "-" in text:
        lo, hi = text.split("-", 1)
        return (int(lo), int(hi))
    return (int(text), int(text))


def in_range(version: int, rng: VersionRange | None) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(slots=True)
class FieldSpec:
    name: str
    key: str
    type: str
    """Element type: a primitive name from PRIMITIVE_TYPES, or the struct's type name."""
    is_array: bool
    is_struct: bool
    versions: VersionRange
    nullable_versions: VersionRange | None
    tagged_versions: VersionRange | None
    tag: int | None
    default: Any
    ignorable: bool
    flexible_versions: VersionRange | None
    fields: list[FieldSpec] = field(default_factory=list)

    def present(self, version: int) -> bool:
        return in_range(version, self.versions)

    def nullable(self, version: int) -> bool:
        return in_range(version, self.nullable_versions)

    def tagged(self, version: int) -> bool:
        return in_range(version, self.tagged_versions)


@dataclass(slots=True)
class MessageSpec:
    name: str
    api_key: int | None
    type: str
    """"request", "response", "header" or "data"."""
    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: list[FieldSpec]

    def flexible(self, version: int) -> bool:
        return in_range(version, self.flexible_versions)


def _strip_comments(text: str) -> str:
    return _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else "", text)


def _parse_field(raw: dict[str, Any], common: dict[str, list[dict[str, Any]]]) -> FieldSpec:
    type_text: str = raw["type"]
    is_array = type_text.startswith("[]")
    elem = type_text[2:] if is_array else type_text
    is_struct = elem not in PRIMITIVE_TYPES
    sub_raw = raw.get("fields")
    if is_struct and sub_raw is None:
        if elem not in common:
            raise ValueError(f"struct type {elem} has no fields and is not a common struct")
        sub_raw = common[elem]
    versions = parse_versions(raw["versions"]) or NO_VERSIONS
    return FieldSpec(
        name=raw["name"],
        key=snake_case(raw["name"]),
        type=elem,
        is_array=is_array,
        is_struct=is_struct,
        versions=versions,
        nullable_versions=parse_versions(raw.get("nullableVersions")),
        tagged_versions=parse_versions(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        default=raw.get("default"),
        ignorable=bool(raw.get("ignorable", False)),
        flexible_versions=parse_versions(raw.get("flexibleVersions")),
        fields=[_parse_field(f, common) for f in (sub_raw or [])] if is_struct else [],
    )


def parse_spec(text: str) -> MessageSpec:
    raw = json.loads(_strip_comments(text))
    common = {c["name"]: c["fields"] for c in raw.get("commonStructs", [])}
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        type=raw["type"],
        valid_versions=parse_versions(raw.get("validVersions")) or NO_VERSIONS,
        flexible_versions=parse_versions(raw.get("flexibleVersions")) or NO_VERSIONS,
        fields=[_parse_field(f, common) for f in raw.get("fields", [])],
    )


@cache
def spec_dir() -> Traversable:
    """The directory of spec files inside the installed kafka-python distribution.

    Located with ``find_spec("kafka")`` so that kafka-python itself is *not* imported (importing it
    pulls in the whole client); falls back to importlib.resources.
    """
    top = importlib.util.find_spec("kafka")
    if top is not None and top.submodule_search_locations:
        for loc in top.submodule_search_locations:
            d = Path(loc, *SPEC_PACKAGE.split(".")[1:])
            if d.is_dir():
                return d
    return resources.files(SPEC_PACKAGE)


@cache
def load_spec(name: str) -> MessageSpec:
    """The spec named e.g. ``"ProduceRequest"``; FileNotFoundError if the installed package lacks it."""
    own = OWN_SPEC_DIR / (name + ".json")
    src: Traversable | Path = own if own.is_file() else spec_dir().joinpath(name + ".json")
    return parse_spec(src.read_text(encoding="utf-8"))


@cache
def spec_index() -> dict[tuple[int, str], MessageSpec]:
    """Every request/response spec shipped, keyed by (api_key, "request"|"response")."""
    out: dict[tuple[int, str], MessageSpec] = {}
    names = {entry.name for entry in spec_dir().iterdir()}
    if OWN_SPEC_DIR.is_dir():
        names |= {entry.name for entry in OWN_SPEC_DIR.iterdir()}
    for fname in sorted(names):
        if not fname.endswith(".json"):
            continue
        spec = load_spec(fname[:-5])
        if spec.api_key is not None and spec.type in ("request", "response"):
            out[(spec.api_key, spec.type)] = spec
    return out


# --------------------------------------------------------------------------------------------- defaults


def field_default(f: FieldSpec, version: int) -> Any:
    """The value a missing field takes (Kafka's generator rules), for ``version``.

    Records default to empty bytes rather than null: Kafka's brokers send ``MemoryRecords.EMPTY`` for
    partitions without data, and some clients mishandle a null records field.
    """
    d = f.default
    if f.is_array:
        if d == "null" and f.nullable(version):
            return None
        return []
    if f.is_struct:
        if d == "null":
            return None
        return {sf.key: field_default(sf, version) for sf in f.fields if sf.present(version)}
    t = f.type
    if t in ("int8", "int16", "uint16", "int32", "int64"):
        if d is None or d == "":
            return 0
        if isinstance(d, int):
            return d
        return int(d, 0) if str(d).lower().startswith(("0x", "-0x")) else int(d)
    if t == "float64":
        return float(d) if d not in (None, "") else 0.0
    if t == "bool":
        if isinstance(d, bool):
            return d
        return str(d).lower() == "true" if d is not None else False
    if t == "string":
        if d == "null" and f.nullable(version):
            return None
        return "" if d is None else str(d)
    if t == "bytes":
        if d == "null" and f.nullable(version):
            return None
        return b""
    if t == "records":
        return b""
    if t == "uuid":
        return ZERO_UUID
    raise ValueError(f"unknown type {t}")

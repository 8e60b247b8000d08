"""Sample message bodies with non-default values, built from the specs (for tests, fuzzing and tools)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from tidelog.protocol.codec import ACCEPTED_MIN, GROUP_API_VERSIONS, SUPPORTED_VERSIONS
from tidelog.protocol.schema import FieldSpec, MessageSpec, field_default, spec_index

INT_RANGES = {
    "int8": (-100, 100),
    "int16": (-30000, 30000),
    "uint16": (1, 65535),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def all_api_versions(kind_filter: bool = True) -> list[tuple[int, int]]:
    out = []
    for k, (lo, hi) in {**SUPPORTED_VERSIONS, **GROUP_API_VERSIONS}.items():
        for v in range(max(lo, ACCEPTED_MIN.get(k, lo)), hi + 1):
            out.append((int(k), v))
    return out


def spec(api_key: int, kind: str) -> MessageSpec:
    return spec_index()[(api_key, kind)]


def make_value(f: FieldSpec, version: int, flexible: bool, rnd: random.Random, nulls: bool) -> Any:
    if f.nullable(version) and nulls:
        return None
    if f.is_array:
        n = rnd.randint(1, 3)
        return [make_elem(f, version, flexible, rnd, nulls) for _ in range(n)]
    return make_elem(f, version, flexible, rnd, nulls)


def make_elem(f: FieldSpec, version: int, flexible: bool, rnd: random.Random, nulls: bool) -> Any:
    if f.is_struct:
        return make_body(f.fields, version, flexible, rnd, nulls)
    t = f.type
    default = field_default(f, version) if not f.is_array else None
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        while True:
            x = rnd.choice([rnd.randint(lo, hi), rnd.randint(1, 127), hi, lo])
            if x != default:
                return x
    if t == "float64":
        return rnd.random() * 1000 + 1
    if t == "bool":
        return not default if default is not None else True
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128) | 1)
    if t == "string":
        return rnd.choice(["topic-ü-日本", "x", "a" * rnd.randint(1, 200), f"s{rnd.randint(0, 999)}"])
    if t == "bytes":
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 40)))
    if t == "records":
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(61, 300)))
    raise AssertionError(t)


def make_body(
    fields: list[FieldSpec], version: int, flexible: bool, rnd: random.Random, nulls: bool = False
) -> dict[str, Any]:
    return {
        f.key: make_value(f, version, flexible, rnd, nulls) for f in fields if f.present(version)
    }


def message_body(api_key: int, version: int, kind: str, seed: int = 0, nulls: bool = False) -> dict[str, Any]:
    s = spec(api_key, kind)
    rnd = random.Random(f"{api_key}/{version}/{kind}/{seed}/{nulls}")
    return make_body(s.fields, version, s.flexible(version), rnd, nulls)


def normalize(x: Any) -> Any:
    """memoryview/bytearray -> bytes, recursively, for comparisons."""
    if isinstance(x, dict):
        return {k: normalize(v) for k, v in x.items()}
    if isinstance(x, list):
        return [normalize(v) for v in x]
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    return x

"""ApiVersions: the APIs and versions this broker serves (KIP-511; Produce advertised from 0, KAFKA-18659)."""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.broker.features import api_versions_fields
from tidelog.broker.handlers import RequestContext, handles
from tidelog.broker.handlers.core_shared import (
    API_VERSIONS,
    NONE,
    PRODUCE,
)
from tidelog.broker.txn import tv2
from tidelog.protocol import codec


def _supported_versions() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for key, rng in {**codec.SUPPORTED_VERSIONS, **codec.GROUP_API_VERSIONS}.items():
        if isinstance(rng, tuple):
            lo, hi = rng
        else:
            lo = getattr(rng, "min", getattr(rng, "min_version", None))
            hi = getattr(rng, "max", getattr(rng, "max_version", None))
        out[int(key)] = (int(lo), int(hi))  # type: ignore[arg-type]
    return out


_API_LISTS: dict[frozenset[int], list[dict]] = {}


def api_versions_list(handlers: Mapping[int, object]) -> list[dict]:
    """The ApiVersions ``api_keys`` of a broker whose handler table is ``handlers``: every API with a handler and
    a codec, Produce advertised from 0. Built once per set of APIs."""
    keys = frozenset(handlers)
    entries = _API_LISTS.get(keys)
    if entries is None:
        supported = _supported_versions()
        entries = []
        for key in sorted(keys):
            if key not in supported:
                continue
            lo, hi = supported[key]
            if key == PRODUCE:
                lo = 0  # KAFKA-18659: librdkafka < 2.11.1 needs Produce min 0 to enable compression
            entries.append({"api_key": key, "min_version": lo, "max_version": hi})
        _API_LISTS[keys] = entries
    return entries


@handles(API_VERSIONS)
async def api_versions(ctx: RequestContext, request: dict) -> dict:
    handlers = ctx.broker.handlers
    # v3+: SupportedFeatures / FinalizedFeatures (broker/features.py); v4 lists features whose minimum is 0 too
    return {"error_code": NONE, "api_keys": api_versions_list(handlers), "throttle_time_ms": 0,
            **api_versions_fields(handlers, ctx.api_version, tv2.finalized_level(ctx.broker),
                                  tv2.features_epoch(ctx.broker))}



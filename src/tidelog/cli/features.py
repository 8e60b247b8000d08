"""``tidelog features describe``: ``kafka-features.sh describe`` through the bootstrap server.

Asks ApiVersions v4 (the version that lists features whose minimum level is 0, KAFKA-17492) and prints, as Kafka's
``FeatureCommand``, one line per supported feature sorted by name::

    Feature: group.version	SupportedMinVersion: 0	SupportedMaxVersion: 0	FinalizedVersionLevel: 0	Epoch: 0

``metadata.version`` levels by their release names (``4.2-IV1``), the others as numbers; a feature that is not
finalized shows level 0; the epoch is ``-`` when the broker gave none. ``--output json`` prints the same rows as
one JSON array of objects (``_client.print_table``).
"""

from __future__ import annotations

import asyncio

import click

from tidelog.broker.features import METADATA_VERSION, metadata_version_name
from tidelog.cli._client import (
    bootstrap_option,
    bootstrap_request,
    fail,
    output_is_json,
    output_option,
    print_table,
)
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.errors import error_for_code

API_VERSIONS_VERSION = 4
COLUMNS = ("Feature", "SupportedMinVersion", "SupportedMaxVersion", "FinalizedVersionLevel", "Epoch")


def _level(feature: str, level: int) -> str | int:
    return metadata_version_name(level) if feature == METADATA_VERSION else level


def feature_rows(resp: dict) -> list[tuple[str, str | int, str | int, str | int, str | int]]:
    """Kafka's FeatureCommand rows from an ApiVersions response body."""
    finalized = {f["name"]: f["max_version_level"] for f in resp.get("finalized_features") or ()}
    epoch = resp.get("finalized_features_epoch", -1)
    shown_epoch: str | int = epoch if epoch is not None and epoch >= 0 else "-"
    return [(f["name"], _level(f["name"], f["min_version"]), _level(f["name"], f["max_version"]),
             _level(f["name"], finalized.get(f["name"], 0)), shown_epoch)
            for f in sorted(resp.get("supported_features") or (), key=lambda f: f["name"])]


@click.group()
def features() -> None:
    """Feature versions (kafka-features.sh): what the brokers support and what is finalized."""


@features.command("describe")
@output_option
@bootstrap_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the broker.")
def describe_cmd(bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Each feature's supported range and finalized level, as kafka-features.sh describe prints them."""
    del properties  # librdkafka properties: this command speaks the protocol itself (TLS/SASL: --command-config)
    try:
        resp = asyncio.run(bootstrap_request(bootstrap, ApiKey.API_VERSIONS, API_VERSIONS_VERSION,
                                             {"client_software_name": "tidelog-features",
                                              "client_software_version": "1"}, timeout))
    except (OSError, TimeoutError) as exc:
        fail(f"no broker answered ApiVersions: {exc}")
    if resp.get("error_code"):
        fail(f"ApiVersions failed: {error_for_code(resp['error_code']).name}")
    rows = feature_rows(resp)
    if output_is_json():
        print_table(COLUMNS, rows)
        return
    for row in rows:
        click.echo("\t".join(f"{name}: {value}" for name, value in zip(COLUMNS, row, strict=True)))

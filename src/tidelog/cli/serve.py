"""``tidelog serve``: run one broker (no ZooKeeper), like ``kafka-server-start.sh [server.properties]``."""

from __future__ import annotations

import logging
import sys

import click

from tidelog.broker.config import BrokerConfig, ConfigException


@click.command("serve")
@click.argument("properties", required=False, type=click.Path(dir_okay=False))
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False), help="server.properties file")
@click.option(
    "--override", "-o", "overrides", multiple=True, metavar="KEY=VALUE", help="set a broker property (repeatable)"
)
@click.option("--host", default=None, help="listener host (default from listeners: 127.0.0.1)")
@click.option("--port", type=int, default=None, help="listener port (default from listeners: 9092)")
@click.option("--data-dir", default=None, help="log directory (sets log.dirs; default ./data)")
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING, ERROR")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--loop", type=click.Choice(["uvloop", "asyncio"]), default="uvloop", show_default=True, help="event loop"
)
def serve(
    properties: str | None,
    config_path: str | None,
    overrides: tuple[str, ...],
    host: str | None,
    port: int | None,
    data_dir: str | None,
    log_level: str,
    log_format: str,
    loop: str,
) -> None:
    """Start a broker on 127.0.0.1:9092 with its data in ./data (Kafka's properties and defaults)."""
    from tidelog.broker.log_setup import setup_logging

    setup_logging(log_level, log_format)
    if properties and config_path:
        raise click.UsageError("give the properties file either as an argument or with --config, not both")
    try:
        cfg = BrokerConfig.load(properties or config_path, overrides, host=host, port=port, data_dir=data_dir)
    except ConfigException as exc:
        click.echo(f"tidelog serve: {exc}", err=True)
        sys.exit(2)
    from tidelog.broker.server import run

    try:
        run(cfg, use_uvloop=(loop == "uvloop"))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        logging.getLogger("tidelog.broker.server").error("broker failed to start: %s", exc)
        sys.exit(1)
    except Exception as exc:  # storage refusing a dir (locked, inconsistent ids) and the like
        kafka_error = getattr(exc, "kafka_error", None)
        if kafka_error is None and not type(exc).__module__.startswith("tidelog."):
            raise
        logging.getLogger("tidelog.broker.server").error("broker failed: %s", exc)
        sys.exit(1)

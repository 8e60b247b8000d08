"""``tidelog serve``: run one broker (no ZooKeeper), like ``kafka-server-start.sh [server.properties]``."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from tidelog.broker.config import BrokerConfig, ConfigException
from tidelog.broker.log_setup import setup_logging
from tidelog.cli.progress import terminal_recovery_progress
from tidelog.errors import ApiError
from tidelog.node import run


@click.command("serve")
@click.argument("properties", required=False, type=click.Path(dir_okay=False))
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False), help="server.properties file")
@click.option(
    "--override", "-o", "overrides", multiple=True, metavar="KEY=VALUE", help="set a broker property (repeatable)"
)
@click.option("--host", default=None, help="listener host (default from listeners: 127.0.0.1)")
@click.option("--port", type=int, default=None, help="listener port (default from listeners: 9092)")
@click.option("--data-dir", default=None, help="log directory (sets log.dirs; default ./data)")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--loop", type=click.Choice(["uvloop", "asyncio"]), default="uvloop", show_default=True, help="event loop"
)
@click.option("--console", "with_console", is_flag=True,
              help="also serve the web console (tidelog console) on 127.0.0.1:--console-port, in its own process")
@click.option("--console-port", type=int, default=9021, show_default=True, help="web console port (with --console)")
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
    with_console: bool = False,
    console_port: int = 9021,
) -> None:
    """Start a broker on 127.0.0.1:9092 with its data in ./data (Kafka's properties and defaults)."""
    setup_logging(log_level, log_format)
    if properties and config_path:
        raise click.UsageError("give the properties file either as an argument or with --config, not both")
    try:
        cfg = BrokerConfig.load(properties or config_path, overrides, host=host, port=port, data_dir=data_dir)
    except ConfigException as exc:
        click.echo(f"tidelog serve: {exc}", err=True)
        sys.exit(2)

    started: list[Any] = []
    new_dirs = [_topmost_missing(d) for d in cfg.log_dirs if not d.exists()]  # removed again if the start fails

    console_proc: list[Any] = []

    def on_started(broker: Any) -> None:
        started.append(broker)
        _print_how_to_reach(broker)
        if with_console:
            console_proc.append(_start_console(broker, console_port))

    try:
        run(cfg, use_uvloop=(loop == "uvloop"), on_started=on_started,
            recovery_progress=terminal_recovery_progress())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        _failed(f"broker failed to start: {exc}", [] if started else new_dirs)
    except Exception as exc:  # storage refusing a dir (locked, inconsistent ids) and the like
        if not isinstance(exc, ApiError) and not type(exc).__module__.startswith("tidelog."):
            raise
        _failed(f"broker failed: {exc}", [] if started else new_dirs)
    finally:
        for proc in console_proc:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _start_console(broker: Any, port: int) -> Any:
    """``tidelog console`` for this broker in a process of its own (the console's work stays off the broker's
    interpreter and loop), on loopback, stopped with the broker."""
    host = "127.0.0.1" if broker.host in ("0.0.0.0", "::", "") else broker.host
    cmd = [sys.executable, "-m", "tidelog.cli.main", "console", "--bootstrap-server", f"{host}:{broker.port}",
           "--port", str(port)]
    return subprocess.Popen(cmd)


def _topmost_missing(d: Path) -> Path:
    while not d.parent.exists():
        d = d.parent
    return d


def _failed(message: str, new_dirs: list[Path]) -> None:
    """One line, exit 1; a data directory this start made (before it ever served) is removed again."""
    for d in new_dirs:
        shutil.rmtree(d, ignore_errors=True)
    logging.getLogger("tidelog.broker.server").error(message)
    sys.exit(1)


def started_banner(broker: Any) -> str:
    """What a user needs once the broker is up: where clients connect, where metrics are, where the data is."""
    metrics_port = broker.metrics.port
    ml = broker.config.metrics_listener
    metrics = f"http://{ml[0]}:{metrics_port}/metrics" if ml is not None and metrics_port else "off"
    zk = broker.config.get("zookeeper.connect")
    lines = [
        f"tidelog {_version()} ready (node {broker.node_id}{f', ZooKeeper {zk}' if zk else ', no ZooKeeper'})",
        f"  bootstrap servers  {broker.host}:{broker.port}",
        *(f"  listener {name:<9} {h}:{p} ({proto})" for name, (h, p), proto in
          ((n, e, next(li.protocol for li in broker.listeners if li.name == n)) for n, e in broker.endpoints.items())
          if len(broker.endpoints) > 1),
        f"  metrics            {metrics}",
        f"  data               {', '.join(str(Path(d).resolve()) for d in broker.config.log_dirs)}",
        "  Ctrl-C (or SIGTERM) stops it cleanly.",
    ]
    return "\n".join(lines)


def _print_how_to_reach(broker: Any) -> None:
    try:
        click.echo(started_banner(broker))
        sys.stdout.flush()
    except (BrokenPipeError, OSError):  # stdout closed: the broker runs on regardless
        pass


def _version() -> str:
    import importlib.metadata  # here, not at the top: ~80 ms (email, zipfile...) the broker needs only for the banner

    try:
        return importlib.metadata.version("tidelog")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"

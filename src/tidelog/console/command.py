"""``tidelog console``: the web console (issue 28) for any Kafka-compatible cluster, served by uvicorn.

Binds 127.0.0.1 by default (no login: whoever can reach loopback is the OS user). ``--host`` beyond loopback
requires ``--password-file`` (the console refuses to start without one). ``--command-config`` is a Kafka client
properties file, as for the other commands: the console logs in to the cluster with it, and the broker's ACLs decide
what the page may do.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click
import uvicorn

from tidelog.cli._client import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
from tidelog.console.app import Console, ConsoleConfig, build_app
from tidelog.console.sessions import LOOPBACK, is_loopback
from tidelog.storage.checkpoints import parse_properties

DEFAULT_PORT = 9021  # Confluent Control Center's port: the one Kafka users expect a console on


def console_options(fn: Any) -> Any:
    for opt in reversed([
        click.option("--host", "host", default="127.0.0.1", show_default=True,
                     help="Address the console listens on; beyond loopback a login is required."),
        click.option("--port", "port", type=int, default=DEFAULT_PORT, show_default=True, help="Console port."),
        click.option("--user", default=None, help="Login user name (default: the OS user)."),
        click.option("--password-file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="File whose first line is the login password (required beyond loopback)."),
        click.option("--audit-log", type=click.Path(dir_okay=False), default="console-audit.log",
                     show_default=True, help="JSON-lines file of every mutating action (who, what, when)."),
    ]):
        fn = opt(fn)
    return fn


@click.command("console")
@click.option("--bootstrap-server", "-b", "bootstrap", envvar=BOOTSTRAP_ENV, default=DEFAULT_BOOTSTRAP,
              show_default=True, show_envvar=True, help="Broker(s) to connect to, host:port[,host:port...].")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A Kafka client properties file (security.protocol, sasl.*, ssl.*) the console logs in with.")
@console_options
def console(bootstrap: str, command_config: str | None, host: str, port: int, user: str | None,
            password_file: str | None, audit_log: str) -> None:
    """Serve the web console for the cluster at --bootstrap-server on http://127.0.0.1:9021/."""
    props: dict[str, str] = {}
    if command_config is not None:
        try:
            props = parse_properties(Path(command_config).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(f"cannot read {command_config}: {exc}", param_hint="--command-config") from None
    serve_console(bootstrap, props, host, port, user, password_file, audit_log)


def serve_console(bootstrap: str, props: dict[str, str], host: str, port: int, user: str | None,
                  password_file: str | None, audit_log: str | None) -> None:
    password = None
    if password_file is not None:
        lines = Path(password_file).read_text(encoding="utf-8").splitlines()
        password = lines[0] if lines else ""
    cfg = ConsoleConfig(bootstrap, props, host, port, user or "", password, Path(audit_log) if audit_log else None)
    try:
        console_obj = Console(cfg)
    except ValueError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    allowed = [*LOOPBACK, "[::1]"] if is_loopback(host) else None
    app = build_app(console_obj, allowed_hosts=allowed)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"tidelog console on http://{shown}:{port}/ for {bootstrap} "
               f"({'login required' if console_obj.sessions.login_required else 'loopback, no login'})")
    sys.stdout.flush()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")

"""Shared helpers for the client CLIs (``tidelog topics|produce|consume``).

These commands speak the Kafka protocol through confluent-kafka (librdkafka), so they work against any Kafka
broker, not only tidelog. Nothing here imports the broker.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn, TypeVar

import click

from tidelog.storage.checkpoints import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "TIDELOG_BOOTSTRAP"

F = TypeVar("F", bound=Callable[..., Any])


def bootstrap_option(fn: F) -> F:
    """``--bootstrap-server`` (env TIDELOG_BOOTSTRAP) and ``-X key=value`` (librdkafka properties)."""
    fn = click.option(
        "-X",
        "--property",
        "properties",
        multiple=True,
        metavar="KEY=VALUE",
        help="Extra client property passed to librdkafka (repeatable), e.g. -X debug=broker.",
    )(fn)
    fn = click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False),
        expose_value=False,
        is_eager=True,
        callback=_remember_command_config,
        help="A Kafka client properties file (security.protocol, sasl.*, ssl.*), as Kafka's tools take it.",
    )(fn)
    fn = click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap",
        envvar=BOOTSTRAP_ENV,
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        show_envvar=True,
        help="Broker(s) to connect to, host:port[,host:port...].",
    )(fn)
    return fn


_COMMAND_CONFIG = "tidelog.command_config"


def _remember_command_config(ctx: click.Context, param: Any, value: str | None) -> None:
    if value is not None:
        ctx.meta[_COMMAND_CONFIG] = value


# Java client settings librdkafka does not take under the same name (or at all)
_JAVA_ONLY = frozenset({"ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.protocol",
                        "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                        "sasl.login.class", "sasl.client.callback.handler.class"})
_JAAS_USER = re.compile(r'\busername\s*=\s*"((?:\\.|[^"\\])*)"')
_JAAS_PASSWORD = re.compile(r'\bpassword\s*=\s*"((?:\\.|[^"\\])*)"')


def command_config_properties(path: str) -> dict[str, str]:
    """A Kafka (Java) client properties file turned into librdkafka settings: ``sasl.jaas.config``'s username
    and password become ``sasl.username``/``sasl.password``; PEM stores become ``ssl.ca.location`` /
    ``ssl.certificate.location`` + ``ssl.key.location``; a PKCS12 key store stays ``ssl.keystore.*``;
    ``ssl.endpoint.identification.algorithm=`` (empty) becomes ``none``; Java-only settings are dropped."""
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--command-config") from None
    out: dict[str, str] = {}
    truststore_type = props.get("ssl.truststore.type", "JKS").upper()
    keystore_type = props.get("ssl.keystore.type", "JKS").upper()
    for key, value in props.items():
        if key in _JAVA_ONLY:
            continue
        if key == "sasl.jaas.config":
            user, password = _JAAS_USER.search(value), _JAAS_PASSWORD.search(value)
            if user:
                out["sasl.username"] = user.group(1)
            if password:
                out["sasl.password"] = password.group(1)
        elif key == "ssl.truststore.location":
            if truststore_type != "PEM":
                raise click.BadParameter(f"ssl.truststore.type={truststore_type}: librdkafka reads PEM trust "
                                         "stores only (ssl.truststore.type=PEM)", param_hint="--command-config")
            out["ssl.ca.location"] = value
        elif key == "ssl.keystore.location" and keystore_type == "PEM":
            out["ssl.certificate.location"] = value
            out["ssl.key.location"] = value
        elif key == "ssl.key.password" and keystore_type == "PEM":
            out["ssl.key.password"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        else:
            out[key] = value
    return out


def parse_key_values(items: Iterable[str], what: str) -> list[tuple[str, str]]:
    """``["a=1", "b=2"]`` -> ``[("a", "1"), ("b", "2")]``; a missing ``=`` is a usage error."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out.append((key, value))
    return out


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr (``Error: ...``, as click prints usage errors), then exit ``code``."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _split_host_port(server: str) -> tuple[str, int]:
    server = server.strip()
    if "://" in server:  # "PLAINTEXT://host:port" is accepted by librdkafka too
        server = server.split("://", 1)[1]
    host, sep, port = server.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"expected host:port, got {server!r}", param_hint="--bootstrap-server")
    return host.strip("[]") or "127.0.0.1", int(port)


def ensure_reachable(bootstrap: str, timeout: float = 5.0) -> None:
    """Fail with one line when no bootstrap server accepts a TCP connection, instead of letting librdkafka retry
    until the command's timeout. One reachable server is enough: the client learns the others from it."""
    reasons: list[str] = []
    for server in bootstrap.split(","):
        if not server.strip():
            continue
        host, port = _split_host_port(server)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    fail(f"no broker reachable at {bootstrap} ({'; '.join(reasons) or 'no server given'})")


def client_config(bootstrap: str, properties: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """librdkafka configuration for a console client. Checks first that a bootstrap server is reachable, so a
    broker that is not running is one clear error line, not a hang."""
    ensure_reachable(bootstrap)
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "tidelog-cli",
        # fail fast when nothing listens, instead of librdkafka's long defaults
        "socket.connection.setup.timeout.ms": 10000,
        "logger": _quiet_logger(),
    }
    ctx = click.get_current_context(silent=True)
    path = ctx.meta.get(_COMMAND_CONFIG) if ctx is not None else None  # meta is shared by the whole command chain
    if path is not None:
        conf.update(command_config_properties(path))
    conf.update(extra)
    conf.update(dict(parse_key_values(properties, "-X")))
    return conf


class _StderrOnce(logging.Handler):
    """Writes each distinct librdkafka warning to stderr once (librdkafka repeats connection errors on every
    reconnect backoff)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        # "Disconnected (after 26ms in state UP)" repeats with other numbers: compare without digits
        shape = re.sub(r"\d+", "#", text)
        if shape in self._seen:
            return
        self._seen.add(shape)
        try:
            click.echo(f"tidelog: {text}", err=True)
        except (BrokenPipeError, OSError):
            pass


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("tidelog.cli.librdkafka")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    if not any(isinstance(h, _StderrOnce) for h in logger.handlers):
        logger.addHandler(_StderrOnce())
    return logger


def kafka_error_text(exc: BaseException) -> str:
    """``TOPIC_ALREADY_EXISTS: Topic 't' already exists.`` from a confluent-kafka exception."""
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    if callable(name):
        code = err.name()
        text = err.str()
        return f"{code}: {text}" if text and text != code else str(code)
    return str(exc)


def kafka_error_name(exc: BaseException) -> str | None:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return err.name() if callable(name) else None


def wait_all(futures: dict[Any, Future], timeout: float) -> dict[Any, BaseException | None]:
    """Wait for admin futures; returns key -> exception (None on success). Timeouts become TimeoutError."""
    out: dict[Any, BaseException | None] = {}
    for key, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            out[key] = None
        except Exception as exc:
            out[key] = exc
    return out


def is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """A rich table on a terminal, tab-separated lines (with a header line) otherwise."""
    rows = [["" if v is None else str(v) for v in r] for r in rows]
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for h in headers:
            table.add_column(h)
        for r in rows:
            table.add_row(*r)
        Console().print(table)
        return
    if title:
        safe_echo(f"# {title}")
    safe_echo("\t".join(headers))
    for r in rows:
        safe_echo("\t".join(r))


def safe_echo(text: str) -> None:
    click.echo(text)


def exit_quietly_on_broken_pipe() -> None:
    """After a BrokenPipeError on stdout (``| head``): point stdout at /dev/null so the interpreter's final
    flush does not raise again, then exit 0 (as ``cat`` exits quietly under SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)

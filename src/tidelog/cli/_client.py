"""Shared helpers for the client CLIs (``tidelog topics|produce|consume``).

These commands speak the Kafka protocol through confluent-kafka (librdkafka), so they work against any Kafka
broker, not only tidelog. ``tidelog cluster`` and ``tidelog transactions`` speak it through tidelog's own client
(:class:`tidelog.cluster.peer.Peer`, :func:`peer_request`), with the same ``--command-config``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import re
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn, TypeVar

import click

from tidelog.cli._preflight import LoginProblem, check_listener
from tidelog.cli._tables import aligned_lines, tabbed_lines
from tidelog.client.admin_ops import AdminError
from tidelog.client.security import (
    ClientConfigError,
    ClientSecurity,
    SaslClientError,
    client_security,
    librdkafka_config,
)
from tidelog.cluster.peer import Peer
from tidelog.storage.checkpoints import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "TIDELOG_BOOTSTRAP"

F = TypeVar("F", bound=Callable[..., Any])
K = TypeVar("K")
T = TypeVar("T")


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
    fn = command_config_option(fn)
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


def command_config_option(fn: F) -> F:
    """``--command-config client.properties`` (Kafka's tools' flag), kept in the click context's meta."""
    return click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False),
        expose_value=False,
        is_eager=True,
        callback=_remember_command_config,
        help="A Kafka client properties file (security.protocol, sasl.*, ssl.*), as Kafka's tools take it.",
    )(fn)


_COMMAND_CONFIG = "tidelog.command_config"
_PEER_SECURITY = "tidelog.peer_security"


def _remember_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_COMMAND_CONFIG] = value


def _read_command_config(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--command-config") from None


def peer_security() -> ClientSecurity | None:
    """TLS and SASL for tidelog's own client connections, from ``--command-config`` (None: PLAINTEXT). Made
    once per command (the trust store is read once)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    if _PEER_SECURITY not in ctx.meta:
        path = ctx.meta.get(_COMMAND_CONFIG)
        try:
            ctx.meta[_PEER_SECURITY] = client_security(_read_command_config(path)) if path else None
        except ClientConfigError as exc:
            raise click.BadParameter(f"{path}: {exc}", param_hint="--command-config") from None
    return ctx.meta[_PEER_SECURITY]


def make_peer(host: str, port: int) -> Peer:
    return Peer(host, port, "tidelog-cli", peer_security())


async def peer_request(host: str, port: int, api_key: int, version: int, body: dict, timeout: float) -> dict:
    """One request on a fresh connection to ``host:port`` (TLS/SASL from ``--command-config``). A refused
    login or a failed TLS handshake ends the command with one line: retrying elsewhere would not help."""
    peer = make_peer(host, port)
    try:
        return await peer.request(api_key, version, body, timeout)
    except SaslClientError as exc:
        fail(f"{host}:{port}: {exc}")
    except ssl.SSLError as exc:
        fail(f"{host}:{port}: TLS handshake failed: {exc.reason or exc}")
    except asyncio.IncompleteReadError:  # an EOFError, which click would turn into a bare "Aborted!"
        raise ConnectionError(f"{host}:{port} closed the connection") from None
    finally:
        peer.close()


async def bootstrap_request(bootstrap: str, api_key: int, version: int, body: dict, timeout: float) -> dict:
    """One request to the first bootstrap server that answers (any broker serves it); one line when none does."""
    last: Exception | None = None
    for server in bootstrap.split(","):
        if not server.strip():
            continue
        try:
            host, port = _split_host_port(server)
            return await peer_request(host, port, api_key, version, body, timeout)
        except (OSError, TimeoutError) as exc:
            last = exc
    fail(f"no broker reachable at {bootstrap} ({last})")


async def broker_addresses(bootstrap: str, timeout: float) -> dict[int, tuple[str, int]]:
    """Every broker of the cluster (node id -> host, port), from Metadata through the bootstrap server."""
    md = await bootstrap_request(bootstrap, 3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False}, timeout)
    return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}


def command_config_properties(path: str) -> dict[str, str]:
    """A Kafka (Java) client properties file turned into librdkafka settings: ``sasl.jaas.config``'s username
    and password become ``sasl.username``/``sasl.password``; PEM stores become ``ssl.ca.location`` /
    ``ssl.certificate.location`` + ``ssl.key.location``; a PKCS12 key store stays ``ssl.keystore.*``;
    ``ssl.endpoint.identification.algorithm=`` (empty) becomes ``none``; Java-only settings are dropped."""
    try:
        return librdkafka_config(_read_command_config(path))
    except ClientConfigError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--command-config") from None


def parse_key_values(items: Iterable[str], what: str) -> list[tuple[str, str]]:
    """``["a=1", "b=2"]`` -> ``[("a", "1"), ("b", "2")]``; a missing ``=`` is a usage error."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out.append((key, value))
    return out


def parse_config_list(text: str | None, what: str) -> list[tuple[str, str]]:
    """Kafka's ``--add-config`` list: ``k1=v1,k2=[v1,v2],k3=v3`` (square brackets group a value with commas); a
    missing ``=`` is a usage error."""
    out: list[tuple[str, str]] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text or ""):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{what}: expected key=value, got {item!r}", 2)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out.append((key.strip(), value))
    return out


def repeated(items: Iterable[str]) -> list[str]:
    """The items that occur more than once, sorted (for "duplicate entries" errors)."""
    return sorted(k for k, n in collections.Counter(items).items() if n > 1)


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


def ensure_reachable(bootstrap: str, timeout: float = 5.0) -> tuple[str, int]:
    """Fail with one line when no bootstrap server accepts a TCP connection, instead of letting librdkafka retry
    until the command's timeout. One reachable server is enough: the client learns the others from it (returned)."""
    reasons: list[str] = []
    for server in bootstrap.split(","):
        if not server.strip():
            continue
        host, port = _split_host_port(server)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return host, port
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    fail(f"no broker reachable at {bootstrap} ({'; '.join(reasons) or 'no server given'})")


def client_config(bootstrap: str, properties: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """librdkafka configuration for a console client. Checks first that a bootstrap server is reachable, so a
    broker that is not running is one clear error line, not a hang."""
    host, port = ensure_reachable(bootstrap)
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
    given = dict(parse_key_values(properties, "-X"))
    conf.update(given)
    # TLS and SASL as --command-config sets them (not -X: librdkafka's own names), checked with tidelog's client;
    # settings it does not implement (GSSAPI, OAUTHBEARER...) are left to librdkafka unchecked
    if not any(k.startswith(("security.", "sasl.", "ssl.")) for k in given):
        try:
            security = client_security(_read_command_config(path)) if path is not None else None
        except ClientConfigError:
            return conf
        try:
            check_listener(host, port, security)
        except LoginProblem as exc:
            fail(str(exc))
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
    if err is not None and callable(name):
        code = err.name()
        text = err.str()
        return f"{code}: {text}" if text and text != code else str(code)
    return str(exc)


def kafka_error_name(exc: BaseException) -> str | None:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return err.name() if err is not None and callable(name) else None


def wait_all(futures: Mapping[K, Future], timeout: float) -> dict[K, BaseException | None]:
    """Wait for admin futures; returns key -> exception (None on success). Timeouts become TimeoutError."""
    out: dict[K, BaseException | None] = {}
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


_OUTPUT = "tidelog.output"


def output_option(fn: F) -> F:
    """``--output text|json``: a describe/list command's tables as text (the default) or, for scripts, as JSON:
    each table one line holding an array of objects keyed by the column names (numbers stay numbers)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: str) -> str:
        ctx.meta[_OUTPUT] = value
        return value

    return click.option("--output", "-O", type=click.Choice(["text", "json"]), default="text", show_default=True,
                        expose_value=False, callback=remember, is_eager=True,
                        help="text (a table) or json (one array of objects per table, for scripts).")(fn)


def output_is_json() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.meta.get(_OUTPUT) == "json"


def echo_json(value: object) -> None:
    safe_echo(json.dumps(value, separators=(",", ":"), default=str))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None,
                minimums: Sequence[int] = (), layout: str = "aligned", blank_before: bool = False) -> None:
    """A rich table on a terminal; otherwise the layout of the Kafka tool the command stands for (``aligned``:
    kafka-consumer-groups' space-padded columns with ``minimums`` widths; ``tabbed``: kafka-transactions' padded
    cells each followed by a tab; ``blank_before``: a blank line first, as kafka-consumer-groups prints one); with
    ``--output json`` one JSON array of objects keyed by the headers."""
    if output_is_json():
        echo_json([{h: (v if v is None or isinstance(v, (int, float, bool)) else str(v)) for h, v in zip(headers, r)}
                   for r in rows])
        return
    cells = [["" if v is None else str(v) for v in r] for r in rows]
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for h in headers:
            table.add_column(h)
        for r in cells:
            table.add_row(*r)
        Console().print(table)
        return
    if blank_before:
        safe_echo("")
    lines = tabbed_lines(headers, cells) if layout == "tabbed" else aligned_lines(headers, cells, minimums)
    for line in lines:
        safe_echo(line)


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


class CliTransport:
    """:class:`tidelog.client.admin_ops.Transport` for a command: ``--bootstrap-server``'s brokers, TLS/SASL from
    ``--command-config`` (a refused login ends the command, as :func:`peer_request` does)."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    async def call(self, host: str, port: int, api_key: int, version: int, body: dict) -> dict:
        return await peer_request(host, port, api_key, version, body, self.timeout)

    async def any_broker(self, api_key: int, version: int, body: dict) -> dict:
        return await bootstrap_request(self.bootstrap, api_key, version, body, self.timeout)


def run_admin(coro: Coroutine[Any, Any, T], name_request: bool = True) -> T:
    """Run an admin_ops coroutine; a broker's refusal (:class:`AdminError`) ends the command with its text (without
    the request's name unless ``name_request``: ``kafka-configs.sh`` prints only ``NAME: message``)."""
    try:
        return asyncio.run(coro)
    except AdminError as exc:
        fail(str(exc) if name_request else exc.detail)

"""``tidelog users add | list | remove``: SCRAM credentials, as ``kafka-configs.sh --entity-type users
--alter --add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'`` manages them.

Through a broker (AlterUserScramCredentials / DescribeUserScramCredentials, KIP-554; any Kafka broker, with
``--command-config`` for a secured one), or, with ``--data-dir``, straight in a single-node broker's data dir
(``tidelog-users.json``): how the first user of a SASL-only broker is made, as ``kafka-storage.sh format
--add-scram`` does in KRaft mode. A running broker picks the file's changes up at the next login.
"""

from __future__ import annotations

import getpass
import secrets
from pathlib import Path
from typing import Any

import click

from tidelog.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    USERS_FILE,
    ScramCredential,
    ScramCredentialStore,
)
from tidelog.cli._client import (
    bootstrap_option,
    client_config,
    fail,
    kafka_error_text,
    output_option,
    print_table,
    wait_all,
)

_MECHS = click.Choice(sorted(MECHANISMS), case_sensitive=False)


def _store(data_dir: str) -> ScramCredentialStore:
    return ScramCredentialStore(Path(data_dir) / USERS_FILE)


def _admin(bootstrap: str, properties: tuple[str, ...]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(bootstrap, properties))


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.upper().replace("-", "_")]


@click.group()
def users() -> None:
    """Manage SCRAM users (SCRAM-SHA-256 / SCRAM-SHA-512 credentials)."""


_data_dir_option = click.option("--data-dir", type=click.Path(file_okay=False),
                                help="Change the credentials file of a single-node broker directly (no broker needed).")
_timeout_option = click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")


@users.command("add")
@click.argument("name")
@click.option("--password", help="The password (asked for when not given).")
@click.option("--mechanism", "-m", "mechanisms", type=_MECHS, multiple=True,
              help="SCRAM mechanism (repeatable; default both).")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=MIN_ITERATIONS,
              show_default=True)
@_data_dir_option
@bootstrap_option
@_timeout_option
def add(name: str, password: str | None, mechanisms: tuple[str, ...], iterations: int, data_dir: str | None,
        bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Create or update the credentials of user NAME."""
    if password is None:
        password = getpass.getpass(f"Password for {name}: ")
    if not password:
        fail("the password must not be empty")
    mechs = [m.upper() for m in mechanisms] or sorted(MECHANISMS)
    if data_dir is not None:
        _store(data_dir).alter([(name, m, ScramCredential.from_password(m, password, iterations)) for m in mechs], [])
        click.echo(f"user {name}: {', '.join(mechs)} credentials written to {Path(data_dir) / USERS_FILE}")
        return
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    admin = _admin(bootstrap, properties)
    ops = [UserScramCredentialUpsertion(name, ScramCredentialInfo(_mechanism(m), iterations), password.encode(),
                                        secrets.token_bytes(32)) for m in mechs]
    for user, err in wait_all(admin.alter_user_scram_credentials(ops, request_timeout=timeout), timeout).items():
        if err is not None:
            fail(f"user {user}: {kafka_error_text(err)}")
    click.echo(f"user {name}: {', '.join(mechs)} credentials set")


@users.command("list")
@_data_dir_option
@output_option
@bootstrap_option
@_timeout_option
def list_(data_dir: str | None, bootstrap: str, properties: tuple[str, ...], timeout: float) -> None:
    """Users with SCRAM credentials, their mechanisms and iteration counts."""
    rows: list[tuple[str, str, int]] = []
    if data_dir is not None:
        for user, creds in sorted(_store(data_dir).describe().items()):
            rows += [(user, m, c.iterations) for m, c in sorted(creds.items())]
    else:
        for user, described in sorted(scram_credentials(bootstrap, properties, timeout).items()):
            if not isinstance(described, BaseException):
                rows += [(user, m, i) for m, i in described]
    print_table(["USER", "MECHANISM", "ITERATIONS"], rows)


def scram_credentials(bootstrap: str, properties: tuple[str, ...], timeout: float,
                      names: list[str] | None = None) -> dict[str, list[tuple[str, int]] | BaseException]:
    """DescribeUserScramCredentials: each user's (mechanism, iterations), or the error for a named user (one
    without credentials: RESOURCE_NOT_FOUND); every user with credentials when no names are given."""
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap, properties)
    out: dict[str, list[tuple[str, int]] | BaseException] = {}
    try:
        if names is None:
            described = admin.describe_user_scram_credentials(request_timeout=timeout).result(timeout)
        else:
            futures = admin.describe_user_scram_credentials(names, request_timeout=timeout)
            described = {}
            for user, fut in futures.items():
                try:
                    described[user] = fut.result(timeout)
                except KafkaException as exc:
                    out[user] = exc
    except Exception as exc:
        fail(kafka_error_text(exc))
    for user, desc in described.items():
        out[user] = [(info.mechanism.name.replace("_", "-"), info.iterations) for info in desc.scram_credential_infos]
    return out


@users.command("remove")
@click.argument("name")
@click.option("--mechanism", "-m", "mechanisms", type=_MECHS, multiple=True,
              help="Only this mechanism's credential (repeatable; default every one the user has).")
@_data_dir_option
@bootstrap_option
@_timeout_option
def remove(name: str, mechanisms: tuple[str, ...], data_dir: str | None, bootstrap: str,
           properties: tuple[str, ...], timeout: float) -> None:
    """Delete the SCRAM credentials of user NAME."""
    if data_dir is not None:
        store = _store(data_dir)
        have = store.describe().get(name, {})
        mechs = [m.upper() for m in mechanisms] or sorted(have)
        missing = [m for m in mechs if m not in have]
        if missing or not mechs:
            fail(f"user {name} has no {', '.join(missing) or 'SCRAM'} credential")
        store.alter([], [(name, m) for m in mechs])
        click.echo(f"user {name}: {', '.join(mechs)} credentials removed")
        return
    from confluent_kafka.admin import UserScramCredentialDeletion

    admin = _admin(bootstrap, properties)
    mechs = [m.upper() for m in mechanisms]
    if not mechs:
        try:
            described = admin.describe_user_scram_credentials([name], request_timeout=timeout)[name].result(timeout)
        except Exception as exc:
            fail(f"user {name}: {kafka_error_text(exc)}")
        mechs = [i.mechanism.name.replace("_", "-") for i in described.scram_credential_infos]
    ops = [UserScramCredentialDeletion(name, _mechanism(m)) for m in mechs]
    for user, err in wait_all(admin.alter_user_scram_credentials(ops, request_timeout=timeout), timeout).items():
        if err is not None:
            fail(f"user {user}: {kafka_error_text(err)}")
    click.echo(f"user {name}: {', '.join(mechs)} credentials removed")

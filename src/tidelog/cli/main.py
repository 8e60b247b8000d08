"""The ``tidelog`` command. Sub-commands live in their own modules and are imported only when used."""

from __future__ import annotations

import importlib
import os
import sys

import click

# command name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "serve": "tidelog.cli.serve:serve",
    "dump-log": "tidelog.cli.dump_log:dump_log",
    "topics": "tidelog.cli.topics:topics",
    "produce": "tidelog.cli.console:produce",
    "consume": "tidelog.cli.console:consume",
    "console": "tidelog.console.command:console",  # above cli in the layers (it reuses cli helpers)
    "groups": "tidelog.cli.groups:groups",
    "share-groups": "tidelog.cli.share_groups:share_groups",
    "cluster": "tidelog.cli.cluster:cluster",
    "transactions": "tidelog.cli.transactions:transactions",
    "users": "tidelog.cli.users:users",
    "quotas": "tidelog.cli.quotas:quotas",
    "acls": "tidelog.cli.acls:acls",
    "get-offsets": "tidelog.cli.offsets:get_offsets",
    "delete-records": "tidelog.cli.records:delete_records",
    "log-dirs": "tidelog.cli.log_dirs:log_dirs",
    "configs": "tidelog.cli.configs:configs",
    "features": "tidelog.cli.features:features",
    "leader-election": "tidelog.cli.reassign:leader_election",
    "reassign-partitions": "tidelog.cli.reassign:reassign_partitions",
    "producer-perf-test": "tidelog.cli.perf:producer_perf_test",
    "consumer-perf-test": "tidelog.cli.perf:consumer_perf_test",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return None
        return getattr(module, attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidelog")
def cli() -> None:
    """tidelog: a Kafka-compatible commit log that writes Kafka's own segment files."""


def main() -> None:
    """Run the command. Bad use and expected failures are one line from the command itself (exit 1, or 2 for a
    usage error); anything unforeseen is one line too, with the traceback only when TIDELOG_DEBUG is set."""
    try:
        cli()
    except Exception as exc:
        if os.environ.get("TIDELOG_DEBUG"):
            raise
        click.echo(f"Error: {type(exc).__name__}: {exc} (TIDELOG_DEBUG=1 shows the traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""``tidelog dump-log``: Kafka's ``kafka-dump-log.sh`` for tidelog (and Kafka) segment files.

Exit status: 0 when every file was read and verified cleanly, 1 when any problem was found (corrupt or
truncated batch, index mismatch, unreadable file), 2 on a usage error.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

import click

from tidelog.tools.dump_log import DEFAULT_MAX_BYTES, DEFAULT_MAX_MESSAGE_SIZE, Dumper, DumpOptions


def _split_files(values: tuple[str, ...]) -> list[str]:
    files = [part.strip() for value in values for part in value.split(",")]
    return [f for f in files if f]


@click.command("dump-log", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--files",
    "files",
    multiple=True,
    required=True,
    metavar="FILES",
    help="REQUIRED: comma-separated list of .log, .index, .timeindex, .snapshot and .txnindex files "
    "(may be repeated).",
)
@click.option(
    "--deep-iteration",
    "--deep",
    "deep_iteration",
    is_flag=True,
    help="Decode every batch and print one line per record.",
)
@click.option(
    "--print-data-log", is_flag=True, help="Print record keys and payloads (implies --deep-iteration)."
)
@click.option(
    "--verify-index-only", is_flag=True, help="Verify index entries against the log without printing them."
)
@click.option(
    "--index-sanity-check",
    is_flag=True,
    help="Only check that index files are well formed (size, ordering), as at broker startup.",
)
@click.option(
    "--max-message-size",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_MESSAGE_SIZE,
    show_default=True,
    help="Largest batch expected when verifying index entries.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Read at most this many bytes of each .log file.",
)
@click.option(
    "--skip-record-metadata", is_flag=True, help="With --print-data-log, print only keys and payloads."
)
@click.option(
    "--offsets-decoder",
    is_flag=True,
    help="Decode __consumer_offsets records (committed offsets, group metadata) as JSON, as Kafka does "
    "(implies --print-data-log).",
)
@click.option(
    "--share-group-state-decoder",
    is_flag=True,
    help="Decode __share_group_state records (ShareSnapshot, ShareUpdate) as JSON, as Kafka does "
    "(implies --print-data-log).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object per line instead of Kafka's text."
)
def dump_log(
    files: tuple[str, ...],
    deep_iteration: bool,
    print_data_log: bool,
    verify_index_only: bool,
    index_sanity_check: bool,
    max_message_size: int,
    max_bytes: int,
    skip_record_metadata: bool,
    offsets_decoder: bool,
    share_group_state_decoder: bool,
    as_json: bool,
) -> None:
    """Print the contents of Kafka segment files and verify their indexes (like kafka-dump-log.sh)."""
    paths = _split_files(files)
    if not paths:
        raise click.UsageError("--files needs at least one file")
    options = DumpOptions(
        deep_iteration=deep_iteration,
        print_data_log=print_data_log,
        verify_index_only=verify_index_only,
        index_sanity_check=index_sanity_check,
        max_message_size=max_message_size,
        max_bytes=max_bytes,
        skip_record_metadata=skip_record_metadata,
        offsets_decoder=offsets_decoder,
        share_state_decoder=share_group_state_decoder,
    )
    dumper = Dumper(options)
    out = sys.stdout
    err = sys.stderr
    try:
        _emit(dumper, paths, as_json, out, err)
    except BrokenPipeError:
        # `tidelog dump-log ... | head`: stop quietly.
        sys.stderr.close()
        sys.exit(1 if dumper.problems else 0)
    out.flush()
    if dumper.problems:
        sys.exit(1)


def _emit(dumper: Dumper, paths: list[str], as_json: bool, out: TextIO, err: TextIO) -> None:
    for event in dumper.dump_all(paths):
        if as_json:
            if event.text_only:
                continue
            out.write(json.dumps(event.to_json_obj(), separators=(",", ":")))
            out.write("\n")
        elif event.text is not None:
            if event.stderr:
                out.flush()
                err.write(event.text + "\n")
            else:
                out.write(event.text + "\n")

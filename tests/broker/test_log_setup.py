"""The broker's log lines: one event is one line, whatever a client puts in the fields it controls."""

from __future__ import annotations

import json
import logging

import pytest

from tidelog.broker.log_setup import JsonFormatter, TextFormatter


def _record(msg: str, *args: object, kv: dict | None = None) -> logging.LogRecord:
    rec = logging.LogRecord("tidelog.broker.server", logging.INFO, __file__, 1, msg, args, None)
    rec.kv = kv or {}
    return rec


@pytest.mark.parametrize("client_id", ["evil\n2026-01-01T00:00:00.000Z ERROR forged", "cr\roverwrite",
                                       "esc\x1b[2Jclear", "nel\x85line", "ls\u2028sep", 'quote" x=1'])
def test_client_chosen_text_cannot_forge_a_line(client_id: str) -> None:
    line = TextFormatter().format(_record("closing connection %s", client_id, kv={"client_id": client_id}))
    assert len(line.splitlines()) == 1 and line.isprintable(), repr(line)
    field = line.split(" client_id=", 1)[1]
    assert json.loads(field) == client_id  # quoted with JSON escapes: still readable, and reversible


def test_plain_values_stay_unquoted() -> None:
    line = TextFormatter().format(_record("broker started", kv={"node.id": 1, "listener": "PLAINTEXT://h:9092"}))
    assert line.endswith("broker started node.id=1 listener=PLAINTEXT://h:9092")


def test_json_format_escapes_too() -> None:
    line = JsonFormatter().format(_record("m %s", "a\nb", kv={"client_id": "x\ny"}))
    assert len(line.splitlines()) == 1 and json.loads(line)["client_id"] == "x\ny"

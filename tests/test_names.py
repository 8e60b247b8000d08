"""Names, not numbers (issue 26 item 5): outside ``protocol/`` (which decodes and encodes the numbers) tidelog names
a Kafka error as ``ErrorCode.X`` and an API key as ``ApiKey.X``, never as an int literal or, on the server side,
as a string. The rules are those of ``scripts/dev/names_codemod.py`` (one place: the codemod rewrites what this
test refuses), read here through its ``Finder``:

* an int in ``"error_code": n`` / ``error_code=n`` or compared with something named ``*error_code``, except 0:
  NONE is the value of every error field of a successful answer, written in the hot paths' response dicts, and
  the Produce fast lane's C encoder takes an exact int there, so ``0`` stays a literal in those places;
* an int compared with something named ``*api_key``;
* a module constant spelling an error or an API key by its name with Kafka's value (``NOT_COORDINATOR = 16``);
* a string naming an error given to ``PartitionError``/``TopicError``/... or compared with ``kafka_error``, and
  on the server side (broker/, cluster/, storage/, records/) any string that is an error's name (not a
  docstring, an f-string or a metric label).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from tidelog.broker.errors import BrokerError, PartitionError, error_of, is_client_error
from tidelog.errors import ERRORS_BY_NAME, ApiError, ErrorCode, error_code
from tidelog.records.errors import CorruptRecordError, RecordError
from tidelog.storage.errors import InvalidConfigError, StorageError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tidelog"


def _codemod():
    spec = importlib.util.spec_from_file_location("names_codemod", ROOT / "scripts" / "dev" / "names_codemod.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("names_codemod", module)
    spec.loader.exec_module(module)
    return module


codemod = _codemod()


def _literals(rel: str, text: str) -> list[str]:
    tree = ast.parse(text)
    return [f"{rel}:{node.lineno}: {ast.unparse(node)} -> {new}" for node, new in codemod.Finder(rel, tree).run()]


def test_no_literal_error_code_or_api_key_outside_protocol() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not codemod.excluded(rel):
            found += _literals(rel, path.read_text(encoding="utf-8"))
    assert not found, ("numbers (or names as strings) where ErrorCode/ApiKey members belong; run "
                       "scripts/dev/names_codemod.py:\n" + "\n".join(found))


PLANTED = '''
from tidelog.broker.errors import PartitionError

NOT_COORDINATOR = 16
FETCH_KEY = 1


def handle(api_key: int, body: dict, exc: Exception) -> dict:
    if api_key == 18:
        pass
    if body["error_code"] in (6, 0):
        pass
    if getattr(exc, "kafka_error", None) == "NOT_LEADER_OR_FOLLOWER":
        pass
    body.update(error_code=35)
    raise PartitionError("UNKNOWN_TOPIC_OR_PARTITION")
    return {"error_code": 3, "ok": {"error_code": 0}, "name": "REQUEST_TIMED_OUT"}
'''


def test_a_planted_literal_is_caught() -> None:
    """Each kind of literal, planted in a broker module, is reported (and 0 = NONE, allowed, is not)."""
    found = _literals("src/tidelog/broker/planted.py", PLANTED)
    replacements = sorted(line.split(" -> ")[1] for line in found)
    assert replacements == sorted([
        "ErrorCode.NOT_COORDINATOR", "ApiKey.FETCH", "ApiKey.API_VERSIONS", "ErrorCode.NOT_LEADER_OR_FOLLOWER",
        "ErrorCode.NOT_LEADER_OR_FOLLOWER", "ErrorCode.UNSUPPORTED_VERSION", "ErrorCode.UNKNOWN_TOPIC_OR_PARTITION",
        "ErrorCode.UNKNOWN_TOPIC_OR_PARTITION", "ErrorCode.REQUEST_TIMED_OUT"]), found
    # the whole-tree check sees a planted file too
    new, report = codemod.rewrite_text(PLANTED, "src/tidelog/broker/planted.py")
    assert len(report) == len(found) and not _literals("src/tidelog/broker/planted.py", new)
    assert "from tidelog.errors import ErrorCode" in new and "from tidelog.protocol.api_keys import ApiKey" in new


def test_the_codemod_is_idempotent_on_its_output() -> None:
    new, _ = codemod.rewrite_text(PLANTED, "src/tidelog/broker/planted.py")
    again, report = codemod.rewrite_text(new, "src/tidelog/broker/planted.py")
    assert again == new and report == []


def test_protocol_and_client_side_strings_are_left_alone() -> None:
    """protocol/ handles the numbers; the CLI compares names that come from client libraries (strings)."""
    assert codemod.excluded("src/tidelog/protocol/codec.py")
    assert _literals("src/tidelog/cli/x.py", 'if name == "TOPIC_ALREADY_EXISTS":\n    pass\n') == []
    assert _literals("src/tidelog/broker/x.py", 'log.info(f"NONE{x}")\nm.record_error("FETCH", "NONE")\n') == []


def test_one_hierarchy() -> None:
    """Every error meant for a client derives from ApiError and carries an ErrorCode."""
    for cls in (RecordError, StorageError, InvalidConfigError, BrokerError):
        assert issubclass(cls, ApiError), cls
        assert isinstance(cls.kafka_error, ErrorCode)
    exc = PartitionError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert str(exc) == "NOT_LEADER_OR_FOLLOWER" and is_client_error(exc)
    assert error_of(exc) == (6, "NOT_LEADER_OR_FOLLOWER")
    assert error_of(CorruptRecordError("bad crc")) == (ErrorCode.CORRUPT_MESSAGE, "bad crc")
    assert not is_client_error(ValueError("kafka_error")) and error_of(KeyError("x"))[0] == -1


def test_one_lookup_and_the_enum_is_the_table() -> None:
    assert [e.name for e in ErrorCode] == list(ERRORS_BY_NAME)
    assert all(int(ErrorCode[n]) == e.code for n, e in ERRORS_BY_NAME.items())
    assert error_code("NOT_COORDINATOR") is ErrorCode.NOT_COORDINATOR is error_code(ErrorCode.NOT_COORDINATOR)
    with pytest.raises(KeyError):
        error_code("NOT_A_KAFKA_ERROR")
    # printed as its name (messages, logs, metric labels); the wire and JSON see the int
    assert f"{ErrorCode.NOT_COORDINATOR}" == "NOT_COORDINATOR" and f"{ErrorCode.NOT_COORDINATOR:d}" == "16"

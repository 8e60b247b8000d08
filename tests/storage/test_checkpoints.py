from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tidelog.storage import checkpoints as cp
from tidelog.storage.checkpoints import (
    MetaProperties,
    atomic_write,
    clean_shutdown_exists,
    delete_clean_shutdown,
    format_properties,
    new_uuid,
    parse_properties,
    read_clean_shutdown,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    uuid_from_str,
    uuid_to_str,
    write_clean_shutdown,
    write_leader_epoch_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from tidelog.storage.errors import CorruptCheckpointError

# ------------------------------------------------------------------------------------ offset checkpoints


def test_offset_checkpoint_round_trip_and_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    entries = {("orders", 1): 42, ("orders", 0): 7, ("a.b_c-d", 12): 9_000_000_000}
    write_offset_checkpoint(path, entries)
    assert path.read_text() == "0\n3\na.b_c-d 12 9000000000\norders 0 7\norders 1 42\n"
    assert read_offset_checkpoint(path) == entries
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_offset_checkpoint_missing_and_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nope") == {}
    write_offset_checkpoint(tmp_path / "x", {})
    assert (tmp_path / "x").read_text() == "0\n0\n"
    assert read_offset_checkpoint(tmp_path / "x") == {}
    (tmp_path / "empty").write_text("")
    assert read_offset_checkpoint(tmp_path / "empty") == {}  # Kafka reads an empty file as no entries


def test_offset_checkpoint_reads_kafka_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\nt 0  5\nt\t1\t6\n")
    assert read_offset_checkpoint(path) == {("t", 0): 5, ("t", 1): 6}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1\n1\nt 0 5\n", "unrecognised version 1"),
        ("0\n2\nt 0 5\n", "expected 2 entries but found 1"),
        ("0\n1\nt 0 5\nt 1 6\n", "expected 1 entries but found 2"),
        ("0\n1\nt 0\n", "malformed line"),
        ("0\n1\nt 0 5 9\n", "malformed line"),
        ("0\n1\nt zero 5\n", "malformed partition"),
        ("0\n1\nt 0 5x\n", "malformed offset"),
        ("x\n1\nt 0 5\n", "malformed version"),
        ("0\n", "truncated"),
        ("0\n1\nt 0", "truncated"),
        ("\x00\x01garbage\xff", "not UTF-8"),
        ("0\n2\nt 0 5\nt 0 6\n", "duplicate entry"),
        ("0\n-1\n", "out of range"),
    ],
)
def test_offset_checkpoint_strict_read(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptCheckpointError) as info:
        read_offset_checkpoint(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_offset_checkpoint_rejects_unwritable_topic(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_offset_checkpoint(tmp_path / "cp", {("bad topic", 0): 1})


# ------------------------------------------------------------------------------------------ atomic write


def test_atomic_write_failing_rename_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    write_offset_checkpoint(path, {("t", 0): 1})
    before = path.read_bytes()

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("simulated crash during rename")

    monkeypatch.setattr(cp.os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        write_offset_checkpoint(path, {("t", 0): 2, ("t", 1): 3})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log-start-offset-checkpoint"]


def test_atomic_write_failing_fsync_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"old")
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(cp.os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        atomic_write(path, b"new")
    monkeypatch.setattr(cp.os, "fsync", real_fsync)
    assert path.read_bytes() == b"old"
    assert not (tmp_path / "f.tmp").exists()


def test_atomic_write_overwrites_stale_tmp(tmp_path: Path) -> None:
    (tmp_path / "f.tmp").write_bytes(b"half written garbage from a crash")
    atomic_write(tmp_path / "f", b"data")
    assert (tmp_path / "f").read_bytes() == b"data"
    assert not (tmp_path / "f.tmp").exists()


# --------------------------------------------------------------------------------- leader-epoch checkpoint


def test_atomic_write_mode(tmp_path: Path) -> None:
    """``mode`` sets the new file's permissions (a secret readable by its owner only); the default is open()'s."""
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "secret", b"s", mode=0o600)
        atomic_write(tmp_path / "plain", b"p")
    finally:
        os.umask(old)
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "plain").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "secret").read_bytes() == b"s"


def test_leader_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(0, 0), (3, 120), (7, 9000)])
    assert path.read_text() == "0\n3\n0 0\n3 120\n7 9000\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (3, 120), (7, 9000)]
    assert read_leader_epoch_checkpoint(tmp_path / "missing") == []


@pytest.mark.parametrize(
    "text",
    ["1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\n0 0 0\n", "0\n1\nzero 0\n", "0\n1\n", "garbage", "0\n1\n0 0"],
)
def test_leader_epoch_checkpoint_strict(tmp_path: Path, text: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint"):
        read_leader_epoch_checkpoint(path)


# ------------------------------------------------------------------------------------------------- Uuid


def test_uuid_string_form() -> None:
    raw = bytes(range(16))
    text = uuid_to_str(raw)
    assert len(text) == 22 and "=" not in text
    assert text == base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert uuid_from_str(text) == raw
    # a known Kafka-style id: bytes fb ff ... produce '-' and '_' from the URL-safe alphabet
    assert uuid_to_str(b"\xfb\xff" + bytes(14)) == "-_8AAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize(
    "bad",
    ["", "short", "A" * 23, "AAAAAAAAAAAAAAAAAAAA+/", "AAAAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAAB"],
)
def test_uuid_from_str_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        uuid_from_str(bad)


def test_new_uuid_avoids_reserved_and_dash() -> None:
    for _ in range(2000):
        u = new_uuid()
        assert len(u) == 16
        assert u not in (bytes(16), (1).to_bytes(16, "big"))
        assert "-" not in uuid_to_str(u)


# ------------------------------------------------------------------------------------ partition.metadata


def test_partition_metadata_exact_bytes(tmp_path: Path) -> None:
    topic_id = bytes.fromhex("00112233445566778899aabbccddeeff")
    path = tmp_path / "partition.metadata"
    write_partition_metadata(path, topic_id)
    assert path.read_bytes() == b"version: 0\ntopic_id: " + uuid_to_str(topic_id).encode()
    assert not path.read_bytes().endswith(b"\n")  # Kafka's PartitionMetadata.encode has no trailing newline
    assert read_partition_metadata(path) == topic_id
    assert read_partition_metadata(tmp_path / "absent") is None


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\ntopic_id: ABEiM0RVZneImaq7zN3u_w",
        "version: 0\n",
        "version: 0",
        "version:0\ntopic_id: ABEiM0RVZneImaq7zN3u_w",
        "topic_id: ABEiM0RVZneImaq7zN3u_w\nversion: 0",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
        "version: 0\ntopic_id: not-a-uuid",
        "version: 0\ntopic_id: ABEiM0RVZneImaq7zN3u_w\nextra: 1",
        "\xff\xfe",
    ],
)
def test_partition_metadata_strict(tmp_path: Path, text: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptCheckpointError, match=r"partition\.metadata"):
        read_partition_metadata(path)


def test_partition_metadata_tolerates_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_text("version: 0\ntopic_id: ABEiM0RVZneImaq7zN3u_w\n")
    assert read_partition_metadata(path) == bytes.fromhex("00112233445566778899aabbccddeeff")


# --------------------------------------------------------------------------------------- meta.properties


def test_meta_properties_v0_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    when = datetime(2024, 10, 29, 12, 4, 5, tzinfo=UTC)
    write_meta_properties(path, MetaProperties(0, 3, "Vt9PZqXhQ-2-uCmYkY3m1w"), now=when)
    assert path.read_text() == (
        "#\n#Tue Oct 29 12:04:05 UTC 2024\nversion=0\nbroker.id=3\ncluster.id=Vt9PZqXhQ-2-uCmYkY3m1w\n"
    )
    assert read_meta_properties(path) == MetaProperties(0, 3, "Vt9PZqXhQ-2-uCmYkY3m1w")
    assert read_meta_properties(tmp_path / "absent") is None


def test_meta_properties_reads_kraft_v1(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(
        "#\n#Mon Jan 06 10:00:00 UTC 2025\nnode.id=1\ndirectory.id=ABEiM0RVZneImaq7zN3u_w\n"
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n"
    )
    meta = read_meta_properties(path)
    assert meta == MetaProperties(
        1, 1, "MkU3OEVBNTcwNTJENDM2Qg", bytes.fromhex("00112233445566778899aabbccddeeff")
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("broker.id=1\ncluster.id=x\n", "no 'version'"),
        ("version=2\nbroker.id=1\n", "unrecognised version 2"),
        ("version=0\nnode.id=1\n", "requires 'broker.id'"),
        ("version=1\nnode.id=1\n", "requires 'cluster.id'"),
        ("version=0\nbroker.id=one\n", "malformed broker.id"),
        ("version=1\nnode.id=1\ncluster.id=c\ndirectory.id=zz\n", "directory.id"),
    ],
)
def test_meta_properties_strict(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError, match=r"meta\.properties") as info:
        read_meta_properties(path)
    assert fragment in str(info.value)


def test_java_properties_syntax() -> None:
    text = "! bang comment\n  # hash comment\nkey1 = value one\nkey2:v2\nkey3 v3\nmulti=a\\\n    b\\\n  c\nesc\\ key=x\\:y\\u00e9\n"
    assert parse_properties(text) == {
        "key1": "value one",
        "key2": "v2",
        "key3": "v3",
        "multi": "abc",
        "esc key": "x:yé",
    }
    props = {"a key": " lead=é#", "k": "v"}
    assert parse_properties(format_properties(props)) == props


# --------------------------------------------------------------------------------------- clean shutdown


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not clean_shutdown_exists(tmp_path)
    assert read_clean_shutdown(tmp_path) is None
    write_clean_shutdown(tmp_path, 17)
    assert (tmp_path / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":17}'
    assert clean_shutdown_exists(tmp_path)
    assert read_clean_shutdown(tmp_path) == 17
    write_clean_shutdown(tmp_path)
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == {"version": 0, "brokerEpoch": -1}
    delete_clean_shutdown(tmp_path)
    assert not clean_shutdown_exists(tmp_path)
    delete_clean_shutdown(tmp_path)  # idempotent


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"version":1,"brokerEpoch":1}', '{"version":0}', '{"version":0,"brokerEpoch":"x"}'],
)
def test_clean_shutdown_strict(tmp_path: Path, text: str) -> None:
    (tmp_path / ".kafka_cleanshutdown").write_text(text)
    assert clean_shutdown_exists(tmp_path)  # still "clean" for the recovery decision
    with pytest.raises(CorruptCheckpointError, match=r"\.kafka_cleanshutdown"):
        read_clean_shutdown(tmp_path)

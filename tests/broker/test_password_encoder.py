"""Dynamic password configs at rest (broker/password_encoder.py): Kafka's EncryptingPasswordEncoder layout,
checked against the JDK's own crypto (PasswordCodec.java), and the dynamic config store's use of it: encoded in
the file with ``password.encoder.secret``, decoded at the next start, a wrong secret ignored with an error, the
old secret re-encoded, in clear (mode 0600) without a secret on one node; through a real broker with
confluent-kafka's AdminClient. ZooKeeper mode (refused without a secret, encoded in ``/config/brokers/<id>``) is
in tests/cluster/test_dynamic_broker_configs.py."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from tidelog.broker import config as bc
from tidelog.broker import password_encoder as pw
from tidelog.broker.dynamic_config import STORE_FILE, DynamicBrokerConfig

SECRET = "s3cret-of-the-cluster"
NAME = "listener.name.plaintext.ssl.key.password"
JAAS = "listener.name.plaintext.plain.sasl.jaas.config"
TIMEOUT = 30


# -- the codec ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
@pytest.mark.parametrize("password", ["changeit", "", "pässwörd-𝄞-" * 5])
def test_round_trip_and_layout(cipher: str, password: str) -> None:
    enc = pw.PasswordEncoder(SECRET, cipher_algorithm=cipher)
    encoded = enc.encode(password)
    fields = dict(item.split(":", 1) for item in encoded.split(","))
    expected = {"keyFactoryAlgorithm", "cipherAlgorithm", "keyLength", "salt", "iterations", "encryptedPassword",
                "passwordLength", "initializationVector"}
    if cipher.startswith("AES/GCM/"):
        expected.add("authenticationTagLength")
    assert set(fields) == expected
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512" and fields["iterations"] == "4096"
    assert password.encode() not in encoded.encode() or password == ""
    assert enc.decode(encoded) == password
    assert enc.encode(password) != encoded  # a fresh salt and IV every time


def test_wrong_secret_and_damage_are_refused() -> None:
    encoded = pw.PasswordEncoder(SECRET).encode("changeit")
    with pytest.raises(pw.PasswordEncoderError):
        pw.PasswordEncoder("another secret").decode(encoded)
    fields = dict(item.split(":", 1) for item in encoded.split(","))
    fields["passwordLength"] = "9"
    with pytest.raises(pw.PasswordEncoderError, match="sanity check of length"):
        pw.PasswordEncoder(SECRET).decode(",".join(f"{k}:{v}" for k, v in fields.items()))
    with pytest.raises(pw.PasswordEncoderError, match="not an encoded password"):
        pw.PasswordEncoder(SECRET).decode("changeit")


def test_bad_encoder_configs_fail_the_start_with_the_config_named(tmp_path: Path) -> None:
    for name, value in ((pw.ITERATIONS, "100"), (pw.KEY_LENGTH, "64"), (pw.CIPHER_ALGORITHM, "DES"),
                        (pw.ITERATIONS, "many")):
        props = {"log.dirs": str(tmp_path), pw.SECRET: SECRET, name: value}
        with pytest.raises(bc.ConfigException, match=f"configuration {name}"):
            DynamicBrokerConfig(bc.BrokerConfig.from_properties(props, warn_unknown=False))


def test_password_config_names_are_kafkas() -> None:
    assert pw.is_password_config(NAME) and pw.is_password_config(JAAS)
    assert pw.is_password_config("listener.name.sasl_ssl.ssl.truststore.certificates")
    assert not pw.is_password_config("listener.name.plaintext.ssl.keystore.location")
    assert not pw.is_password_config("log.retention.ms")


@pytest.fixture(scope="module")
def java_codec(tmp_path_factory: pytest.TempPathFactory) -> Any:
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        pytest.skip("no JDK (java and javac) on this machine")
    out = tmp_path_factory.mktemp("pwcodec")
    subprocess.run([javac, "-d", str(out), str(Path(__file__).with_name("PasswordCodec.java"))], check=True,
                   timeout=120)

    def run(*args: str) -> str:
        return subprocess.run([java, "-cp", str(out), "PasswordCodec", *args], check=True, capture_output=True,
                              text=True, timeout=60).stdout

    return run


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_the_jvm_reads_ours_and_we_read_the_jvms(java_codec: Any, cipher: str) -> None:
    password = "jvm-pässword-42"
    ours = pw.PasswordEncoder(SECRET, cipher_algorithm=cipher).encode(password)
    assert java_codec("decode", SECRET, ours) == password
    theirs = java_codec("encode", SECRET, password, cipher)
    assert pw.PasswordEncoder(SECRET).decode(theirs) == password


# -- the dynamic config store -----------------------------------------------------------------------------------

def _dynamic(data: Path, **props: str) -> DynamicBrokerConfig:
    cfg = bc.BrokerConfig.from_properties({"log.dirs": str(data), **props}, warn_unknown=False)
    d = DynamicBrokerConfig(cfg)
    d.load()
    return d


def _stored(data: Path) -> dict[str, str]:
    return json.loads((data / STORE_FILE).read_text())["brokers"]["0"]  # type: ignore[no-any-return]


def test_file_store_encodes_decodes_rotates_and_drops(tmp_path: Path) -> None:
    d = _dynamic(tmp_path, **{pw.SECRET: SECRET})
    d.alter("0", {NAME: "changeit", "log.retention.ms": "7200000"}, {NAME, "log.retention.ms"}, False)
    stored = _stored(tmp_path)
    assert stored["log.retention.ms"] == "7200000"
    assert "changeit" not in (tmp_path / STORE_FILE).read_text() and pw.looks_encoded(stored[NAME])
    assert stat.S_IMODE((tmp_path / STORE_FILE).stat().st_mode) == 0o600
    assert d.config.props[NAME] == "changeit"  # the running broker uses the password itself

    # the next start decodes it
    assert _dynamic(tmp_path, **{pw.SECRET: SECRET}).broker[NAME] == "changeit"
    # a new secret with the old one given: decoded with the old, written back encoded with the new
    rotated = _dynamic(tmp_path, **{pw.SECRET: "new-secret", pw.OLD_SECRET: SECRET})
    assert rotated.broker[NAME] == "changeit"
    again = _stored(tmp_path)[NAME]
    assert pw.PasswordEncoder("new-secret").decode(again) == "changeit"
    assert _dynamic(tmp_path, **{pw.SECRET: "new-secret"}).broker[NAME] == "changeit"
    # a wrong secret: the config is ignored (logged), the other dynamic configs stay
    wrong = _dynamic(tmp_path, **{pw.SECRET: "wrong"})
    assert NAME not in wrong.broker and wrong.broker["log.retention.ms"] == "7200000"
    assert _stored(tmp_path)[NAME] == again  # nothing rewritten by a broker that could not read it


def test_one_node_without_secret_keeps_clear_text_and_encodes_once_a_secret_is_set(tmp_path: Path) -> None:
    d = _dynamic(tmp_path)
    d.alter("0", {NAME: "changeit"}, {NAME}, False)
    assert _stored(tmp_path)[NAME] == "changeit"  # as a KRaft controller keeps it in its metadata log
    assert stat.S_IMODE((tmp_path / STORE_FILE).stat().st_mode) == 0o600
    assert _dynamic(tmp_path, **{pw.SECRET: SECRET}).broker[NAME] == "changeit"
    assert pw.PasswordEncoder(SECRET).decode(_stored(tmp_path)[NAME]) == "changeit"


# -- through a real broker --------------------------------------------------------------------------------------

@pytest.mark.integration
def test_admin_client_sets_a_password_config_stored_encoded(broker_factory: Any) -> None:
    b = broker_factory({pw.SECRET: SECRET})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry(NAME, "changeit", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    stored = _stored(b.data_dir)[NAME]
    assert pw.PasswordEncoder(SECRET).decode(stored) == "changeit"

    def described() -> Any:
        r = ConfigResource(ConfigResource.Type.BROKER, "0")
        client = AdminClient({"bootstrap.servers": b.bootstrap})
        return client.describe_configs([r])[r].result(TIMEOUT)

    entry = described()[NAME]
    assert entry.is_sensitive and entry.value is None and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    secret = described()[pw.SECRET]
    assert secret.is_sensitive and secret.value is None and secret.is_read_only
    b.restart()
    assert described()[NAME].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert SECRET not in b.log_text() and "changeit" not in b.log_text()

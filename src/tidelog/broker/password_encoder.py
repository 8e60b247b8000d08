"""Dynamic password configs at rest, encoded as Kafka's ``EncryptingPasswordEncoder`` encodes them.

A password config set with AlterConfigs (``listener.name.<l>.ssl.keystore.password``, ``...sasl.jaas.config``,
...) is kept in the dynamic config store (ZooKeeper's ``/config/brokers/<id>``, or one node's
``dynamic-broker-configs.json``). Kafka never puts such a value there in clear: with ``password.encoder.secret``
set it stores the CSV map below, without it a ZooKeeper-mode broker refuses the change ("Password encoder secret
not configured"). The layout is Kafka's, so a Kafka broker given the same secret reads what tidelog stored and the
other way round (facts from server-common's PasswordEncoder, EncryptingPasswordEncoder, IvParamsEncoder,
GcmParamsEncoder and PasswordEncoderConfigs):

    keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,keyLength:128,
    salt:<base64 of 256 random bytes>,iterations:4096,encryptedPassword:<base64>,passwordLength:<n>,
    initializationVector:<base64>            (AES/GCM/...: also authenticationTagLength:<bits>)

The key is PBKDF2(secret as UTF-8, salt, iterations, keyLength bits) with the named HMAC; ``passwordLength`` is the
Java string length (UTF-16 code units), checked after decryption as Kafka does.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

SECRET = "password.encoder.secret"
OLD_SECRET = "password.encoder.old.secret"
KEYFACTORY_ALGORITHM = "password.encoder.keyfactory.algorithm"
CIPHER_ALGORITHM = "password.encoder.cipher.algorithm"
KEY_LENGTH = "password.encoder.key.length"
ITERATIONS = "password.encoder.iterations"

DEFAULT_KEYFACTORY = "PBKDF2WithHmacSHA512"  # Kafka: this one if the JVM has it (it does), else ...SHA1
DEFAULT_CIPHER = "AES/CBC/PKCS5Padding"
DEFAULT_KEY_LENGTH = 128
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 256
GCM_TAG_BITS = 128  # the JDK's default for AES/GCM when Cipher.init picks the parameters
GCM_IV_BYTES = 12

#: Kafka's DynamicPasswordConfigs: the dynamic broker configs of type PASSWORD; a stored name is one of them
#: when it ends with one (a listener prefix keeps the type)
DYNAMIC_PASSWORD_CONFIGS = frozenset({
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "sasl.jaas.config",
})

_HMACS = {"PBKDF2WithHmacSHA512": "sha512", "PBKDF2WithHmacSHA256": "sha256", "PBKDF2WithHmacSHA1": "sha1"}
_CIPHERS = ("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding")


class PasswordEncoderError(Exception):
    """A password that cannot be encoded or decoded, or a bad ``password.encoder.*`` value (``config`` names
    it; Kafka's ConfigException text)."""

    def __init__(self, message: str, config: str = "", value: object = None, reason: str = "") -> None:
        super().__init__(message)
        self.config, self.value, self.reason = config, value, reason or message


def is_password_config(name: str) -> bool:
    """Kafka's ``DynamicBrokerConfig.isPasswordConfig``."""
    return any(name.endswith(p) for p in DYNAMIC_PASSWORD_CONFIGS)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _java_length(s: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


@dataclass(frozen=True, slots=True)
class PasswordEncoder:
    """Encodes with the configured algorithms; decodes with those a stored value names (as Kafka)."""

    secret: str
    key_factory_algorithm: str = DEFAULT_KEYFACTORY
    cipher_algorithm: str = DEFAULT_CIPHER
    key_length: int = DEFAULT_KEY_LENGTH
    iterations: int = DEFAULT_ITERATIONS

    def __post_init__(self) -> None:
        checks = (
            (KEYFACTORY_ALGORITHM, self.key_factory_algorithm, self.key_factory_algorithm in _HMACS,
             f"supported: {', '.join(sorted(_HMACS))}"),
            (CIPHER_ALGORITHM, self.cipher_algorithm, self.cipher_algorithm in _CIPHERS,
             f"supported: {', '.join(_CIPHERS)}"),
            (KEY_LENGTH, self.key_length, self.key_length in (128, 192, 256), "AES takes 128, 192 or 256"),
            (ITERATIONS, self.iterations, self.iterations >= 1024, "Value must be at least 1024"),
        )
        for name, value, ok, reason in checks:
            if not ok:
                raise PasswordEncoderError(f"Invalid value {value} for configuration {name}: {reason}", name, value,
                                           reason)

    def _key(self, key_factory: str, key_length: int, salt: bytes, iterations: int) -> bytes:
        hmac = _HMACS.get(key_factory)
        if hmac is None:
            raise PasswordEncoderError(f"Password could not be decoded: unknown key factory {key_factory}")
        return hashlib.pbkdf2_hmac(hmac, self.secret.encode("utf-8"), salt, iterations, key_length // 8)

    def encode(self, password: str) -> str:
        # imported when a password is en/decoded, not with the module: most brokers never do, and cryptography's
        # import is ~60 ms of every `tidelog serve` start-up otherwise
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        salt = os.urandom(SALT_BYTES)
        key = self._key(self.key_factory_algorithm, self.key_length, salt, self.iterations)
        plain = password.encode("utf-8")
        fields = {
            "keyFactoryAlgorithm": self.key_factory_algorithm,
            "cipherAlgorithm": self.cipher_algorithm,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
        }
        if self.cipher_algorithm.startswith("AES/GCM/"):
            iv = os.urandom(GCM_IV_BYTES)
            encrypted = AESGCM(key).encrypt(iv, plain, None)  # ciphertext || tag, as the JDK's doFinal
            fields["authenticationTagLength"] = str(GCM_TAG_BITS)
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = enc.update(padder.update(plain) + padder.finalize()) + enc.finalize()
        fields["encryptedPassword"] = _b64(encrypted)
        fields["passwordLength"] = str(_java_length(password))
        fields["initializationVector"] = _b64(iv)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        # (see encode)
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            params = dict(item.split(":", 1) for item in encoded.split(","))
            cipher_alg = params["cipherAlgorithm"]
            key = self._key(params.get("keyFactoryAlgorithm") or DEFAULT_KEYFACTORY, int(params["keyLength"]),
                            base64.b64decode(params["salt"]), int(params["iterations"]))
            encrypted = base64.b64decode(params["encryptedPassword"])
            iv = base64.b64decode(params["initializationVector"])
            length = int(params["passwordLength"])
        except (KeyError, ValueError) as exc:
            raise PasswordEncoderError(f"Password could not be decoded: not an encoded password ({exc})") from None
        try:
            if cipher_alg.startswith("AES/GCM/"):
                if int(params.get("authenticationTagLength", GCM_TAG_BITS)) != GCM_TAG_BITS:
                    raise ValueError("unsupported GCM tag length")
                plain = AESGCM(key).decrypt(iv, encrypted, None)
            elif cipher_alg == "AES/CBC/PKCS5Padding":
                dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(dec.update(encrypted) + dec.finalize()) + unpadder.finalize()
            else:
                raise ValueError(f"unsupported cipher {cipher_alg}")
            password = plain.decode("utf-8")
        except Exception as exc:  # wrong secret: bad padding / tag, or bytes that are not UTF-8
            raise PasswordEncoderError(f"Password could not be decoded ({type(exc).__name__})") from None
        if _java_length(password) != length:
            raise PasswordEncoderError("Password could not be decoded, sanity check of length failed")
        return password


def _encoder(props: Mapping[str, str], secret_key: str) -> PasswordEncoder | None:
    secret = props.get(secret_key)
    if not secret:
        return None
    numbers = {}
    for name, default in ((KEY_LENGTH, DEFAULT_KEY_LENGTH), (ITERATIONS, DEFAULT_ITERATIONS)):
        raw = props.get(name) or str(default)
        try:
            numbers[name] = int(raw)
        except ValueError:
            raise PasswordEncoderError(f"Invalid value {raw} for configuration {name}: Not a number of type INT",
                                       name, raw, "Not a number of type INT") from None
    return PasswordEncoder(secret, props.get(KEYFACTORY_ALGORITHM) or DEFAULT_KEYFACTORY,
                           props.get(CIPHER_ALGORITHM) or DEFAULT_CIPHER, numbers[KEY_LENGTH], numbers[ITERATIONS])


def encoder_from(props: Mapping[str, str]) -> PasswordEncoder | None:
    """The encoder of ``password.encoder.secret`` (None when it is not set)."""
    return _encoder(props, SECRET)


def old_encoder_from(props: Mapping[str, str]) -> PasswordEncoder | None:
    """The decoder of ``password.encoder.old.secret`` (a secret being rotated), or None."""
    return _encoder(props, OLD_SECRET)


def looks_encoded(value: str) -> bool:
    return "encryptedPassword:" in value and "salt:" in value

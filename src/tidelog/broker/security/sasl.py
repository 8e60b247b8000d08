"""Server side of the SASL mechanisms PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), as Kafka's
``PlainSaslServer`` / ``ScramSaslServer`` behave, and the JAAS-style settings that configure them.

A mechanism server is sans-io: ``evaluate(token) -> challenge`` until ``complete``; a refusal raises
:class:`SaslAuthenticationFailed`, whose ``client_message`` is what Kafka tells the client: the exception's own
message for its ``SaslAuthenticationException``s, else the generic "Authentication failed during
authentication due to invalid credentials with SASL mechanism X" (nothing about whether the user exists).
The exception's detail is what the broker logs ("Failed authentication ... reason=..."): as Kafka's
``SaslServerAuthenticator`` log line, it never holds the user name a failed login sent (a password typed into
the user field would otherwise land in the log), nor any other part of the client's token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from tidelog.broker.security.scram import ScramCredential
from tidelog.client.scram import MECHANISMS, MIN_ITERATIONS, hmac_


class SaslAuthenticationFailed(Exception):
    """Authentication refused. ``client_message``: what the client is told (Kafka's wording)."""

    def __init__(self, detail: str, client_message: str | None = None) -> None:
        super().__init__(detail)
        self.client_message = client_message


def generic_failure(mechanism: str, reauth: bool = False) -> str:
    phase = "re-authentication" if reauth else "authentication"
    return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {mechanism}"


PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


# ----------------------------------------------------------------------------------------------------- PLAIN


class PlainServer:
    """Kafka's PlainSaslServer with its default callback handler: the password of ``user_<name>`` from the
    listener's JAAS options."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("bad token",
                                           f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authz, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("token not UTF-8", generic_failure("PLAIN")) from None
        if not user:
            raise SaslAuthenticationFailed("no username", "Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("no password", "Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            # no user name in the detail (it is logged): a password typed into the user field would be kept
            raise SaslAuthenticationFailed("invalid credentials",
                                           "Authentication failed: Invalid username or password")
        if authz and authz != user:
            raise SaslAuthenticationFailed(
                "authzid differs", "Authentication failed: Client requested an authorization id that is different "
                "from username")
        self.authorization_id = user
        self.complete = True
        return b""


# ----------------------------------------------------------------------------------------------------- SCRAM

_PRINTABLE_NONCE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # printable ASCII except ','
_CLIENT_FIRST = re.compile(
    r"^(?P<gs2>n,(?:a=(?P<authzid>[^,]*))?,)(?P<bare>n=(?P<name>[^,]*),r=(?P<nonce>[^,]+)(?P<ext>(?:,[^,]*)*))$"
)
_CLIENT_FINAL = re.compile(
    r"^(?P<without_proof>c=(?P<cbind>[A-Za-z0-9+/]+=*),r=(?P<nonce>[^,]+)(?:,[^,]*)*?),p=(?P<proof>[A-Za-z0-9+/]+=*)$"
)


def _sasl_name_to_user(name: str) -> str:
    # RFC 5802: ',' and '=' in a name are sent as =2C and =3D; any other '=' is invalid
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationFailed("bad saslname", None)
    return name.replace("=2C", ",").replace("=3D", "=")


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


class ScramServer:
    """Kafka's ScramSaslServer: client-first -> server-first (combined nonce, salt, iterations) -> client-final
    (channel binding ``n,,`` echoed, nonce, proof) -> server-final (``v=`` server signature)."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self.alg = MECHANISMS[mechanism][0]
        self.lookup = lookup
        self.complete = False
        self.authorization_id: str | None = None
        self._state = "first"
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._cred: ScramCredential | None = None
        self._user = ""

    def _fail(self, detail: str, message: str | None = None) -> SaslAuthenticationFailed:
        self._state = "failed"
        return SaslAuthenticationFailed(detail, message or generic_failure(self.mechanism))

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise self._fail("token not UTF-8") from None
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise self._fail(f"unexpected token in state {self._state}")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if not m:
            # 'y,' / 'p=...' (channel binding) are not supported, as in Kafka
            raise self._fail("invalid client-first message")
        ext = m.group("ext")
        if ext:
            keys = {e.split("=", 1)[0] for e in ext.strip(",").split(",") if e}
            if keys - {"tokenauth"} or "tokenauth" in keys:
                raise self._fail("unsupported SCRAM extensions")
        nonce = m.group("nonce")
        if not _PRINTABLE_NONCE.match(nonce):
            raise self._fail("invalid client nonce")
        user = _sasl_name_to_user(m.group("name"))
        cred = self.lookup(user, self.mechanism)
        if cred is None:
            raise self._fail("unknown user")  # not named: the detail is logged (see PlainServer)
        authz = m.group("authzid")
        if authz and authz != user:
            raise self._fail("authzid differs", "Authentication failed: Client requested an authorization id "
                             "that is different from username")
        if cred.iterations < MIN_ITERATIONS:
            raise self._fail(f"iterations {cred.iterations} below {MIN_ITERATIONS}")
        self._gs2, self._client_first_bare, self._cred, self._user = m.group("gs2"), m.group("bare"), cred, user
        # the server's part as Kafka's ScramFormatter.secureRandomString: 130 random bits in base 36
        self._nonce = nonce + _base36(secrets.randbits(130))
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.match(text)
        if not m:
            raise self._fail("invalid client-final message")
        try:
            cbind = base64.b64decode(m.group("cbind"), validate=True).decode()
            proof = base64.b64decode(m.group("proof"), validate=True)
        except (ValueError, UnicodeDecodeError):
            raise self._fail("invalid client-final encoding") from None
        if cbind != self._gs2:
            raise self._fail("channel binding does not match the client-first GS2 header")
        if not m.group("nonce").endswith(self._nonce):
            # Kafka's ScramSaslServer checks endsWith, not equality: librdkafka 2.0 (kcat 1.7) sends its own nonce
            # followed by the server's whole nonce (its own nonce again, then the server's part)
            raise self._fail("Invalid client nonce in the final client message.")
        cred = self._cred
        assert cred is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{m.group('without_proof')}".encode()
        client_signature = hmac_(self.alg, cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._fail("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self.alg, client_key).digest(), cred.stored_key):
            raise self._fail("Invalid client credentials")
        server_signature = hmac_(self.alg, cred.server_key, auth_message)
        self._state = "complete"
        self.complete = True
        self.authorization_id = self._user
        self._cred = None
        return f"v={base64.b64encode(server_signature).decode()}".encode()

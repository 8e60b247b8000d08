"""Kafka's ``SaslServerAuthenticator`` on a connection of a SASL listener (docs/decisions/0026-listeners-tls-sasl.md):
only ApiVersions, SaslHandshake and SaslAuthenticate until a mechanism (PLAIN, SCRAM-SHA-256/512)
completes, frames at most ``sasl.server.max.receive.size``; anything else closes the connection. KIP-368: a
session lifetime, and re-authentication on the same connection with the same mechanism and principal.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from tidelog.broker.api_names import (
    API_VERSIONS_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    api_name,
    api_versions_unsupported_body,
)
from tidelog.broker.connection_io import ConnectionIO
from tidelog.broker.security.sasl import PlainServer, SaslAuthenticationFailed, ScramServer
from tidelog.errors import ErrorCode
from tidelog.protocol import codec
from tidelog.protocol.exceptions import InvalidRequestError, UnknownApiKeyError, UnsupportedVersionError

log = logging.getLogger("tidelog.broker.server")

UNSUPPORTED_SASL_MECHANISM = ErrorCode.UNSUPPORTED_SASL_MECHANISM
SASL_AUTHENTICATION_FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED


class SaslAuthenticator(ConnectionIO):
    """A connection's authentication: :meth:`secure` (overridden by TLS for its handshake), :meth:`authenticate`
    and the KIP-368 session expiry."""

    if TYPE_CHECKING:
        async def process(self, frame: bytes | memoryview) -> bool:
            """The request loop's dispatch (:class:`tidelog.broker.connection.Connection`): ApiVersions during
            the handshake goes through it."""

    # -- security ----------------------------------------------------------------------------------------------

    async def secure(self) -> bool:
        """TLS handshake (TlsConnection) and SASL authentication, as the listener requires. False: close."""
        listener = self.listener
        if listener is not None and listener.sasl:
            return await self.authenticate()
        return True

    async def _respond(self, api_key: int, version: int, correlation_id: int, body: dict) -> None:
        await self.write_chunks(codec.encode_response(api_key, version, correlation_id, body))

    def _sasl_close(self, reason: str, **kv: object) -> bool:
        log.info("closing connection: " + reason, extra={"kv": {"peer": self.peer, **kv}})
        self.broker.metrics.record_close("sasl")
        return False

    async def authenticate(self, first: memoryview | bytes | None = None) -> bool:
        """Kafka's SaslServerAuthenticator: ApiVersions (any number) and SaslHandshake, then the mechanism's
        tokens in SaslAuthenticate requests (handshake v1) or as raw size-prefixed frames (handshake v0).
        Frames are held to ``sasl.server.max.receive.size``; any other request, an unknown mechanism or a
        refused token closes the connection (a refusal is answered first when SaslAuthenticate can carry it).

        ``first``: the SaslHandshake of a re-authentication (KIP-368) on an authenticated connection: same
        mechanism and same principal, or the connection is closed."""
        listener = self.listener
        assert listener is not None
        broker = self.broker
        frames = self._frames
        frames.max_size = listener.sasl_max_receive_size
        reauth = first is not None
        mech: PlainServer | ScramServer | None = None
        headers = True
        frame: memoryview | bytes | None
        try:
            while not self.closed:
                if first is not None:
                    frame, first = first, None
                else:
                    frame = await self.read_frame()
                if frame is None:
                    return False
                if mech is not None and not headers:  # handshake v0: a raw token
                    token, header = bytes(frame), None
                else:
                    try:
                        header, body = codec.decode_request(frame, broker.accepted_versions)
                    except UnsupportedVersionError as exc:
                        if exc.api_key == API_VERSIONS_KEY and mech is None:
                            await self._respond(API_VERSIONS_KEY, 0, exc.correlation_id,
                                                api_versions_unsupported_body(broker))
                            continue
                        return self._sasl_close("unsupported version during SASL authentication",
                                                api=api_name(exc.api_key), version=exc.version)
                    except (UnknownApiKeyError, InvalidRequestError) as exc:
                        return self._sasl_close("invalid request during SASL authentication", error=str(exc))
                    key = header.api_key
                    if mech is None:
                        if key == API_VERSIONS_KEY:
                            if not await self.process(frame):
                                return False
                            continue
                        if key != SASL_HANDSHAKE_KEY:
                            return self._sasl_close(f"Unexpected Kafka request of type {api_name(key)} during "
                                                    "SASL handshake.")
                        name = body.get("mechanism") or ""
                        if reauth and name != self.sasl_mechanism:
                            await self._respond(key, header.api_version, header.correlation_id,
                                                {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                                 "mechanisms": [self.sasl_mechanism]})
                            return self._sasl_close("SASL mechanism change during re-authentication is not allowed",
                                                    mechanism=name)
                        if name not in listener.sasl_mechanisms:
                            await self._respond(key, header.api_version, header.correlation_id,
                                                {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                                 "mechanisms": list(listener.sasl_mechanisms)})
                            return self._sasl_close("unsupported SASL mechanism", mechanism=name)
                        mech = (PlainServer(listener.plain_users) if name == "PLAIN"
                                else ScramServer(name, broker.scram_credentials.get))
                        headers = header.api_version >= 1
                        await self._respond(key, header.api_version, header.correlation_id,
                                            {"error_code": 0, "mechanisms": list(listener.sasl_mechanisms)})
                        continue
                    if key != SASL_AUTHENTICATE_KEY:
                        return self._sasl_close(f"Unexpected Kafka request of type {api_name(key)} during SASL "
                                                "authentication.")
                    token = bytes(body.get("auth_bytes") or b"")
                    self.sasl_authenticate_version = header.api_version
                try:
                    challenge = mech.evaluate(token)
                except SaslAuthenticationFailed as exc:
                    if reauth:
                        exc.client_message = (exc.client_message or "").replace("during authentication",
                                                                                "during re-authentication")
                    log.info("Failed authentication", extra={"kv": {"peer": self.peer, "mechanism": mech.mechanism,
                                                                    "reason": str(exc)}})
                    broker.metrics.record_error("SASL_AUTHENTICATE", "SASL_AUTHENTICATION_FAILED")
                    if header is not None:
                        await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                            {"error_code": SASL_AUTHENTICATION_FAILED,
                                             "error_message": exc.client_message, "auth_bytes": b"",
                                             "session_lifetime_ms": 0})
                    return self._sasl_close("authentication failed", mechanism=mech.mechanism)
                lifetime = 0
                principal = ""
                if mech.complete:
                    assert mech.authorization_id is not None  # set when the exchange completes
                    principal = "User:" + mech.authorization_id
                    if reauth and principal != self.principal:
                        msg = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                        if header is not None:
                            await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                                {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": msg,
                                                 "auth_bytes": b"", "session_lifetime_ms": 0})
                        return self._sasl_close("principal change during re-authentication")
                    if listener.reauth_ms > 0:
                        lifetime = listener.reauth_ms
                        self.session_expires = self._loop.time() + lifetime / 1000.0
                if header is not None:
                    await self._respond(SASL_AUTHENTICATE_KEY, header.api_version, header.correlation_id,
                                        {"error_code": 0, "error_message": None, "auth_bytes": challenge,
                                         "session_lifetime_ms": lifetime})
                else:
                    await self._send_buffers([struct.pack(">i", len(challenge)), challenge])
                if mech.complete:
                    self.principal = principal
                    self.sasl_mechanism = mech.mechanism
                    log.info("re-authenticated" if reauth else "authenticated",
                             extra={"kv": {"peer": self.peer, "principal": self.principal,
                                           "mechanism": mech.mechanism, "listener": listener.name}})
                    return True
            return False
        finally:
            frames.max_size = broker.config.socket_request_max_bytes

    def _session_expired(self) -> bool:
        """KIP-368: a request after the SASL session expired (without re-authentication) closes the connection."""
        expires = self.session_expires
        if expires is None or self._loop.time() <= expires:
            return False
        log.info("closing connection: SASL session expired",
                 extra={"kv": {"peer": self.peer, "principal": self.principal}})
        self.broker.metrics.record_close("sasl_session_expired")
        return True
